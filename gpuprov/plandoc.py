"""The plan document: the one typed, versioned artifact between planning and everything after it.

``gpuprov plan`` writes it; ``apply``, ``status``, the rebalancer, ``terraform``, the chart and
``plans`` read it, all through ``from_json``, which validates (pydantic, strict, unknown keys
refused) and refuses documents of another schema version with one line naming the field.

Units: every ``*_usd`` is US dollars, as a decimal string in JSON (exact, never a float);
``hourly_*`` is per hour (the average over the horizon where the plan varies by slot),
``horizon_*`` is over the plan's whole horizon (``horizon_hours`` hours: 1, 24 or 168), and
``monthly_*`` is 730 times the hourly figure. A reservation's ``commitment_total_usd`` is over its
whole term (``term_hours``), which is far longer than the horizon.

Writing is by hand (``to_json``, no pydantic on the plan command's start-up path); reading is
checked against the same dataclasses, and a test checks ``from_json(to_json(doc)) == doc`` for
every plan the planner makes in the test suite. ``json_schema()`` is generated from the model.
"""

from __future__ import annotations

import json
import math
import zoneinfo
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal

from gpuprov.errors import PlanFormatError
from gpuprov.models import Market, ReplicaRate, Site, Workload, WorkloadPool

SCHEMA_VERSION = 4
# Older versions this one reads: each differs from the next only by fields added with a default,
# so a saved plan of that version reads as it did and gets the defaults (4: a reservation's
# on-demand price, what its instances bill until it is bought).
UPGRADES_FROM = (3,)
CYCLE_HOURS = {"constant": 1, "day": 24, "week": 168}
TERM_HOURS = {"reserved_1y": 8760, "reserved_3y": 26280}
MAX_DOCUMENT_BYTES = 64 * 2**20

CloudName = Literal["aws", "gcp", "azure"]
MarketName = Literal["on_demand", "spot", "reserved_1y", "reserved_3y"]
SlotOrigin = Literal["constant", "day", "week"]
BaselineName = Literal["all_on_demand", "best_single_offer", "reserved_plus_spot"]
CommitmentKind = Literal["reserved_instance", "committed_use", "reservation", "savings_plan", "capacity_reservation"]

# pydantic reads this off each (stdlib) dataclass: unknown keys are errors, no type coercion.
_STRICT = {"extra": "forbid", "strict": True}


@dataclass(frozen=True)
class ReplicaSpec:
    """Work-unit demand: one replica of the model on ``tensor_parallel`` GPUs of ``gpu`` does
    ``work_per_s`` of the workload's unit a second (``source``: the throughput row)."""

    __pydantic_config__ = _STRICT

    gpu: str
    tensor_parallel: int
    work_per_s: Decimal
    source: str = ""


WORK_UNITS = ("gpus", "tokens_per_s", "samples_per_s")


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload's shape, as the request gave it."""

    __pydantic_config__ = _STRICT

    name: str
    max_spot_fraction: Decimal = Decimal("0.5")
    node_gpus: int | None = None
    gang: bool = False
    spread_zones: int = 1
    lost_hours_per_interruption: Decimal = Decimal(0)
    interconnect: tuple[str, ...] | None = None  # offers' interconnect values accepted; None: any
    # demand in work units (request.demand then counts tokens or samples a second, not GPUs)
    unit: Literal["gpus", "tokens_per_s", "samples_per_s"] = "gpus"
    replicas: tuple[ReplicaSpec, ...] = ()
    gpu_models: tuple[str, ...] | None = None  # the GPU models it may use; None: the request's

    def workload(self) -> Workload:
        return Workload(
            name=self.name,
            max_spot_fraction=self.max_spot_fraction,
            node_gpus=self.node_gpus,
            gang=self.gang,
            spread_zones=self.spread_zones,
            lost_hours_per_interruption=self.lost_hours_per_interruption,
            interconnect=self.interconnect,
            unit=self.unit,
            replicas=tuple(ReplicaRate(r.gpu, r.tensor_parallel, r.work_per_s, r.source) for r in self.replicas),
            gpu_models=self.gpu_models,
        )

    @classmethod
    def of(cls, w: Workload) -> WorkloadSpec:
        return cls(
            name=w.name,
            max_spot_fraction=w.max_spot_fraction,
            node_gpus=w.node_gpus,
            gang=w.gang,
            spread_zones=w.spread_zones,
            lost_hours_per_interruption=w.lost_hours_per_interruption,
            interconnect=w.interconnect,
            unit=w.unit,  # type: ignore[arg-type]
            replicas=tuple(ReplicaSpec(r.gpu, r.tensor_parallel, r.work_per_s, r.source) for r in w.replicas),
            gpu_models=w.gpu_models,
        )


