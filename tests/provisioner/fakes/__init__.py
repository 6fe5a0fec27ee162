"""Stateful fakes of cloud HTTP APIs, served through `responses` into the real SDK clients."""
