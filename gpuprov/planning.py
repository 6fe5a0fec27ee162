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
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuprov import plandoc as pd
from gpuprov.models import (
    DEFAULT_LOST_HOURS,
    HOURS_PER_MONTH,
    Market,
    Offer,
    Plan,
    PoolKey,
    Site,
    SnapshotInfo,
    Workload,
)
from gpuprov.optimizer import baselines
from gpuprov.optimizer.problem import (
    Held,
    PlanRequest,
    SavingsPlanOption,
    family_of,
    interruption_rate,
)
from gpuprov.optimizer.reduce import usable
from gpuprov.optimizer.solve import solve
from pricing.quality import is_suspect

if TYPE_CHECKING:
    from policies.model import Policy
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Solved:
    request: PlanRequest
    plan: Plan
    baselines: tuple[tuple[str, baselines.Result], ...]
    phases: tuple[tuple[str, float], ...] = ()  # seconds per phase: before the solve, the solver's, baselines


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


def run(request: PlanRequest, before: Mapping[str, float] | None = None) -> Solved:
    """Solve, then price the baselines; ``before``: seconds the caller spent first (the catalog)."""
    import time

    plan = solve(request)
    started = time.monotonic()
    offers = usable(request)  # the whole offer set, before reductions
    results = tuple((name, fn(request, offers)) for name, _d, fn in BASELINES)
    phases = (*(before or {}).items(), *plan.phases, ("baselines", time.monotonic() - started))
    return Solved(request, plan, results, phases)


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


def policy_spec(
    policy: Policy, gpu_names: Sequence[str], solver: str, gap: float, time_limit_s: float
) -> pd.RequestSpec:
    from policies import constraints

    return pd.RequestSpec(
        gpu_names=tuple(gpu_names),
        workloads=tuple(pd.WorkloadSpec.of(w) for w in constraints.workloads(policy)),
        demand={k: tuple(v) for k, v in constraints.demand(policy).items()},
        clouds_allow=tuple(policy.clouds_allow),
        clouds_deny=tuple(policy.clouds_deny),
        regions_allow=tuple(policy.regions_allow),
        regions_deny=tuple(policy.regions_deny),
        markets=None if policy.markets is None else tuple(policy.markets),  # type: ignore[arg-type]
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


def with_curve(
    spec: pd.RequestSpec, context: Context, curve: Mapping[str, Sequence[int]]
) -> tuple[pd.RequestSpec, Context]:
    """A policy planned on an hourly demand curve (``plan --demand``) instead of its schedule's
    windows: the curve's demand, and no windows (every hour may differ)."""
    return replace(spec, demand={k: tuple(v) for k, v in curve.items()}), replace(context, windows=())


def _match(value: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, g) for g in globs)


def allowed(spec: pd.RequestSpec, o: Offer) -> bool:
    """Whether the request may use the offer: its GPU, clouds, regions and markets, and no quote
    flagged suspect unless the request includes them (pricing/quality.py)."""
    if not spec.include_suspect and is_suspect(o):
        return False
    return permitted(spec, o)


def permitted(spec: pd.RequestSpec, o: Offer) -> bool:
    """``allowed`` without the suspect rule."""
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


def held_specs(records: Sequence[Any]) -> tuple[pd.HeldSpec, ...]:
    """The inventory's records (commitments/records.py) as the plan document carries them."""
    return tuple(
        pd.HeldSpec(
            id=c.id,
            cloud=c.cloud,
            kind=c.kind.value,
            starts=c.starts,
            ends=c.ends,
            hourly_usd=c.hourly_usd,
            instance_type=c.instance_type,
            family=c.family,
            region=c.region,
            zone=c.zone,
            count=c.count,
            usd_per_hour=c.usd_per_hour,
            term=c.term,
            discount=c.discount,
        )
        for c in records
    )


def commitments_allowed(spec: pd.RequestSpec) -> bool:
    """Whether the request lets the plan buy commitments (no --markets, or one naming reserved)."""
    return spec.markets is None or any(m.startswith("reserved") for m in spec.markets)


