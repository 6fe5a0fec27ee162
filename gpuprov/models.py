"""Shared value types: clouds, markets, offers, workloads and plans.

Everything here is a frozen dataclass or an enum; money is ``Decimal`` (US dollars),
times are timezone-aware UTC. Nothing in this module performs I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

HOURS_PER_MONTH = Decimal(730)
# Expected interruptions per instance-hour on spot, by cloud, used by plans from flags and
# policies alike (a policy may override them). AWS: the Spot Instance Advisor puts most GPU
# types in its ">20% a month" bucket (≈ 0.2 / 730 h); GCP and Azure publish no rate and can
# preempt at any time, so about one a month (1 / 730 h) is assumed.
# the times a price history may hold (pricing.history, the history store, backtest flags):
# anything outside is a typo or a unit error, and years near 1 or 9999 overflow datetime arithmetic
HISTORY_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
HISTORY_LATEST = datetime(2100, 1, 1, tzinfo=UTC)
DEFAULT_INTERRUPTIONS_PER_HOUR = {"aws": Decimal("0.0003"), "gcp": Decimal("0.0014"), "azure": Decimal("0.0014")}
# Hours of a workload's work lost per spot interruption (training restarts from a checkpoint).
DEFAULT_LOST_HOURS = {"training": Decimal("1.0"), "inference": Decimal("0.05")}


class Cloud(StrEnum):
    AWS = "aws"
    GCP = "gcp"
    AZURE = "azure"


class Market(StrEnum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"
    RESERVED_1Y = "reserved_1y"
    RESERVED_3Y = "reserved_3y"

    @property
    def is_reserved(self) -> bool:
        return self in (Market.RESERVED_1Y, Market.RESERVED_3Y)


class Site(NamedTuple):
    """Where capacity can be refused: a cloud's location (zone, or region where regional), an
    instance type and a market. The key of pools marked unavailable and of reservations held."""

    cloud: str
    location: str
    instance_type: str
    market: str

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        """Read (pydantic, plan documents) as the plain 4-string array it is written as: the same
        strict checks, messages and JSON Schema as ``tuple[str, str, str, str]``, typed after."""
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(lambda t: cls(*t), handler(tuple[str, str, str, str]))

    def with_workload(self, workload: str) -> WorkloadSite:
        return WorkloadSite(self.cloud, self.location, self.instance_type, self.market, workload)


class WorkloadSite(NamedTuple):
    """A Site serving one workload: what runs now, as the rebalancer tells the optimizer."""

    cloud: str
    location: str
    instance_type: str
    market: str
    workload: str

    @property
    def site(self) -> Site:
        return Site(self.cloud, self.location, self.instance_type, self.market)


class PoolKey(NamedTuple):
    """One purchasable pool: cloud, region, zone ("" where the price is regional), instance type,
    market. A tuple, so it compares and hashes like the plain tuples stored before it."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str

    @property
    def location(self) -> str:
        return self.zone or self.region

    @property
    def site(self) -> Site:
        return Site(self.cloud, self.location, self.instance_type, self.market)

    def with_workload(self, workload: str) -> WorkloadPool:
        return WorkloadPool(self.cloud, self.region, self.zone, self.instance_type, self.market, workload)


class WorkloadPool(NamedTuple):
    """A pool serving one workload: what makes two instances interchangeable."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    workload: str

    @property
    def key(self) -> PoolKey:
        return PoolKey(self.cloud, self.region, self.zone, self.instance_type, self.market)

    @property
    def location(self) -> str:
        return self.zone or self.region

    @property
    def site(self) -> Site:
        return Site(self.cloud, self.location, self.instance_type, self.market)

    @property
    def workload_site(self) -> WorkloadSite:
        return WorkloadSite(self.cloud, self.location, self.instance_type, self.market, self.workload)


class SolveStatus(StrEnum):
    """What the solver proved: the optimum within the gap asked for, or a feasible plan (time limit)."""

    OPTIMAL = "Optimal"
    FEASIBLE = "Feasible"


class Decision(StrEnum):
    """What a rebalancing pass decided."""

    ADOPT = "adopt"
    KEEP = "keep"
    SKIPPED = "skipped"
    FAILED = "failed"


class JournalState(StrEnum):
    """A journalled cloud call: written pending before the call, done or failed after."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Offer:
    """One purchasable pool: an instance type in one location and market at one price.

    ``zone`` is None where the price is regional (Azure, AWS reservations).
    ``hourly_usd`` is per instance and effective (commitments amortised over their term).
    """

    cloud: Cloud
    region: str
    zone: str | None
    instance_type: str
    gpu: str
    gpus_per_instance: int
    gpu_memory_gib: int
    vcpus: int
    memory_gib: Decimal
    market: Market
    hourly_usd: Decimal
    interconnect: str | None = None
    currency: str = "USD"
    # spot only: expected interruptions per instance-hour of this pool and where that rate comes
    # from ("aws-spot-advisor:<5%", "default:gcp"); None where nothing is known about the pool
    interruptions_per_hour: Decimal | None = None
    interruption_source: str | None = None
    flags: tuple[str, ...] = ()  # "suspect-spot", "suspect-on-demand": see pricing/quality.py
    # a share of one GPU (Azure NV4as_v4 = 1/8 MI25): such an offer holds no whole GPU, is shown
    # with its share and priced per whole GPU, and no plan uses it
    gpu_fraction: Decimal | None = None
    # when the source row this offer comes from was priced (aware UTC); None: the snapshot's as-of
    as_of: datetime | None = None

    @property
    def location(self) -> str:
        """The narrowest place this offer names: its zone, or its region when it has none."""
        return self.zone or self.region

    @property
    def gpus(self) -> Decimal:
        """GPUs per instance: a share of one where the size is fractional."""
        return self.gpu_fraction if self.gpu_fraction is not None else Decimal(self.gpus_per_instance)

    @property
    def usd_per_gpu_hour(self) -> Decimal:
        return self.hourly_usd / self.gpus

    @property
    def key(self) -> PoolKey:
        return PoolKey(self.cloud.value, self.region, self.zone or "", self.instance_type, self.market.value)

    @property
    def site(self) -> Site:
        return Site(self.cloud.value, self.location, self.instance_type, self.market.value)


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What the catalog knows about one stored price snapshot."""

    id: int
    source: str
    cloud: Cloud
    fetched_at: datetime
    row_count: int
    current: bool


@dataclass(frozen=True, slots=True)
class ReplicaRate:
    """Work-unit demand: what one replica of a model on ``tensor_parallel`` GPUs of one GPU model
    does, in its workload's unit a second (tokens or samples), and the throughput row it rests on."""

    gpu: str
    tensor_parallel: int
    work_per_s: Decimal
    source: str = ""


