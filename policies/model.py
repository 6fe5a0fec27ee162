"""A workload policy, validated: what the cluster must look like, when, and under which limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

# workload names: any, within what every output can carry as it is (a Kubernetes label value and
# DNS label, a Terraform identifier after names.ident, a cloud tag): lower case letters, digits
# and inner dashes, 1-30 characters, starting with a letter; at most MAX_WORKLOADS of them
WORKLOAD_NAME = r"[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?"
MAX_WORKLOADS = 16
EXAMPLE_WORKLOADS = ("training", "inference")
INTERCONNECTS = ("any", "efa", "rdma", "infiniband")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


WORK_UNITS = ("tokens_per_s", "samples_per_s")


@dataclass(frozen=True)
class Amount:
    """A demand: absolute GPUs, a fraction of the policy's total, or work a second (``work`` in
    ``unit``: tokens_per_s or samples_per_s) for a workload that names a model."""

    gpus: int | None = None
    fraction: Decimal | None = None
    work: int | None = None
    unit: str | None = None


@dataclass(frozen=True)
class WorkDemand:
    """A workload whose demand is work, not GPUs: the model, the precisions it may run at, and the
    lengths (or benchmark dataset) that pick its throughput rows; ``sequences`` concurrent
    sequences a replica holds (for the memory fit)."""

    unit: str
    model: str
    precisions: tuple[str, ...]
    input_tokens: int | None = None
    output_tokens: int | None = None
    dataset: str | None = None
    sequences: int | None = None


@dataclass(frozen=True)
class Window:
    name: str
    start_hour: int  # local hour the window opens, 0..23
    end_hour: int  # local hour it closes (exclusive; may wrap past midnight)
    days: tuple[str, ...]  # days of the week it applies to (by its start day)
    demand: dict[str, Amount]


@dataclass(frozen=True)
class WorkloadPolicy:
    max_spot_fraction: Decimal = Decimal("0.5")
    node_gpus: int | None = None
    gang: bool = False
    spread_zones: int = 1
    lost_hours_per_interruption: Decimal = Decimal(0)
    interconnect: str = "any"  # any | efa | rdma | infiniband: the offers it may use
    work: WorkDemand | None = None  # demand in work units (tokens or samples a second)


@dataclass(frozen=True)
class OfferCap:
    cloud: str = "*"
    region: str = "*"
    zone: str = "*"
    instance_type: str = "*"
    market: str = "*"
    max_instances: int = 0


@dataclass(frozen=True)
class RegionCap:
    cloud: str
    region: str
    max_instances: int


@dataclass(frozen=True)
class Policy:
    name: str
    gpu: str | None
    gpus: int | None
    timezone: str
    horizon_hours: int
    workloads: dict[str, WorkloadPolicy]
    default_demand: dict[str, Amount]
    windows: tuple[Window, ...]
    markets: tuple[str, ...] | None = None
    clouds_allow: tuple[str, ...] = ()
    clouds_deny: tuple[str, ...] = ()
    regions_allow: tuple[str, ...] = ()
    regions_deny: tuple[str, ...] = ()
    offer_caps: tuple[OfferCap, ...] = ()
    region_caps: tuple[RegionCap, ...] = ()
    budget_per_hour: Decimal | None = None
    interruptions_per_hour: dict[str, Decimal] = field(default_factory=dict)
    max_price_age_hours: Decimal = Decimal(24)