@dataclass(frozen=True)
class OfferCapSpec:
    """At most ``max_instances`` of the offers matching these globs (per slot; reservations: held)."""

    __pydantic_config__ = _STRICT

    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    max_instances: int


@dataclass(frozen=True)
class RegionCapSpec:
    __pydantic_config__ = _STRICT

    cloud: str
    region: str
    max_instances: int


@dataclass(frozen=True)
class HeldSpec:
    """A commitment the team held when the plan was made (``gpuprov commitments list``): counted
    kinds hold ``count`` instances at ``hourly_usd`` each; a Savings Plan ``usd_per_hour``."""

    __pydantic_config__ = _STRICT

    id: str
    cloud: CloudName
    kind: CommitmentKind
    starts: datetime
    ends: datetime
    hourly_usd: Decimal  # counted: per instance-hour; Savings Plan: its USD an hour
    instance_type: str | None = None
    family: str | None = None
    region: str | None = None
    zone: str | None = None
    count: int | None = None
    usd_per_hour: Decimal | None = None
    term: str | None = None
    discount: Decimal | None = None


@dataclass(frozen=True)
class RequestSpec:
    """Everything needed to solve the plan again on other prices (failover, rebalancing)."""

    __pydantic_config__ = _STRICT

    gpu_names: tuple[str, ...]
    workloads: tuple[WorkloadSpec, ...]
    demand: dict[str, tuple[int, ...]]  # per workload per slot: GPUs, or its unit (WorkloadSpec.unit)
    clouds_allow: tuple[str, ...] = ()
    clouds_deny: tuple[str, ...] = ()
    regions_allow: tuple[str, ...] = ()
    regions_deny: tuple[str, ...] = ()
    markets: tuple[MarketName, ...] | None = None
    offer_caps: tuple[OfferCapSpec, ...] = ()
    region_caps: tuple[RegionCapSpec, ...] = ()
    budget_per_hour: Decimal | None = None  # USD per hour, every slot
    interruptions_per_hour: dict[str, Decimal] = field(default_factory=dict)  # spot, by cloud
    solver: Literal["cbc", "highs"] = "cbc"
    gap: float = 0.001
    time_limit_s: float = 60.0
    held: tuple[HeldSpec, ...] = ()  # commitments already paid for, used first
    # AWS Savings Plans: kind_term (compute_1y, ec2_instance_3y, …) -> family or "*" -> share off
    savings_plan_discounts: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    # quotes flagged suspect (pricing/quality.py) are left out unless this is true (--include-suspect)
    include_suspect: bool = False


@dataclass(frozen=True)
class Window:
    """A turn of the schedule: from ``start_slot`` (inclusive) to ``end_slot``, wrapping around."""

    __pydantic_config__ = _STRICT

    name: str
    start_slot: int
    end_slot: int


@dataclass(frozen=True)
class Allocation:
    """On-demand or spot instances of one offer serving one workload, per slot (whole instances)."""

    __pydantic_config__ = _STRICT

    cloud: CloudName
    region: str
    zone: str | None
    instance_type: str
    market: MarketName
    gpu: str
    gpus_per_instance: int
    unit_hourly_usd: Decimal  # per instance-hour
    workload: str
    instances_by_slot: tuple[int, ...]
    interconnect: str | None = None
    flags: tuple[str, ...] = ()  # suspect quotes (pricing/quality.py)
    interruptions_per_hour: Decimal | None = None  # spot: the pool's expected rate, and its source
    interruption_source: str | None = None

    @property
    def instances(self) -> int:
        return max(self.instances_by_slot, default=0)

    @property
    def location(self) -> str:
        return self.zone or self.region

    @property
    def spot(self) -> bool:
        return self.market == "spot"

    @property
    def reserved(self) -> bool:
        return self.market in TERM_HOURS

    @property
    def pool(self) -> WorkloadPool:
        return WorkloadPool(self.cloud, self.region, self.zone or "", self.instance_type, self.market, self.workload)

    @property
    def site(self) -> Site:
        return Site(self.cloud, self.location, self.instance_type, self.market)


