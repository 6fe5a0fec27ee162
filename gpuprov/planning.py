"""From what the user asked (flags or a policy) and the catalog's offers to a plan document.

Composition only: the CLI and the rebalancer call this; it calls policies and the optimizer.
A plan document carries its ``request``: everything needed to solve it again (for
capacity failover and rebalancing) with new prices or without a pool.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuprov import plandoc as pd
from gpuprov.models import (
    DEFAULT_LOST_HOURS,
    HOURS_PER_MONTH,
    Market,
    Offer,
    Plan,
    SnapshotInfo,
    Workload,
)
from gpuprov.optimizer import baselines
from gpuprov.optimizer.problem import PlanRequest, interruption_rate
from gpuprov.optimizer.reduce import usable
from gpuprov.optimizer.solve import solve

Pool4 = tuple[str, str, str, str]
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Solved:
    request: PlanRequest
    plan: Plan
    baselines: tuple[tuple[str, baselines.Result], ...]


@dataclass(frozen=True)
class Context:
    """When each slot is: the plan's time zone, slot origin and windows."""

    policy: str | None
    timezone: str
    slot_origin: str
    windows: tuple[pd.Window, ...]
    max_price_age_hours: Decimal


BASELINES = (
    ("all_on_demand", "all on demand in the cheapest location", baselines.all_on_demand),
    (
        "best_single_offer",
        "the best single offer held at peak (what a one-resource picker buys)",
        baselines.best_single_offer,
    ),
    (
        "reserved_plus_spot",
        "reserved for the base load, spot up to the ceiling, on demand above",
        baselines.reserved_plus_spot,
    ),
)


def run(request: PlanRequest) -> Solved:
    plan = solve(request)
    offers = usable(request)  # the whole offer set, before reductions
    return Solved(request, plan, tuple((name, fn(request, offers)) for name, _d, fn in BASELINES))


def slot_at(doc: pd.PlanDocument, when: datetime) -> int:
    """The slot of a plan document an aware UTC instant falls in (local time of the plan)."""
    return doc.slot_at(when)


def flags_workload(gpus_per_node: int | None, max_spot_fraction: Decimal | None) -> Workload:
    """The one workload of a plan from flags: a gang when nodes have 8 GPUs or more. Spot
    interruptions cost it what they cost a policy's training workload (the same defaults)."""
    return Workload(
        name="cluster",
        max_spot_fraction=Decimal("0.5") if max_spot_fraction is None else max_spot_fraction,
        node_gpus=gpus_per_node,
        gang=gpus_per_node is not None and gpus_per_node >= 8,
        lost_hours_per_interruption=DEFAULT_LOST_HOURS["training"],
    )


def flags_spec(
    gpu_names: Sequence[str],
    gpus: int,
    workload: Workload,
    clouds: Collection[str] | None,
    markets: Collection[str] | None,
    regions: Sequence[str] | None,
    solver: str,
    gap: float,
    time_limit_s: float,
) -> pd.RequestSpec:
    return pd.RequestSpec(
        gpu_names=tuple(gpu_names),
        workloads=(pd.WorkloadSpec.of(workload),),
        demand={workload.name: (gpus,)},
        clouds_allow=tuple(sorted(clouds or [])),
        regions_allow=tuple(regions or []),
        markets=None if markets is None else tuple(sorted(markets)),  # type: ignore[arg-type]
        solver=solver,  # type: ignore[arg-type]
        gap=gap,
        time_limit_s=time_limit_s,
    )