def _sp_discounts(table: Mapping[str, Decimal], offers: Sequence[Offer], family: str | None) -> dict[str, Decimal]:
    out = {}
    for o in offers:
        if o.cloud.value != "aws" or o.market is not Market.ON_DEMAND:
            continue
        share = table.get(family_of(o.instance_type), table.get("*"))
        if share is not None and (family is None or family_of(o.instance_type) == family):
            out[o.instance_type] = share
    return out


def held_commitments(
    spec: pd.RequestSpec, offers: Sequence[Offer], hours: Sequence[datetime] | None, slots: int
) -> tuple[Held, ...]:
    """The held commitments that cover some usable offer of this request, with the slots they are
    active in (the whole slot hour inside [starts, ends)); those that cover nothing are left out."""
    from datetime import timedelta

    out = []
    for c in spec.held:
        if hours is None:
            active = (True,) * slots
        else:
            active = tuple(c.starts <= h and h + timedelta(hours=1) <= c.ends for h in hours)
        discounts: dict[str, Decimal] = {}
        if c.kind == "savings_plan":
            kind = f"{'compute' if c.family is None else 'ec2_instance'}_{c.term or '1y'}"
            table = {"*": c.discount} if c.discount is not None else spec.savings_plan_discounts.get(kind, {})
            discounts = _sp_discounts(table, offers, c.family)
        h = Held(
            id=c.id,
            cloud=c.cloud,
            hourly_usd=c.usd_per_hour if c.usd_per_hour is not None else c.hourly_usd * (c.count or 0),
            active=active,
            count=c.count,
            usd_per_hour=c.usd_per_hour,
            instance_type=c.instance_type,
            region=c.region,
            zone=c.zone,
            family=c.family,
            discounts=discounts,
        )
        in_scope = any(
            o.cloud.value == c.cloud
            and o.market is Market.ON_DEMAND
            and (c.family is None or (o.region == c.region and family_of(o.instance_type) == c.family))
            for o in offers
        )
        # a Savings Plan whose rates are unknown covers nothing but is paid all the same: it stays
        # (the plan warns); a counted commitment no offer of this request matches plays no part
        if any(h.covers(o) for o in offers) or (h.savings_plan and in_scope):
            out.append(h)
    return tuple(out)


def savings_plan_options(spec: pd.RequestSpec, offers: Sequence[Offer]) -> tuple[SavingsPlanOption, ...]:
    """One Savings Plan to buy per kind and term the config prices (an EC2 Instance one per family
    and region), when the request allows commitments."""
    if not commitments_allowed(spec):
        return ()
    out = []
    for kind, table in sorted(spec.savings_plan_discounts.items()):
        term = pd.TERM_HOURS["reserved_3y" if kind.endswith("3y") else "reserved_1y"]
        if kind.startswith("compute"):
            found = _sp_discounts(table, offers, None)
            if found:
                out.append(SavingsPlanOption(name=kind, term_hours=term, discounts=found))
            continue
        scopes = sorted({(family_of(o.instance_type), o.region) for o in offers if o.cloud.value == "aws"})
        for family, region in scopes:
            found = _sp_discounts(table, [o for o in offers if o.region == region], family)
            if found:
                out.append(
                    SavingsPlanOption(
                        name=f"{kind}:{family}:{region}",
                        term_hours=term,
                        discounts=found,
                        family=family,
                        region=region,
                    )
                )
    return tuple(out)


def request_from_spec(
    spec: pd.RequestSpec,
    offers: Sequence[Offer],
    unavailable: Collection[Site] = (),
    hours: Sequence[datetime] | None = None,
) -> PlanRequest:
    """The optimizer's request; ``hours`` (the calendar hour of each slot, ``slot_hours``) dates
    held commitments (without them every held commitment counts in every slot). A reserved offer
    whose type has no on-demand price in its region is left out (``without_alternative``)."""
    lone = set(without_alternative(offers))
    offers_ok = [o for o in offers if allowed(spec, o) and o.key not in lone]
    caps: dict[PoolKey, int] = {}
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
    slots = len(next(iter(spec.demand.values()), (0,)))
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
        held=held_commitments(spec, offers_ok, hours, slots),
        savings_plan_options=savings_plan_options(spec, offers_ok),
    )