@dataclass(frozen=True)
class Reservation:
    """Reserved instances of one offer, bought for ``term_hours`` and paid every hour of it.

    ``gpus_used_by_slot`` says, per workload, how many of its GPUs serve that workload in each
    slot: whole instances for a workload with a node size or a gang, whole GPUs otherwise."""

    __pydantic_config__ = _STRICT

    cloud: CloudName
    region: str
    zone: str | None
    instance_type: str
    market: MarketName
    gpu: str
    gpus_per_instance: int
    unit_hourly_usd: Decimal  # effective per instance-hour (the term amortised)
    instances: int
    term_hours: int
    hourly_usd: Decimal  # unit × instances, every hour of the term
    commitment_total_usd: Decimal  # unit × instances × term_hours: the liability
    gpus_used_by_slot: dict[str, tuple[int, ...]]
    interconnect: str | None = None
    flags: tuple[str, ...] = ()
    # the on-demand price of the same type where it is (per instance-hour): what its instances
    # bill until the reservation is bought; None where the catalog has none
    on_demand_unit_hourly_usd: Decimal | None = None

    @property
    def location(self) -> str:
        return self.zone or self.region

    @property
    def site(self) -> Site:
        return Site(self.cloud, self.location, self.instance_type, self.market)

    @property
    def term_label(self) -> str:
        years = self.term_hours / 8760
        return f"{years:g} year" + ("" if years == 1 else "s")


@dataclass(frozen=True)
class AsOfRange:
    """The oldest and newest as-of of the offers a plan read from one cloud (each offer is dated
    by its source row)."""

    __pydantic_config__ = _STRICT

    cloud: CloudName
    oldest: datetime
    newest: datetime


@dataclass(frozen=True)
class PriceQuality:
    """What the plan left out of the catalog and why (pricing/quality.py, planning.screen)."""

    __pydantic_config__ = _STRICT

    include_suspect: bool
    suspect_left_out: int  # offers the request allows that are flagged suspect, left out
    suspect_flags: dict[str, int]  # left out, by flag
    # what the plan would cost per hour with them (a second solve), or why that is not known
    with_suspect_hourly_usd: Decimal | None
    with_suspect_note: str | None
    commitments_without_on_demand: int  # reserved offers whose type has no on-demand price there
    as_of: tuple[AsOfRange, ...] = ()


@dataclass(frozen=True)
class Costs:
    """What the plan costs. ``horizon_usd`` is what the clouds bill over the horizon;
    ``objective_usd`` is what the optimizer minimised (billed + expected spot interruption
    overhead + migration when rebalancing), and ``lower_bound_usd`` is a proven bound on that
    same quantity, so ``gap`` compares like with like."""

    __pydantic_config__ = _STRICT

    hourly_usd: Decimal
    monthly_usd: Decimal
    horizon_usd: Decimal
    slot_usd: tuple[Decimal, ...]
    expected_interruption_usd: Decimal  # over the horizon
    objective_usd: Decimal  # over the horizon
    lower_bound_usd: Decimal  # over the horizon, on objective_usd
    gap: Decimal  # (objective − bound) / objective
    total_cost_usd: Decimal  # = horizon_usd: everything, held commitments included
    marginal_cost_usd: Decimal  # total less what held commitments cost anyway


@dataclass(frozen=True)
class Recommended:
    """A new commitment the plan recommends buying: a reservation (``reservations[]`` has its
    instances and use by slot) or a Savings Plan at ``usd_per_hour``.

    ``total_usd`` is the liability: what it costs over its whole term, used or not.
    ``break_even_utilization`` is the share of the term it must be used for to cost less than
    the on-demand usage it replaces (its effective rate over the on-demand rate); ``utilization``
    is the share this plan uses over the horizon, ``saving_usd`` what it saves over the horizon
    against that usage on demand (``horizon_saving_usd``)."""

    __pydantic_config__ = _STRICT

    kind: CommitmentKind
    cloud: CloudName
    scope: str
    term_hours: int
    hourly_usd: Decimal
    total_usd: Decimal
    utilization: Decimal
    break_even_utilization: Decimal | None
    horizon_saving_usd: Decimal
    count: int | None = None
    usd_per_hour: Decimal | None = None