def policy_spec(policy: Any, gpu_names: Sequence[str], solver: str, gap: float, time_limit_s: float) -> pd.RequestSpec:
    from policies import constraints

    return pd.RequestSpec(
        gpu_names=tuple(gpu_names),
        workloads=tuple(pd.WorkloadSpec.of(w) for w in constraints.workloads(policy)),
        demand={k: tuple(v) for k, v in constraints.demand(policy).items()},
        clouds_allow=tuple(policy.clouds_allow),
        clouds_deny=tuple(policy.clouds_deny),
        regions_allow=tuple(policy.regions_allow),
        regions_deny=tuple(policy.regions_deny),
        markets=None if policy.markets is None else tuple(policy.markets),
        offer_caps=tuple(
            pd.OfferCapSpec(c.cloud, c.region, c.zone, c.instance_type, c.market, c.max_instances)
            for c in policy.offer_caps
        ),
        region_caps=tuple(pd.RegionCapSpec(c.cloud, c.region, c.max_instances) for c in policy.region_caps),
        budget_per_hour=policy.budget_per_hour,
        interruptions_per_hour=dict(policy.interruptions_per_hour),
        solver=solver,  # type: ignore[arg-type]
        gap=gap,
        time_limit_s=time_limit_s,
    )


def _match(value: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, g) for g in globs)


def allowed(spec: pd.RequestSpec, o: Offer) -> bool:
    cloud = o.cloud.value
    if o.gpu not in spec.gpu_names:
        return False
    if spec.clouds_allow and cloud not in spec.clouds_allow:
        return False
    if cloud in spec.clouds_deny or _match(o.region, spec.regions_deny):
        return False
    if spec.regions_allow and not _match(o.region, spec.regions_allow):
        return False
    return spec.markets is None or o.market.value in spec.markets


def request_from_spec(
    spec: pd.RequestSpec, offers: Sequence[Offer], unavailable: Collection[Pool4] = ()
) -> PlanRequest:
    offers_ok = [o for o in offers if allowed(spec, o)]
    caps: dict[tuple[str, str, str, str, str], int] = {}
    for o in offers_ok:
        for c in spec.offer_caps:
            pairs = (
                (o.cloud.value, c.cloud),
                (o.region, c.region),
                (o.zone or "", c.zone),
                (o.instance_type, c.instance_type),
                (o.market.value, c.market),
            )
            if all(fnmatch.fnmatchcase(v, g) for v, g in pairs):
                caps[o.key] = min(caps.get(o.key, c.max_instances), c.max_instances)
    names = spec.gpu_names
    return PlanRequest(
        gpu=names[0] if len(names) == 1 else "/".join(names),
        workloads=tuple(w.workload() for w in spec.workloads),
        demand={k: tuple(v) for k, v in spec.demand.items()},
        offers=offers_ok,
        offer_caps=caps,
        region_caps={(c.cloud, c.region): c.max_instances for c in spec.region_caps},
        budget_per_hour=spec.budget_per_hour,
        interruptions_per_hour=dict(spec.interruptions_per_hour),
        gap=spec.gap,
        solver=spec.solver,
        time_limit_s=spec.time_limit_s,
        unavailable=frozenset(unavailable),
    )


def plan_id(
    spec: pd.RequestSpec,
    snapshots: Sequence[SnapshotInfo],
    context: Context,
    unavailable: Collection[Pool4] = (),
    extra: Mapping[str, Any] | None = None,
) -> str:
    """A content id: the same request on the same snapshots gives the same id."""
    payload = {
        "schema": pd.SCHEMA_VERSION,
        "spec": pd.plain(asdict(spec)),
        "context": pd.plain(asdict(context)),
        "snapshots": sorted(s.id for s in snapshots),
        "unavailable": sorted(list(p) for p in unavailable),
        "extra": extra or {},
    }
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def flags_context() -> Context:
    return Context(policy=None, timezone="UTC", slot_origin="constant", windows=(), max_price_age_hours=Decimal(24))


def policy_context(policy: Any) -> Context:
    """When each slot is and what the windows are."""
    from policies.schedule import window_starts

    windows = []
    by_name = {w.name: w for w in policy.windows}
    starts = window_starts(policy)
    days = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
    for name, slot in starts:
        w = by_name[name]
        length = (w.end_hour - w.start_hour) % 24 or 24
        opens = sum(1 for n, _s in starts if n == name)  # a week window opens once per day it names
        label = name if opens == 1 else f"{name}-{days[slot // 24]}"
        windows.append(pd.Window(name=label, start_slot=slot, end_slot=(slot + length) % policy.horizon_hours))
    return Context(
        policy=policy.name,
        timezone=policy.timezone,
        slot_origin="day" if policy.horizon_hours == 24 else "week",
        windows=tuple(windows),
        max_price_age_hours=Decimal(policy.max_price_age_hours),
    )


