"""Why a plan looks the way it does: binding constraints, and why a request is infeasible."""

from __future__ import annotations

import math
from collections import defaultdict
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuprov.errors import InfeasibleError, TimeLimitError
from gpuprov.models import Market, Offer, Plan
from gpuprov.optimizer.problem import PlanRequest, eligible, work

if TYPE_CHECKING:
    from gpuprov.optimizer.clock import Clock


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
                f"budget ${_plain(request.budget_per_hour)}/h is below the cheapest cover of the "
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


def _caps(request: PlanRequest) -> list[str]:
    parts = []
    if request.region_caps:
        caps = ", ".join(f"{c}/{r} <= {n}" for (c, r), n in sorted(request.region_caps.items())[:4])
        more = len(request.region_caps) - 4
        parts.append(f"the region caps ({caps}{f', and {more} more' if more > 0 else ''} instances)")
    if request.offer_caps:
        parts.append(f"the instance caps on {len(request.offer_caps)} offers")
    return parts


def _rules(request: PlanRequest) -> list[str]:
    parts = _caps(request)
    if request.budget_per_hour is not None:
        parts.append(f"the ${_plain(request.budget_per_hour)}/h budget")
    if request.reserved_fixed is not None:
        parts.append("the reservations held fixed")
    if any(w.gang for w in request.workloads):
        parts.append("one location per gang")
    if any(w.spread_zones >= 2 for w in request.workloads):
        parts.append("the spread over zones")
    if any(w.max_spot_fraction < 1 for w in request.workloads):
        parts.append("the spot ceilings")
    return parts


def _peak(request: PlanRequest) -> str:
    t = max(range(request.slots), key=lambda t: (sum(request.demand[w.name][t] for w in request.workloads), -t))
    needs = ", ".join(f"{w.name} {request.demand[w.name][t]}" for w in request.workloads)
    return f"slot {t} ({needs} GPUs of {request.gpu})"


def infeasible(request: PlanRequest, offers: list[Offer], status: str) -> InfeasibleError:
    joined = ", ".join(_rules(request)) or "the cover constraints"
    return InfeasibleError(
        f"no plan meets the demand for {request.gpu} under {joined} (solver: {status})",
        hint="raise the caps or budget, allow more clouds/regions/markets, or lower the demand",
    )


def proven_infeasible(request: PlanRequest, offers: list[Offer], clock: Clock) -> InfeasibleError:
    """The LP relaxation of the whole model is infeasible: a proof that no plan exists. Name the
    family of rows that makes it so (the relaxation without it is feasible) and the peak demand."""
    from dataclasses import replace

    from gpuprov.optimizer.cbc import solve_lp
    from gpuprov.optimizer.model import build

    families = []
    if request.budget_per_hour is not None:
        families.append((f"the ${_plain(request.budget_per_hour)}/h budget", replace(request, budget_per_hour=None)))
    if request.region_caps or request.offer_caps:
        families.append((" and ".join(_caps(request)), replace(request, region_caps={}, offer_caps={})))
    for name, relaxed in families:
        if clock.left() < 1:
            break
        if solve_lp(build(relaxed, offers).prob, clock.solver_time(0.5)).optimal:
            return InfeasibleError(
                f"no plan meets the demand under {name}: even its LP relaxation is infeasible, and "
                f"without {name.removeprefix('the ')} it is not; the demand peaks at {_peak(request)}",
                hint=f"raise {name.removeprefix('the ')}, allow more clouds/regions/markets, or lower the demand",
            )
    joined = ", ".join(_rules(request)) or "the cover constraints"
    return InfeasibleError(
        f"no plan meets the demand under {joined}: even the LP relaxation is infeasible; the demand "
        f"peaks at {_peak(request)}",
        hint="raise the caps or budget, allow more clouds/regions/markets, or lower the demand",
    )


def timed_out(request: PlanRequest, clock: Clock, tried: list[str]) -> TimeLimitError:
    """No plan within the time limit: not a proof that none exists."""
    relax = _rules(request)
    what = f"; or relax {', '.join(relax)}" if relax else ""
    return TimeLimitError(
        f"no plan found within the {request.time_limit_s:g} s time limit (tried {', then '.join(tried)}); "
        "this does not prove that none exists",
        hint=f"raise --time-limit, or a larger --gap{what}",
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
            out.append(f"budget ${_plain(request.budget_per_hour)}/h: peak slot costs ${peak}")
    for a in plan.allocations:
        cap = request.offer_caps.get(a.offer.key)
        if cap is not None and max(a.instances_by_slot) >= cap:
            out.append(f"cap {cap} on {a.offer.instance_type} {a.offer.market} in {a.offer.location}")
    return tuple(out)


def _plain(value: object) -> str:
    """A budget as the user wrote it: 5, not 5.0000000000 (money is held to 1e-10 USD)."""
    if not isinstance(value, Decimal):
        return str(value)
    return f"{value.normalize():f}"