@dataclass(frozen=True)
class Held:
    """A commitment already paid for, as this plan uses it: ``used_by_slot`` is instances
    (counted kinds) or USD an hour of its rates (a Savings Plan) per slot; ``horizon_usd`` is what
    it costs over the horizon (its active hours), used or not, and ``unused_horizon_usd`` the part
    no usage of this plan fills."""

    __pydantic_config__ = _STRICT

    id: str
    kind: CommitmentKind
    cloud: CloudName
    scope: str
    starts: datetime
    ends: datetime
    hourly_usd: Decimal  # what it costs each active hour
    active_hours: int  # of the horizon
    used_by_slot: tuple[Decimal, ...]
    utilization: Decimal
    horizon_usd: Decimal
    unused_horizon_usd: Decimal
    covered_horizon_usd: Decimal = Decimal(0)  # the on-demand price of the usage it covers, over the horizon
    count: int | None = None
    usd_per_hour: Decimal | None = None


@dataclass(frozen=True)
class WhatIf:
    """The recommended commitments when demand turns out ``demand_scale`` times the plan's:
    the horizon cost holding them, the cost of the best plan without them, and the difference."""

    __pydantic_config__ = _STRICT

    demand_scale: Decimal
    with_commitments_horizon_usd: Decimal
    without_commitments_horizon_usd: Decimal
    regret_horizon_usd: Decimal  # with − without (> 0: the commitments cost more than they save)


@dataclass(frozen=True)
class Commitments:
    """New commitments the plan recommends (``recommended``) and those already held (``held``)."""

    __pydantic_config__ = _STRICT

    recommended: tuple[Recommended, ...]
    held: tuple[Held, ...]
    recommended_hourly_usd: Decimal  # of the recommended ones, every hour of their terms
    recommended_total_usd: Decimal  # Σ recommended total_usd: the liability over each term
    held_horizon_usd: Decimal  # Σ held horizon_usd: paid whatever the plan does
    summary: str
    what_if: WhatIf | None = None


@dataclass(frozen=True)
class Baseline:
    """A way to buy the same request without gpuprov, under the same rules; ``None`` costs with
    a ``reason`` where it cannot be built."""

    __pydantic_config__ = _STRICT

    name: BaselineName
    description: str
    horizon_usd: Decimal | None
    hourly_usd: Decimal | None
    where: str | None
    saving_usd: Decimal | None  # baseline − plan, over the horizon (billed)
    saving_fraction: Decimal | None
    reason: str | None = None


@dataclass(frozen=True)
class GpuTypeWork:
    """One GPU type considered for a workload whose demand is in work units: whether the plan
    uses it and why (or why not), its best replica, and what its work costs at the cheapest
    allowed offer. ``*_usd_per_million``: USD per million units of work (tokens or samples) at
    that offer's price, every GPU busy (price per GPU-hour / (work per GPU a second × 3600) × 10⁶)."""

    __pydantic_config__ = _STRICT

    workload: str
    gpu: str
    status: Literal["used", "not used", "left out"]
    reason: str
    tensor_parallel: int | None = None
    work_per_gpu: Decimal | None = None  # a second, in the workload's unit
    source: str | None = None  # the throughput row (file:line) of that figure
    on_demand_usd_per_gpu_hour: Decimal | None = None
    on_demand_usd_per_million: Decimal | None = None
    spot_usd_per_gpu_hour: Decimal | None = None
    spot_usd_per_million: Decimal | None = None
    peak_gpus: int = 0  # in the plan, at its busiest slot


@dataclass(frozen=True)
class SingleType:
    """The request solved on one GPU type only, under the same rules: the baseline a picker of
    one type would buy (``None`` costs with a ``reason`` where that type cannot serve it)."""

    __pydantic_config__ = _STRICT

    gpu: str
    horizon_usd: Decimal | None
    objective_usd: Decimal | None
    reason: str | None = None