def _offer_fields(o: Offer) -> dict[str, Any]:
    return {
        "flags": o.flags,
        "cloud": o.cloud.value,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance_type,
        "market": o.market.value,
        "gpu": o.gpu,
        "gpus_per_instance": o.gpus_per_instance,
        "unit_hourly_usd": o.hourly_usd,
        "interconnect": o.interconnect,
    }


def _saving(plan_cost: Decimal, base: Decimal | None) -> tuple[Decimal | None, Decimal | None]:
    if base is None or base == 0:
        return None, None
    return (base - plan_cost).quantize(CENT), ((base - plan_cost) / base).quantize(Decimal("0.0001"))


def document(
    pid: str,
    solved: Solved,
    snapshots: Sequence[SnapshotInfo],
    gpus: int,
    spec: pd.RequestSpec,
    context: Context,
    created: datetime,
    unavailable: Collection[Pool4] = (),
) -> pd.PlanDocument:
    plan = solved.plan
    hours = plan.horizon_hours
    total = plan.total_cost_usd
    allocations = tuple(
        pd.Allocation(
            **_offer_fields(a.offer),
            workload=a.workload,
            instances_by_slot=a.instances_by_slot,
            interruptions_per_hour=interruption_rate(a.offer, solved.request)
            if a.offer.market is Market.SPOT
            else None,
            interruption_source=_rate_source(a.offer, solved.request),
        )
        for a in plan.allocations
    )
    reservations = []
    for r in plan.reservations:
        term = pd.term_hours(r.offer.market)
        reservations.append(
            pd.Reservation(
                **_offer_fields(r.offer),
                instances=r.instances,
                term_hours=term,
                hourly_usd=r.offer.hourly_usd * r.instances,
                commitment_total_usd=(r.offer.hourly_usd * r.instances * term).quantize(CENT),
                gpus_used_by_slot=dict(sorted(r.gpus_used_by_slot.items())),
            )
        )
    objective = plan.objective_usd if plan.objective_usd is not None else total
    costs = pd.Costs(
        hourly_usd=total / hours,
        monthly_usd=(total / hours * HOURS_PER_MONTH).quantize(CENT),
        horizon_usd=total,
        slot_usd=plan.slot_cost_usd,
        expected_interruption_usd=plan.expected_interruption_usd,
        objective_usd=objective,
        lower_bound_usd=plan.lower_bound_usd,
        gap=plan.gap.quantize(Decimal("0.000001")),
    )
    held = sum((r.hourly_usd for r in reservations), Decimal(0))
    liability = sum((r.commitment_total_usd for r in reservations), Decimal(0))
    recommended = bool(reservations) and solved.request.reserved_fixed is None
    if not reservations:
        summary = "no reservation: nothing to commit to"
    else:
        terms = sorted({f"{r.term_hours // 8760}-year" for r in reservations})
        verb = "recommends buying" if recommended else "holds"
        summary = (
            f"this plan {verb} {sum(r.instances for r in reservations)} reserved instances "
            f"({' and '.join(terms)} terms): ${held.quantize(CENT):,}/h, "
            f"${liability:,} committed over the terms, paid whether used or not"
        )
    commitments = pd.Commitments(recommended=recommended, hourly_usd=held, total_usd=liability, summary=summary)
    base_docs = []
    descriptions = {name: d for name, d, _fn in BASELINES}
    for name, result in solved.baselines:
        usd, frac = _saving(total, result.cost)
        base_docs.append(
            pd.Baseline(
                name=name,  # type: ignore[arg-type]
                description=descriptions[name],
                horizon_usd=result.cost,
                hourly_usd=None if result.cost is None else result.cost / hours,
                where=result.where,
                saving_usd=usd,
                saving_fraction=frac,
                reason=result.reason,
            )
        )
    snaps = tuple(
        pd.SnapshotRef(
            id=s.id,
            source=s.source,
            cloud=s.cloud.value,
            fetched_at=s.fetched_at,
            rows=s.row_count,
            current=s.current,
        )
        for s in snapshots
    )
    doc = pd.PlanDocument(
        schema_version=pd.SCHEMA_VERSION,
        plan_id=pid,
        created_at=created,
        gpu=plan.gpu,
        gpus=gpus,
        policy=context.policy,
        timezone=context.timezone,
        slot_origin=context.slot_origin,  # type: ignore[arg-type]
        horizon_hours=hours,
        max_price_age_hours=context.max_price_age_hours,
        windows=context.windows,
        request=spec,
        allocations=allocations,
        reservations=tuple(reservations),
        costs=costs,
        commitments=commitments,
        baselines=tuple(base_docs),
        solve=pd.SolveInfo(
            solver=plan.solver,
            status=plan.status,
            offers_considered=plan.offers_considered,
            offers_left_out=plan.offers_dropped,
            binding=plan.binding,
            notes=plan.notes,
        ),
        catalog_as_of=min((s.fetched_at for s in snapshots), default=None),
        snapshots=snaps,
        excluded_pools=tuple(sorted(tuple(p) for p in unavailable)),  # type: ignore[misc]
        warnings=_warnings(allocations, tuple(reservations)),
    )
    pd.check(doc)
    return doc


