"""gpuprov: the cheapest way to hold a GPU cluster, hour by hour."""

__version__ = "0.1.0"  # the one place the version is written (pyproject reads it)