def without_alternative(offers: Sequence[Offer]) -> list[PoolKey]:
    """Reserved offers whose instance type has no on-demand offer in the same cloud and region:
    a commitment with nothing to compare it with (its saving is unknown). They stay in the
    catalog; plans do not recommend them."""
    on_demand = {(o.cloud, o.region, o.instance_type) for o in offers if o.market is Market.ON_DEMAND}
    return [
        o.key
        for o in offers
        if o.market in (Market.RESERVED_1Y, Market.RESERVED_3Y)
        and (o.cloud, o.region, o.instance_type) not in on_demand
    ]


def request_for(
    spec: pd.RequestSpec,
    offers: Sequence[Offer],
    context: Context,
    start: datetime,
    unavailable: Collection[Site] = (),
) -> PlanRequest:
    """``request_from_spec`` with held commitments dated against the horizon that starts at ``start``."""
    slots = max(len(v) for v in spec.demand.values())
    hours = pd.slot_hours(context.timezone, context.slot_origin, slots, start) if spec.held else None
    return request_from_spec(spec, offers, unavailable, hours)


def with_commitments(
    spec: pd.RequestSpec, records: Sequence[Any], offers: Sequence[Offer], discounts: Mapping[str, Any]
) -> pd.RequestSpec:
    """The spec with the held commitments that cover some offer it may use (the inventory's others
    play no part in this plan) and the config's Savings Plans discounts."""
    from dataclasses import replace

    spec = replace(spec, savings_plan_discounts={k: dict(v) for k, v in discounts.items()})
    candidates = replace(spec, held=held_specs(records))
    ok = [o for o in offers if allowed(spec, o)]
    slots = max(len(v) for v in spec.demand.values())
    keep = {h.id for h in held_commitments(candidates, ok, None, slots)}
    return replace(spec, held=tuple(c for c in candidates.held if c.id in keep))


def what_if(
    solved: Solved,
    spec: pd.RequestSpec,
    offers: Sequence[Offer],
    context: Context,
    start: datetime,
    scale: Decimal,
    deadline: float | None = None,
) -> pd.WhatIf:
    """The recommended commitments when demand is ``scale`` times the plan's: solved again holding
    them (reservations fixed, Savings Plans held at their level), and without them (no new
    commitment: on-demand and spot only); held commitments count in both."""
    import math
    from dataclasses import replace

    scaled = replace(spec, demand={k: tuple(math.ceil(d * scale) for d in v) for k, v in spec.demand.items()})
    plan = solved.plan
    fixed: dict[Site, int] = {}
    for r in plan.reservations:
        key = r.offer.site
        fixed[key] = fixed.get(key, 0) + r.instances
    base = replace(request_for(scaled, offers, context, start), deadline=_halfway(deadline))
    slots = base.slots
    bought = tuple(opt.held(slots, level) for opt, level in plan.savings_plans)
    holding = replace(base, reserved_fixed=fixed, held=base.held + bought, savings_plan_options=())
    firm = tuple(m for m in ("on_demand", "spot") if spec.markets is None or m in spec.markets)
    without = request_for(replace(scaled, markets=firm, savings_plan_discounts={}), offers, context, start)  # type: ignore[arg-type]
    with_cost = solve(holding).total_cost_usd  # the Savings Plans' levels are held costs in it
    without_cost = solve(replace(without, deadline=deadline)).total_cost_usd
    return pd.WhatIf(
        demand_scale=scale,
        with_commitments_horizon_usd=with_cost.quantize(CENT),
        without_commitments_horizon_usd=without_cost.quantize(CENT),
        regret_horizon_usd=(with_cost - without_cost).quantize(CENT),
    )


def _halfway(deadline: float | None) -> float | None:
    """Half the time left to ``deadline`` (the first of two solves sharing it)."""
    import time

    if deadline is None:
        return None
    now = time.monotonic()
    return now + max(0.0, deadline - now) / 2


