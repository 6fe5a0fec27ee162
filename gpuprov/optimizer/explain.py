"""Why a plan looks the way it does: binding constraints, and why a request is infeasible."""

from __future__ import annotations

import math
from collections import defaultdict
from decimal import Decimal
from typing import Any

from gpuprov.errors import InfeasibleError
from gpuprov.models import Market, Offer, Plan
from gpuprov.optimizer.problem import PlanRequest, eligible, work


def _shape(request: PlanRequest, name: str) -> str:
    w = next(w for w in request.workloads if w.name == name)
    node = f"{w.node_gpus}-GPU nodes of " if w.node_gpus else ""
    return f"{name} ({node}{request.gpu})"


def raise_if_obviously_infeasible(request: PlanRequest, offers: list[Offer]) -> None:
    """Name the constraint that cannot be met, before a solver is asked."""
    for w in request.workloads:
        peak = max(request.demand[w.name], default=0)
        if peak <= 0:
            continue
        mine = [o for o in offers if eligible(o, w)]
        if not mine:
            raise InfeasibleError(f"{_shape(request, w.name)}: no offer in the allowed clouds, regions and markets")
        if all(o.market is Market.SPOT for o in mine) and w.max_spot_fraction < 1:
            raise InfeasibleError(
                f"{_shape(request, w.name)}: only spot offers are allowed, but at most "
                f"{w.max_spot_fraction:.0%} of it may run on spot"
            )
        if w.gang and not w.replicas:  # the caps count GPUs; work-unit demand is not compared
            best = _largest_place(request, mine)
            if best is not None and best[1] < peak:
                raise InfeasibleError(
                    f"training gang of {peak} {request.gpu} ({w.name}): the largest "
                    f"location, {best[0]}, offers {best[1]} under the caps"
                )
    if request.budget_per_hour is not None:
        floor = _cheapest_hour(request, offers)
        if floor is not None and floor > request.budget_per_hour:
            raise InfeasibleError(
                f"budget ${request.budget_per_hour}/h is below the cheapest cover of the "
                f"peak hour, ${floor.quantize(Decimal('0.01'))}/h"
            )


def _largest_place(request: PlanRequest, offers: list[Offer]) -> tuple[str, int] | None:
    """The location with the most GPUs under per-offer caps (None when uncapped)."""
    per_place: dict[str, int] = defaultdict(int)
    for o in offers:
        cap = request.offer_caps.get(o.key)
        if cap is None:
            return None
        per_place[o.location] += cap * o.gpus_per_instance
    if not per_place:
        return None
    place = max(sorted(per_place), key=lambda k: per_place[k])
    return place, per_place[place]


def _cheapest_hour(request: PlanRequest, offers: list[Offer]) -> Decimal | None:
    """A lower bound on the cost of the busiest slot: every GPU (or unit of work) at the cheapest
    usable rate."""
    total = Decimal(0)
    for t in range(request.slots):
        hour = Decimal(0)
        for w in request.workloads:
            d = request.demand[w.name][t]
            rates = [o.hourly_usd / work(o, w) for o in offers if eligible(o, w)]  # per GPU, or per unit
            if d > 0 and rates:
                hour += min(rates) * d
        total = max(total, hour)
    return total


def infeasible(request: PlanRequest, offers: list[Offer], status: str) -> InfeasibleError:
    parts = []
    if request.offer_caps or request.region_caps:
        parts.append("the instance caps")
    if request.budget_per_hour is not None:
        parts.append(f"the ${request.budget_per_hour}/h budget")
    if any(w.gang for w in request.workloads):
        parts.append("one location per gang")
    if any(w.max_spot_fraction < 1 for w in request.workloads):
        parts.append("the spot ceilings")
    joined = ", ".join(parts) or "the cover constraints"
    return InfeasibleError(
        f"no plan meets the demand for {request.gpu} under {joined} (solver: {status})",
        hint="raise the caps or budget, allow more clouds/regions/markets, or lower the demand",
    )


def binding(
    request: PlanRequest, plan: Plan, gang_vars: dict[str, dict[tuple[str, str], tuple[Any, Any]]]
) -> tuple[str, ...]:
    """Human-readable constraints that are tight in the answer."""
    out: list[str] = []
    slots = plan.horizon_hours
    for w in request.workloads:
        tight = 0
        for t in range(slots):
            d = request.demand[w.name][t]
            if d <= 0 or w.max_spot_fraction >= 1:
                continue
            spot = sum(
                work(a.offer, w) * a.instances_by_slot[t]
                for a in plan.allocations
                if a.workload == w.name and a.offer.market is Market.SPOT
            )
            room = math.floor(float(w.max_spot_fraction) * d + 1e-9) - spot
            smallest = min(
                (work(o, w) for o in request.offers if o.market is Market.SPOT and eligible(o, w)),
                default=None,
            )
            if smallest is not None and room < smallest:
                tight += 1
        if tight:
            out.append(f"spot ceiling {w.max_spot_fraction:.0%} of {w.name}: tight in {tight}/{slots} slots")
        if w.gang and w.name in gang_vars:
            chosen = [k for k, (b, c) in gang_vars[w.name].items() if (b.value() or 0) > 0.5 and (c.value() or 0) > 0.5]
            if chosen:
                out.append(f"gang: all of {w.name} in {chosen[0][0]} on {chosen[0][1]}")
    if request.budget_per_hour is not None:
        peak = max(plan.slot_cost_usd, default=Decimal(0))
        if request.budget_per_hour - peak < Decimal("0.01") * request.budget_per_hour:
            out.append(f"budget ${request.budget_per_hour}/h: peak slot costs ${peak}")
    for a in plan.allocations:
        cap = request.offer_caps.get(a.offer.key)
        if cap is not None and max(a.instances_by_slot) >= cap:
            out.append(f"cap {cap} on {a.offer.instance_type} {a.offer.market} in {a.offer.location}")
    return tuple(out)