def _rate_source(offer: Offer, request: PlanRequest) -> str | None:
    if offer.market is not Market.SPOT:
        return None
    if offer.cloud.value in request.interruptions_per_hour:
        return f"policy:{offer.cloud.value}"
    return offer.interruption_source or f"default:{offer.cloud.value}"


def _warnings(allocations: Sequence[pd.Allocation], reservations: Sequence[pd.Reservation]) -> tuple[str, ...]:
    """One line per flagged offer the plan relies on (see pricing/quality.py)."""
    out = []
    rows: list[pd.Allocation | pd.Reservation] = [*allocations, *reservations]
    for a in rows:
        for flag in a.flags:
            out.append(
                f"the plan relies on a {flag} quote: {a.instance_type} {a.market} in {a.location} "
                f"at ${a.unit_hourly_usd:.4f}/h; check it, or plan with --exclude-suspect"
            )
    return tuple(sorted(set(out)))


def replan(
    doc: pd.PlanDocument,
    offers: Sequence[Offer],
    snapshots: Sequence[SnapshotInfo],
    unavailable: Collection[Pool4],
    created: datetime,
    rebalance: Mapping[str, Any] | None = None,
) -> pd.PlanDocument:
    """Solve a plan's request again, on these offers and without these pools.

    ``rebalance`` (from the rebalancer) holds ``slot``, ``incumbent`` {pool5: n},
    ``migration_hours`` {workload: h} and ``reserved`` {pool4: n}: see PlanRequest."""
    from dataclasses import replace

    spec = doc.request
    context = Context(
        policy=doc.policy,
        timezone=doc.timezone,
        slot_origin=doc.slot_origin,
        windows=doc.windows,
        max_price_age_hours=doc.max_price_age_hours,
    )
    request = request_from_spec(spec, offers, unavailable)
    extra: dict[str, Any] = {}
    if rebalance is not None:
        request = replace(
            request,
            current_slot=rebalance["slot"],
            incumbent=rebalance["incumbent"],
            migration_hours=rebalance["migration_hours"],
            reserved_fixed=rebalance["reserved"],
        )
        extra = {
            "slot": rebalance["slot"],
            "incumbent": sorted([list(k), v] for k, v in rebalance["incumbent"].items()),
            "reserved": sorted([list(k), v] for k, v in rebalance["reserved"].items()),
            "migration_hours": {k: str(v) for k, v in rebalance["migration_hours"].items()},
        }
    solved = run(request)
    pid = plan_id(spec, snapshots, context, unavailable, extra)
    return document(pid, solved, snapshots, doc.gpus, spec, context, created, unavailable)
