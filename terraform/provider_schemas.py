"""The provider schemas bundled in ``terraform/schemas/`` (see its PROVENANCE.md), loaded once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

PROVIDER_DIRS = ("aws", "google", "azurerm")


@dataclass(frozen=True)
class Schemas:
    """``resources``: resource type → its ``block``; ``providers``: provider local name → its ``block``."""

    resources: dict[str, dict[str, Any]]
    providers: dict[str, dict[str, Any]]

    def provider_of(self, resource_type: str) -> str:
        """The provider local name a resource type belongs to (its prefix before the first ``_``)."""
        return resource_type.split("_", 1)[0]


@lru_cache(maxsize=1)
def load_schemas() -> Schemas:
    root = resources.files("terraform").joinpath("schemas")
    found: dict[str, dict[str, Any]] = {}
    providers: dict[str, dict[str, Any]] = {}
    for provider in PROVIDER_DIRS:
        folder = root.joinpath(provider)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".json"):
                continue
            block = json.loads(entry.read_text(encoding="utf-8"))["block"]
            if entry.name == "provider.json":
                providers[provider] = block
            else:
                found[entry.name.removesuffix(".json")] = block
    if not found or len(providers) != len(PROVIDER_DIRS):
        raise RuntimeError("terraform/schemas is incomplete: reinstall gpuprov")
    return Schemas(resources=found, providers=providers)


# The provider versions the bundled *resource* schemas come from (see schemas/PROVENANCE.md),
# and the registry source each local name stands for.
SCHEMA_VERSIONS = {"aws": "6.47.0", "google": "6.50.0", "azurerm": "4.79.0"}
SCHEMA_SOURCES = {"aws": "hashicorp/aws", "google": "hashicorp/google", "azurerm": "hashicorp/azurerm"}
