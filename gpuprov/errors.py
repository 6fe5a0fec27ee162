"""The one error tree of gpuprov (a leaf module: it imports nothing of the project).

::

    GpuprovError                     root; carries a one-line message, an optional hint, an exit code
    ├── UsageError          (2)      bad flags or values on the command line
    │   └── UnknownGpuError (2)      a GPU name that resolves to nothing
    ├── ConfigError         (2)      config or policy files
    ├── MissingExtraError   (2)      a cloud SDK extra is not installed
    ├── StoreError          (5)      the local catalog/state database
    ├── PricingError        (4)      a price source failed, or prices are unusable
    │   └── StalePricesError(4)
    ├── PlanningError       (3)      the optimizer
    │   ├── InfeasibleError (3)      the constraints cannot be met together
    │   └── SolverError     (3)      the solver failed or ran out of time without an answer
    └── ProvisioningError   (4)      cloud calls: capacity, quota, credentials, transient

Only ``gpuprov.cli`` catches ``GpuprovError``; everything else raises.
"""

from __future__ import annotations


class GpuprovError(Exception):
    """Root of every error gpuprov raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(GpuprovError):
    exit_code = 2


class UnknownGpuError(UsageError):
    pass


class ConfigError(GpuprovError):
    exit_code = 2


class MissingExtraError(GpuprovError):
    exit_code = 2


class StoreError(GpuprovError):
    exit_code = 5


class PricingError(GpuprovError):
    exit_code = 4


class StalePricesError(PricingError):
    pass


class PlanningError(GpuprovError):
    exit_code = 3


class InfeasibleError(PlanningError):
    pass


class SolverError(PlanningError):
    pass


class ProvisioningError(GpuprovError):
    exit_code = 4
