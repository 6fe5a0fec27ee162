"""The one error tree of gpuprov (a leaf module: at run time it imports nothing of the project).

::

    GpuprovError                     root; carries a one-line message, an optional hint, an exit code
    ├── UsageError          (2)      bad flags or values on the command line
    │   └── UnknownGpuError (2)      a GPU name that resolves to nothing
    ├── ConfigError         (2)      config or policy files
    ├── PlanFormatError     (2)      a plan document that does not validate (or another schema version)
    ├── MissingExtraError   (2)      a cloud SDK extra is not installed
    ├── StoreError          (5)      the local catalog/state database
    ├── PricingError        (4)      a price source failed, or prices are unusable
    │   └── StalePricesError(4)
    ├── PlanningError       (3)      the optimizer
    │   ├── InfeasibleError (3)      the constraints cannot be met together
    │   ├── SolverError     (3)      the solver failed
    │   └── TimeLimitError  (6)      the time limit ran out before any plan was found (not a proof
    │                                that none exists: the message says what was tried, the hint what to relax)
    ├── ProvisioningError   (4)      cloud calls
    │   ├── CapacityError   (4)      no capacity for (cloud, zone, instance type, market) now
    │   │   └── QuotaError  (4)      an account limit: a CapacityError, so it too marks the pool unavailable
    │   ├── CredentialsError(4)      no or bad credentials (never printed)
    │   ├── TransientError  (4)      throttling, 5xx: retried, then this
    │   ├── UnreachableError(4)      "cannot reach <cloud> <endpoint>": refused, DNS, proxy, TLS (retried
    │   │                            a bounded number of times first), or no answer in time (sdk/net.py)
    │   └── GuardError      (4)      a safety guard refused: budget, circuit breaker, stale prices
    ├── DeadlineError       (4)      the command's --deadline passed: it stopped, released its lease, said what it did
    └── StateError          (5)      the local journal or a lease disagrees with what is asked

``gpuprov.cli`` turns every ``GpuprovError`` that reaches it into one ``error:`` line and its exit
code. Inside, an error is caught only where a run deliberately goes on without the part that
failed, and says so: the rebalancer records a failed pass (and, as a service, waits for the next),
fleet discovery reports a cloud it could not ask, a price refresh keeps the failed cloud's
previous snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuprov.models import Site


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


class PlanFormatError(GpuprovError):
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
    """The solver itself failed (not a statement about the request)."""

    exit_code = 8


class TimeLimitError(PlanningError):
    exit_code = 6


class ProvisioningError(GpuprovError):
    exit_code = 4


class CapacityError(ProvisioningError):
    """The cloud has no capacity for this pool now; ``pool`` is where: (cloud, zone, instance type, market)."""

    def __init__(self, message: str, pool: Site, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.pool = pool


class QuotaError(CapacityError):
    pass


class CredentialsError(ProvisioningError):
    pass


class TransientError(ProvisioningError):
    pass


class GuardError(ProvisioningError):
    pass


class UnreachableError(ProvisioningError):
    """A cloud or price endpoint could not be reached, or did not answer in time; never retried
    by the launch loop (the SDK's bounded connection retries came first)."""


class DeadlineError(GpuprovError):
    exit_code = 4


class StateError(GpuprovError):
    exit_code = 5