def plan_id(
    spec: pd.RequestSpec,
    snapshots: Sequence[SnapshotInfo],
    context: Context,
    unavailable: Collection[Site] = (),
    extra: Mapping[str, Any] | None = None,
) -> str:
    """A content id: the same request on the same snapshots gives the same id."""
    spec_dict = asdict(spec)
    for w in spec_dict["workloads"]:  # no interconnect asked: the id plans had before there was one
        if w.get("interconnect") is None:
            w.pop("interconnect", None)
        if w.get("unit") == "gpus" and not w.get("replicas"):  # in GPUs: the id plans had before work units
            w.pop("unit", None)
            w.pop("replicas", None)
        if w.get("gpu_models") is None:
            w.pop("gpu_models", None)
    if not spec_dict.get("include_suspect"):  # the default: the id it had before the field existed
        spec_dict.pop("include_suspect", None)
    payload = {
        "schema": pd.SCHEMA_VERSION,
        "spec": pd.plain(spec_dict),
        "context": pd.plain(asdict(context)),
        "snapshots": sorted(s.id for s in snapshots),
        "unavailable": sorted(list(p) for p in unavailable),
        "extra": extra or {},
    }
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def flags_context() -> Context:
    return Context(policy=None, timezone="UTC", slot_origin="constant", windows=(), max_price_age_hours=Decimal(24))


def policy_context(policy: Policy) -> Context:
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
    unavailable: Collection[Site] = (),
    what_if: pd.WhatIf | None = None,
    quality: pd.PriceQuality | None = None,
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
        made = pd.Reservation(
            **_offer_fields(r.offer),
            instances=r.instances,
            term_hours=term,
            hourly_usd=r.offer.hourly_usd * r.instances,
            commitment_total_usd=(r.offer.hourly_usd * r.instances * term).quantize(CENT),
            gpus_used_by_slot=dict(sorted(r.gpus_used_by_slot.items())),
        )
        reservations.append(replace(made, on_demand_unit_hourly_usd=_on_demand_rate(solved.request, made)))
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
        total_cost_usd=total,
        marginal_cost_usd=total - plan.held_cost_usd,
    )
    commitments = _commitments(solved, tuple(reservations), spec, what_if)
    held_cost = plan.held_cost_usd
    base_docs = []
    descriptions = {name: d for name, d, _fn in BASELINES}
    for name, result in solved.baselines:
        # held commitments are paid whatever is bought: a baseline pays them too (and uses none)
        base_cost = None if result.cost is None else result.cost + held_cost
        usd, frac = _saving(total, base_cost)
        base_docs.append(
            pd.Baseline(
                name=name,  # type: ignore[arg-type]
                description=descriptions[name] + (", plus the held commitments (paid anyway)" if held_cost else ""),
                horizon_usd=base_cost,
                hourly_usd=None if base_cost is None else base_cost / hours,
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
        horizon_start=created.astimezone(UTC).replace(minute=0, second=0, microsecond=0),
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
            gap_asked=plan.gap_asked,
            phases={k: round(v, 3) for k, v in (solved.phases or plan.phases)},
        ),
        catalog_as_of=min((s.fetched_at for s in snapshots), default=None),
        snapshots=snaps,
        excluded_pools=tuple(sorted(Site(*p) for p in unavailable)),
        warnings=_warnings(allocations, tuple(reservations)) + _held_warnings(solved.request),
        price_quality=quality,
    )
    pd.check(doc)
    return doc


RESERVED_KIND = {"aws": "reserved_instance", "gcp": "committed_use", "azure": "reservation"}
SP_LABEL = {"compute": "Compute Savings Plan", "ec2_instance": "EC2 Instance Savings Plan"}


