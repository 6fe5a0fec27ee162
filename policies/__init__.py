"""policies — see the package modules."""