@dataclass(frozen=True)
class WorkReport:
    """For a request with demand in work units: every GPU type considered, the best single-type
    plan as the baseline, and what the plan's work costs (``usd_per_million``: per workload, the
    plan's horizon cost of it over the work it is asked over the horizon, × 10⁶)."""

    __pydantic_config__ = _STRICT

    types: tuple[GpuTypeWork, ...]
    single_type: tuple[SingleType, ...]
    best_single_type: str | None
    best_single_type_horizon_usd: Decimal | None
    saving_usd: Decimal | None  # best single type − plan, over the horizon (billed)
    usd_per_million: dict[str, Decimal]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SolveInfo:
    __pydantic_config__ = _STRICT

    solver: str
    status: str
    offers_considered: int
    offers_left_out: int  # dominated, or provably unable to improve the plan
    binding: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # the relative gap asked for ("Feasible": the time limit stopped the solver short of it) and
    # the seconds each phase of the command took (catalog, reductions, parts, build, lp, start,
    # milp, baselines, …)
    gap_asked: float | None = None
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SnapshotRef:
    __pydantic_config__ = _STRICT

    id: int
    source: str
    cloud: CloudName
    fetched_at: datetime
    rows: int
    current: bool


@dataclass(frozen=True)
class PlanDocument:
    __pydantic_config__ = _STRICT

    schema_version: int
    plan_id: str
    created_at: datetime
    horizon_start: datetime  # the first slot's hour (UTC); held commitments are dated against it
    gpu: str
    gpus: int
    policy: str | None
    timezone: str
    slot_origin: SlotOrigin
    horizon_hours: int
    max_price_age_hours: Decimal
    windows: tuple[Window, ...]
    request: RequestSpec
    allocations: tuple[Allocation, ...]
    reservations: tuple[Reservation, ...]
    costs: Costs
    commitments: Commitments
    baselines: tuple[Baseline, ...]
    solve: SolveInfo
    catalog_as_of: datetime | None
    snapshots: tuple[SnapshotRef, ...]
    excluded_pools: tuple[Site, ...] = ()  # written as 4-string arrays, read back as Sites
    warnings: tuple[str, ...] = ()
    price_quality: PriceQuality | None = None
    work: WorkReport | None = None  # demand in work units: the GPU types considered and why

    # ------------------------------------------------------------------ views
    @property
    def workloads(self) -> dict[str, WorkloadSpec]:
        return {w.name: w for w in self.request.workloads}

    @property
    def demand(self) -> dict[str, tuple[int, ...]]:
        return self.request.demand

    def is_gang(self, workload: str) -> bool:
        spec = self.workloads.get(workload)
        return spec is not None and spec.gang

    def slot_at(self, when: datetime) -> int:
        """The slot an aware instant falls in, in the plan's local time."""
        return slot_of(when, self.timezone, self.slot_origin, self.horizon_hours)

    def slot_hours(self) -> tuple[datetime, ...]:
        """The UTC hour each slot falls on in the horizon that starts at ``horizon_start``."""
        return slot_hours(self.timezone, self.slot_origin, self.horizon_hours, self.horizon_start)

    def baseline(self, name: str) -> Baseline | None:
        return next((b for b in self.baselines if b.name == name), None)

    def placements(self) -> tuple[Allocation, ...]:
        """What runs, per workload and slot, in whole instances: the on-demand and spot
        allocations, and each reservation's instances in use by each workload (a reserved
        instance is run, and labelled, for the workload that uses it). Where workloads without a
        node size share a reserved instance's GPUs, the shared instances go to the workload
        with the largest share; the count never exceeds what is reserved."""
        out = list(self.allocations)
        for r in self.reservations:
            per_w: dict[str, list[int]] = {w: [0] * self.horizon_hours for w in r.gpus_used_by_slot}
            for t in range(self.horizon_hours):
                used = {w: v[t] for w, v in r.gpus_used_by_slot.items()}
                whole = {w: g // r.gpus_per_instance for w, g in used.items()}
                rest = {w: g % r.gpus_per_instance for w, g in used.items()}
                for w, n in whole.items():
                    per_w[w][t] += n
                spare = sum(rest.values())
                if spare:
                    taker = max(sorted(rest), key=lambda w: rest[w])
                    per_w[taker][t] += math.ceil(spare / r.gpus_per_instance)
            for w, counts in sorted(per_w.items()):
                if any(counts):
                    out.append(
                        Allocation(
                            cloud=r.cloud,
                            region=r.region,
                            zone=r.zone,
                            instance_type=r.instance_type,
                            market=r.market,
                            gpu=r.gpu,
                            gpus_per_instance=r.gpus_per_instance,
                            unit_hourly_usd=r.unit_hourly_usd,
                            workload=w,
                            instances_by_slot=tuple(counts),
                            interconnect=r.interconnect,
                        )
                    )
        return tuple(out)

    @property
    def clouds(self) -> tuple[str, ...]:
        present = {a.cloud for a in self.allocations} | {r.cloud for r in self.reservations}
        return tuple(c for c in ("aws", "gcp", "azure") if c in present)


def slot_of(when: datetime, timezone: str, slot_origin: str, horizon_hours: int) -> int:
    """The slot an aware instant falls in, in a plan's local time."""
    local = when.astimezone(zoneinfo.ZoneInfo(timezone))
    if horizon_hours == 1:
        return 0
    if slot_origin == "week":
        return local.weekday() * 24 + local.hour
    return local.hour


def slot_hours(timezone: str, slot_origin: str, horizon_hours: int, start: datetime) -> tuple[datetime, ...]:
    """The UTC start of each slot's first hour at or after ``start`` (floored to the hour): the
    calendar hours a plan's horizon stands for. A slot a DST change skips gets ``start + t`` h."""
    from datetime import timedelta

    first = start.replace(minute=0, second=0, microsecond=0)
    found: dict[int, datetime] = {}
    for k in range(horizon_hours + 2):
        hour = first + timedelta(hours=k)
        found.setdefault(slot_of(hour, timezone, slot_origin, horizon_hours), hour)
    return tuple(found.get(t, first + timedelta(hours=t)) for t in range(horizon_hours))


# ---------------------------------------------------------------------------- writing


def plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def to_dict(doc: PlanDocument) -> dict[str, Any]:
    """The JSON-ready form: decimals as strings, times as ISO 8601 with their offset."""
    out: dict[str, Any] = plain(asdict(doc))
    return out


def to_json(doc: PlanDocument, indent: int | None = 2) -> str:
    return json.dumps(to_dict(doc), indent=indent, ensure_ascii=False)


# ---------------------------------------------------------------------------- reading


@lru_cache(maxsize=1)
def _adapter() -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(PlanDocument)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the document, generated from the dataclasses above."""
    schema: dict[str, Any] = _adapter().json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"gpuprov plan document, schema version {SCHEMA_VERSION}"
    return schema


def from_json(data: str | bytes | Mapping[str, Any], where: str = "plan") -> PlanDocument:
    """Validate a plan document (text, or the parsed JSON object) and return it typed.

    Raises ``PlanFormatError`` with one line naming the first bad field."""
    if isinstance(data, str | bytes):
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise PlanFormatError(f"{where}: not JSON ({str(exc).splitlines()[0][:120]})") from None
    else:
        obj = data
    if not isinstance(obj, Mapping):
        raise PlanFormatError(f"{where}: a plan document is a JSON object, not {type(obj).__name__}")
    version = obj.get("schema_version")
    if version is None:
        raise PlanFormatError(
            f"{where}: no schema_version (written by gpuprov before schema {SCHEMA_VERSION})",
            hint="plan again with this gpuprov: gpuprov plan … --save",
        )
    if not isinstance(version, int) or isinstance(version, bool):
        raise PlanFormatError(f"{where}: schema_version must be a whole number, not {_short(version)}")
    if version in UPGRADES_FROM:  # read as this version: what it lacks takes its default
        obj = {**obj, "schema_version": SCHEMA_VERSION}
        data = obj
    if version != SCHEMA_VERSION and version not in UPGRADES_FROM:
        newer = "a newer" if version > SCHEMA_VERSION else "an older"
        raise PlanFormatError(
            f"{where}: schema_version {version} is from {newer} gpuprov (this one reads {SCHEMA_VERSION})",
            hint="plan again with this gpuprov" if version < SCHEMA_VERSION else "upgrade gpuprov",
        )
    _money_is_text(obj, "", where)
    from pydantic import ValidationError

    text = json.dumps(obj) if not isinstance(data, str | bytes) else data
    try:
        doc: PlanDocument = _adapter().validate_json(text, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = ".".join(str(p) for p in err["loc"]) or "(document)"
        raise PlanFormatError(f"{where}: field {path}: {err['msg']}") from None
    except RecursionError:
        raise PlanFormatError(f"{where}: nested too deeply") from None
    check(doc, where)
    return doc


MONEY_SUFFIXES = ("_usd", "_fraction", "_per_hour", "max_spot_fraction", "lost_hours_per_interruption")


def _money_is_text(node: Any, path: str, where: str, depth: int = 0) -> None:
    """Amounts are decimal strings in the document (exact); a float there is a hand edit or a bug."""
    if depth > 20:
        raise PlanFormatError(f"{where}: nested too deeply at {path or '(document)'}")
    if isinstance(node, Mapping):
        for k, v in node.items():
            here = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and k.endswith(MONEY_SUFFIXES):
                values = v.values() if isinstance(v, Mapping) else v if isinstance(v, list) else [v]
                if any(isinstance(x, float | int) and not isinstance(x, bool) for x in values):
                    raise PlanFormatError(f'{where}: field {here}: amounts are decimal strings, e.g. "1.25"')
            _money_is_text(v, here, where, depth + 1)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _money_is_text(v, f"{path}.{i}", where, depth + 1)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check(doc: PlanDocument, where: str = "plan") -> None:
    """What the types cannot say: lengths, ranges, names that must agree."""

    def fail(path: str, msg: str) -> PlanFormatError:
        return PlanFormatError(f"{where}: field {path}: {msg}")

    h = doc.horizon_hours
    if h != CYCLE_HOURS[doc.slot_origin] and not (doc.slot_origin != "constant" and h == 1):
        raise fail("horizon_hours", f"{h} does not fit slot_origin {doc.slot_origin!r}")
    try:
        zoneinfo.ZoneInfo(doc.timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise fail("timezone", f"unknown time zone {_short(doc.timezone)}") from None
    if not doc.plan_id or not all(c.isalnum() or c in "-_" for c in doc.plan_id) or len(doc.plan_id) > 64:
        raise fail("plan_id", "must be 1-64 letters, digits, '-' or '_'")
    if doc.created_at.tzinfo is None:
        raise fail("created_at", "needs a UTC offset")
    names = [w.name for w in doc.request.workloads]
    if not names or len(set(names)) != len(names):
        raise fail("request.workloads", "need distinct names")
    for i, w in enumerate(doc.request.workloads):
        if not 0 <= w.max_spot_fraction <= 1:
            raise fail(f"request.workloads.{i}.max_spot_fraction", "must be between 0 and 1")
        if w.node_gpus is not None and w.node_gpus < 1:
            raise fail(f"request.workloads.{i}.node_gpus", "must be at least 1")
        if w.spread_zones < 1:
            raise fail(f"request.workloads.{i}.spread_zones", "must be at least 1")
        if (w.unit == "gpus") != (not w.replicas):
            raise fail(f"request.workloads.{i}.replicas", "a workload in work units needs replica rates, and only it")
        for n, rate in enumerate(w.replicas):
            if rate.tensor_parallel < 1 or not rate.work_per_s.is_finite() or rate.work_per_s <= 0:
                raise fail(f"request.workloads.{i}.replicas.{n}", "needs tensor_parallel ≥ 1 and work_per_s > 0")
    if set(doc.request.demand) != set(names):
        raise fail("request.demand", "needs one entry per workload")
    for name, counts in doc.request.demand.items():
        if len(counts) not in (1, h) or any(c < 0 for c in counts):
            raise fail(f"request.demand.{name}", f"must be {h} counts ≥ 0")
    for i, a in enumerate(doc.allocations):
        p = f"allocations.{i}"
        if a.reserved:
            raise fail(f"{p}.market", "reserved capacity is listed under reservations")
        if a.workload not in names:
            raise fail(f"{p}.workload", f"unknown workload {_short(a.workload)}")
        if len(a.instances_by_slot) != h or any(n < 0 for n in a.instances_by_slot):
            raise fail(f"{p}.instances_by_slot", f"must be {h} counts ≥ 0")
        _offer_fields(a, p, fail)
    for i, r in enumerate(doc.reservations):
        p = f"reservations.{i}"
        if r.market not in TERM_HOURS:
            raise fail(f"{p}.market", "must be reserved_1y or reserved_3y")
        if r.term_hours != TERM_HOURS[r.market]:
            raise fail(f"{p}.term_hours", f"must be {TERM_HOURS[r.market]} for {r.market}")
        if r.instances < 1:
            raise fail(f"{p}.instances", "must be at least 1")
        _offer_fields(r, p, fail)
        for user, used in r.gpus_used_by_slot.items():
            if user not in names:
                raise fail(f"{p}.gpus_used_by_slot", f"unknown workload {_short(user)}")
            if len(used) != h or any(u < 0 for u in used):
                raise fail(f"{p}.gpus_used_by_slot.{user}", f"must be {h} counts ≥ 0")
        for t in range(h):
            if sum(v[t] for v in r.gpus_used_by_slot.values()) > r.instances * r.gpus_per_instance:
                raise fail(f"{p}.gpus_used_by_slot", f"uses more GPUs than reserved in slot {t}")
    for i, held in enumerate(doc.commitments.held):
        if len(held.used_by_slot) != h or any(not u.is_finite() or u < 0 for u in held.used_by_slot):
            raise fail(f"commitments.held.{i}.used_by_slot", f"must be {h} amounts ≥ 0")
        if not 0 <= held.utilization <= 1:
            raise fail(f"commitments.held.{i}.utilization", "must be between 0 and 1")
        if held.ends <= held.starts:
            raise fail(f"commitments.held.{i}.ends", "must be after starts")
    for i, rec in enumerate(doc.commitments.recommended):
        if rec.term_hours not in TERM_HOURS.values():
            raise fail(f"commitments.recommended.{i}.term_hours", "must be 8760 or 26280")
        if (rec.count is None) == (rec.usd_per_hour is None):
            raise fail(f"commitments.recommended.{i}", "has a count or a usd_per_hour, not both")
    if doc.horizon_start.tzinfo is None:
        raise fail("horizon_start", "needs a UTC offset")
    cycle = CYCLE_HOURS[doc.slot_origin]
    seen: set[str] = set()
    for i, win in enumerate(doc.windows):
        if not win.name or win.name in seen:
            raise fail(f"windows.{i}.name", "must be non-empty and distinct")
        seen.add(win.name)
        for key in ("start_slot", "end_slot"):
            if not 0 <= getattr(win, key) <= cycle:
                raise fail(f"windows.{i}.{key}", f"must be a slot in 0..{cycle}")
    if len(doc.costs.slot_usd) != h:
        raise fail("costs.slot_usd", f"must have {h} entries")
    for f in fields(Costs):
        value = getattr(doc.costs, f.name)
        for v in value if isinstance(value, tuple) else (value,):
            if not v.is_finite() or v < 0:
                raise fail(f"costs.{f.name}", "must be a finite amount ≥ 0")
    if doc.gpus < 1:
        raise fail("gpus", "must be at least 1")


def _offer_fields(a: Allocation | Reservation, p: str, fail: Any) -> None:
    if a.gpus_per_instance < 1:
        raise fail(f"{p}.gpus_per_instance", "must be at least 1")
    if not a.unit_hourly_usd.is_finite() or a.unit_hourly_usd < 0:
        raise fail(f"{p}.unit_hourly_usd", "must be a finite amount ≥ 0")
    for key in ("region", "instance_type"):
        if not getattr(a, key):
            raise fail(f"{p}.{key}", "must be a non-empty string")
    if a.zone == "":
        raise fail(f"{p}.zone", "must be a zone name or null")


def term_hours(market: Market) -> int:
    return TERM_HOURS[market.value]