def _on_demand_rate(request: PlanRequest, r: pd.Reservation) -> Decimal | None:
    """The on-demand price of a reserved instance's type where it is: its zone, else its region."""
    same = [
        o
        for o in request.offers
        if o.market is Market.ON_DEMAND
        and (o.cloud.value, o.region, o.instance_type) == (r.cloud, r.region, r.instance_type)
    ]
    here = [o for o in same if r.zone is None or o.zone in (r.zone, None)]
    found = here or same
    return min((o.hourly_usd for o in found), default=None)


def _ratio(a: Decimal, b: Decimal) -> Decimal:
    return (a / b).quantize(Decimal("0.0001")) if b else Decimal(0)


def _commitments(
    solved: Solved, reservations: Sequence[pd.Reservation], spec: pd.RequestSpec, what_if: pd.WhatIf | None
) -> pd.Commitments:
    plan, request = solved.plan, solved.request
    T = plan.horizon_hours
    buying = request.reserved_fixed is None
    recommended = []
    for r in reservations if buying else ():
        used_gpu_hours = sum((sum(v) for v in r.gpus_used_by_slot.values()), 0)
        held_gpu_hours = r.instances * r.gpus_per_instance * T
        od = _on_demand_rate(request, r)
        saving = (
            (od * Decimal(used_gpu_hours) / r.gpus_per_instance - r.hourly_usd * T).quantize(CENT)
            if od is not None
            else Decimal(0)
        )
        recommended.append(
            pd.Recommended(
                kind=RESERVED_KIND[r.cloud],  # type: ignore[arg-type]
                cloud=r.cloud,
                scope=f"{r.instance_type} in {r.location}",
                term_hours=r.term_hours,
                hourly_usd=r.hourly_usd,
                total_usd=r.commitment_total_usd,
                utilization=_ratio(Decimal(used_gpu_hours), Decimal(held_gpu_hours)),
                break_even_utilization=None if not od else _ratio(r.unit_hourly_usd, od),
                horizon_saving_usd=saving,
                count=r.instances,
            )
        )
    for opt, level in plan.savings_plans:
        used = sum(plan.held_used.get(opt.name, ()), Decimal(0))
        value = plan.held_covered_usd.get(opt.name, Decimal(0))
        kind, _, scope = opt.name.partition(":")
        label = SP_LABEL[kind.rsplit("_", 1)[0]]
        recommended.append(
            pd.Recommended(
                kind="savings_plan",
                cloud="aws",
                scope=f"{label}, {'any instance type, any region' if not scope else scope.replace(':', '.* in ')}",
                term_hours=opt.term_hours,
                hourly_usd=level,
                total_usd=(level * opt.term_hours).quantize(CENT),
                utilization=_ratio(used, level * T),
                break_even_utilization=_ratio(used, value) if value else None,
                horizon_saving_usd=(value - level * T).quantize(CENT),
                usd_per_hour=level,
            )
        )
    by_id = {c.id: c for c in spec.held}
    held = []
    for h in request.held:
        c = by_id[h.id]
        active = sum(h.active)
        by_slot = plan.held_used.get(h.id, (Decimal(0),) * T)
        capacity = Decimal(h.count if h.count is not None else h.usd_per_hour or 0) * active
        util = _ratio(sum(by_slot, Decimal(0)), capacity)
        horizon = h.hourly_usd * active
        used_value = sum(by_slot, Decimal(0)) * (h.hourly_usd / h.count if h.count else Decimal(1))
        held.append(
            pd.Held(
                id=h.id,
                kind=c.kind,
                cloud=c.cloud,
                scope=_held_scope(c),
                starts=c.starts,
                ends=c.ends,
                hourly_usd=h.hourly_usd,
                active_hours=active,
                used_by_slot=by_slot,
                utilization=util,
                horizon_usd=horizon,
                unused_horizon_usd=max(Decimal(0), horizon - used_value),
                covered_horizon_usd=plan.held_covered_usd.get(h.id, Decimal(0)),
                count=h.count,
                usd_per_hour=h.usd_per_hour,
            )
        )
    hourly = sum((r.hourly_usd for r in recommended), Decimal(0))
    liability = sum((r.total_usd for r in recommended), Decimal(0))
    return pd.Commitments(
        recommended=tuple(recommended),
        held=tuple(held),
        recommended_hourly_usd=hourly,
        recommended_total_usd=liability,
        held_horizon_usd=sum((h.horizon_usd for h in held), Decimal(0)),
        summary=_summary(recommended, held, reservations, buying),
        what_if=what_if,
    )