@dataclass(frozen=True, slots=True)
class Workload:
    """One workload's shape: how many GPUs a node has, how much spot, gang or spread.

    Demand is in GPUs unless ``replicas`` is set: then it is in ``unit`` (tokens or samples a
    second) and an instance of GPU model m with g GPUs does the work of g // t replicas of the
    best (m, t) it holds (``optimizer.problem.work``); ``gpu_models`` narrows the GPU models w may
    use (None: any the request's offers carry)."""

    name: str
    max_spot_fraction: Decimal = Decimal("0.5")
    node_gpus: int | None = None
    gang: bool = False
    spread_zones: int = 1
    lost_hours_per_interruption: Decimal = Decimal(0)
    # the offers' interconnect values w accepts (policy workloads.<name>.interconnect); None: any
    interconnect: tuple[str, ...] | None = None
    unit: str = "gpus"  # gpus | tokens_per_s | samples_per_s
    replicas: tuple[ReplicaRate, ...] = ()
    gpu_models: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """Instances of one on-demand or spot offer serving one workload, per slot."""

    offer: Offer
    workload: str
    instances_by_slot: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Reservation:
    """Reserved instances of one reserved offer, held (and paid) in every slot.

    ``gpus_used_by_slot`` gives, per workload, how many of their GPUs it uses in each slot:
    whole instances' worth for a workload with a node size or a gang, whole GPUs otherwise.
    """

    offer: Offer
    instances: int
    gpus_used_by_slot: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """The optimizer's answer. Costs are in USD over the horizon (``slot_hours`` per slot)."""

    gpu: str
    demand: dict[str, tuple[int, ...]]
    allocations: tuple[Allocation, ...]
    reservations: tuple[Reservation, ...]
    slot_cost_usd: tuple[Decimal, ...]
    lower_bound_usd: Decimal
    status: str
    solver: str
    offers_considered: int
    offers_dropped: int
    binding: tuple[str, ...] = ()
    objective_usd: Decimal | None = None  # what was minimised: cost + interruption overhead + migration
    notes: tuple[str, ...] = ()
    expected_interruption_usd: Decimal = Decimal(0)  # over the horizon, on spot
    # commitments: per id (held, or a Savings Plan bought), what it covers in each slot (instances,
    # or USD an hour of a Savings Plan); what held ones cost over the horizon, used or not (part
    # of slot_cost_usd); the Savings Plans bought and their levels (USD an hour)
    held_used: dict[str, tuple[Decimal, ...]] = field(default_factory=dict)
    held_cost_usd: Decimal = Decimal(0)
    held_covered_usd: dict[str, Decimal] = field(default_factory=dict)  # on-demand USD each one covers
    savings_plans: tuple[tuple[Any, Decimal], ...] = ()
    # where the time went (seconds per phase: reductions, parts, build, lp, start, milp, …) and
    # the relative gap asked for (a "Feasible" plan stopped at the time limit short of it)
    phases: tuple[tuple[str, float], ...] = ()
    gap_asked: float | None = None

    @property
    def horizon_hours(self) -> int:
        return len(self.slot_cost_usd)

    @property
    def total_cost_usd(self) -> Decimal:
        return sum(self.slot_cost_usd, Decimal(0))

    @property
    def gap(self) -> Decimal:
        """Relative gap between what was minimised and the proven lower bound on it."""
        total = self.objective_usd if self.objective_usd is not None else self.total_cost_usd
        if total == 0:
            return Decimal(0)
        return max(Decimal(0), (total - self.lower_bound_usd) / total)


@dataclass(frozen=True, slots=True)
class InstanceHandle:
    cloud: Cloud
    instance_id: str
    region: str
    zone: str | None
    instance_type: str
    market: Market
    state: str
    owner: str
    plan_id: str
    token: str
    workload: str
    launched_at: datetime | None = None
    problem: str | None = None  # gpuprov tags that did not parse (the instance is still owned)

    @property
    def pool(self) -> WorkloadPool:
        """What makes instances interchangeable: cloud, region, zone, type, market, workload."""
        return WorkloadPool(
            self.cloud.value, self.region, self.zone or "", self.instance_type, self.market.value, self.workload
        )

    @property
    def site(self) -> Site:
        return Site(self.cloud.value, self.zone or self.region, self.instance_type, self.market.value)