def _held_scope(c: pd.HeldSpec) -> str:
    if c.kind == "savings_plan":
        return "any instance type, any region" if c.family is None else f"{c.family}.* in {c.region}"
    return f"{c.instance_type} in {c.zone or c.region}"


def _summary(
    recommended: Sequence[pd.Recommended],
    held: Sequence[pd.Held],
    reservations: Sequence[pd.Reservation],
    buying: bool,
) -> str:
    parts = []
    if held:
        uses = ", ".join(f"{h.id} {h.utilization:.0%}" for h in held)
        parts.append(f"uses held commitments first ({uses} used)")
    if recommended:
        terms = sorted({f"{r.term_hours // 8760}-year" for r in recommended})
        hourly = sum((r.hourly_usd for r in recommended), Decimal(0))
        total = sum((r.total_usd for r in recommended), Decimal(0))
        parts.append(
            f"recommends buying {len(recommended)} commitment{'s' if len(recommended) != 1 else ''} "
            f"({' and '.join(terms)} terms): ${hourly.quantize(CENT):,}/h, ${total:,} committed over "
            "the terms, paid whether used or not"
        )
    elif reservations and not buying:
        parts.append(f"holds {sum(r.instances for r in reservations)} reserved instances bought before")
    if not parts:
        return "no commitment: nothing to buy, nothing held"
    return "; ".join(parts)


def _held_warnings(request: PlanRequest) -> tuple[str, ...]:
    """A held Savings Plan without known rates is counted at its full cost and covers nothing."""
    return tuple(
        f"savings plan {h.id}: no rates known for this plan's instance types, so it is counted at its "
        f"${h.hourly_usd}/h and covers nothing; give its discount, set savings_plans discounts in the "
        "config, or run gpuprov commitments rates refresh"
        for h in request.held
        if h.savings_plan and not h.discounts
    )


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
                f"at ${a.unit_hourly_usd:.4f}/h (let in by --include-suspect); check it"
            )
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class Replanning:
    """A plan's request made again on other offers: what ``replan`` solves (the backtest solves it
    through its own cache)."""

    spec: pd.RequestSpec
    context: Context
    request: PlanRequest
    extra: dict[str, Any]  # what the plan id must also depend on (the rebalancer's inputs)


def replanning(
    doc: pd.PlanDocument,
    offers: Sequence[Offer],
    unavailable: Collection[Site],
    created: datetime,
    rebalance: Mapping[str, Any] | None = None,
) -> Replanning:
    """The request of ``replan``: see there."""
    from dataclasses import replace

    spec = doc.request
    context = Context(
        policy=doc.policy,
        timezone=doc.timezone,
        slot_origin=doc.slot_origin,
        windows=doc.windows,
        max_price_age_hours=doc.max_price_age_hours,
    )
    request = request_for(spec, offers, context, created, unavailable)
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
    return Replanning(spec, context, request, extra)


def replan(
    doc: pd.PlanDocument,
    offers: Sequence[Offer],
    snapshots: Sequence[SnapshotInfo],
    unavailable: Collection[Site],
    created: datetime,
    rebalance: Mapping[str, Any] | None = None,
) -> pd.PlanDocument:
    """Solve a plan's request again, on these offers and without these pools.

    ``rebalance`` (from the rebalancer) holds ``slot``, ``incumbent`` {pool5: n},
    ``migration_hours`` {workload: h} and ``reserved`` {pool4: n}: see PlanRequest."""
    again = replanning(doc, offers, unavailable, created, rebalance)
    solved = run(again.request)
    pid = plan_id(again.spec, snapshots, again.context, unavailable, again.extra)
    return document(pid, solved, snapshots, doc.gpus, again.spec, again.context, created, unavailable)
