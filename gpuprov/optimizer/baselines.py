"""What the plan is compared with: how people buy GPUs without gpuprov, under the request's rules.

Every baseline is built on the request's whole offer set (``reduce.usable``: before dominance
and pruning), and obeys what the plan obeys: the allowed clouds, regions and markets (already
applied to ``request.offers``), node sizes, each workload's spot ceiling, a gang in one location
on one GPU model, and a spread over k zones with at most C[w,t] GPUs in any one of them (the
plan's spread cap, ``problem.spread_cap``). Caps and budget are the plan's own limits and are
not imposed on them. A baseline that cannot be built under those rules is returned as a
``Result`` with no cost and a ``reason``, never as a made-up number.

(a) ``all_on_demand``: everything on demand in the one location (zone, or region where prices
    are regional) that is cheapest over the horizon; a spread workload takes that location and
    the cheapest others of its region, an equal share in each.
(b) ``best_single_offer``: one offer held every slot at peak total demand, as a one-resource
    picker (SkyPilot, dstack) would choose: spot only where every workload may run wholly on
    spot; impossible for a workload that must spread over zones.
(c) ``reserved_plus_spot``: the common rule: each workload's base load (its quietest slot) on
    reserved instances, the rest on spot up to the workload's spot ceiling, on demand above it;
    a gang's all in one location on one model, a spread workload in equal shares over its k
    cheapest locations.

Costs are what the clouds bill over the horizon (no interruption overhead): the same quantity
as the plan's ``horizon_usd`` they are compared with.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache, partial

from gpuprov.models import Market, Offer, Workload
from gpuprov.optimizer.problem import PlanRequest, eligible, gang_site, spread_cap

Cover = tuple[Decimal, int]  # (cost, GPUs held)


@dataclass(frozen=True)
class Result:
    cost: Decimal | None
    where: str | None = None
    offer: Offer | None = None
    reason: str | None = None


def cover(demand: int, options: Sequence[tuple[int, Decimal]], cap: int | None = None) -> Cover | None:
    """Least cost of instances (g GPUs at price p each) holding at least ``demand`` GPUs and, when
    given, at most ``cap``; ties go to fewer GPUs. Exact (see ``_cover``)."""
    if demand <= 0:
        return Decimal(0), 0
    by_size: dict[int, Decimal] = {}
    for g, p in options:
        if g > 0 and (g not in by_size or p < by_size[g]):
            by_size[g] = p
    if not by_size or (cap is not None and cap < demand):
        return None
    return _cover(demand, tuple(sorted(by_size.items())), cap)


@lru_cache(maxsize=8192)
def _cover(demand: int, sizes: tuple[tuple[int, Decimal], ...], cap: int | None) -> Cover | None:
    """An optimal cover of exactly c GPUs uses fewer than g* instances of every other size (g* GPUs
    at the best price per GPU): g* of size g give way to g of size g*, same GPUs, no more cost.
    So all but the last g*·(Σ g + 1) GPUs go on the best size, and a table over exact GPU counts
    does the rest; no minimal cover holds more than demand + max g − 1 GPUs."""
    best_g, best_p = min(sizes, key=lambda gp: (gp[1] / gp[0], -gp[0]))
    window = best_g * (sum(g for g, _p in sizes) + 1)
    bulk = max(0, (demand - window) // best_g)
    rest = demand - bulk * best_g
    top = rest + max(g for g, _p in sizes) - 1
    if cap is not None:
        top = min(top, cap - bulk * best_g)
    if top < rest:
        return None
    inf = None
    exact: list[Decimal | None] = [Decimal(0)] + [inf] * top
    for c in range(1, top + 1):
        cands = [p + prev for g, p in sizes if g <= c and (prev := exact[c - g]) is not None]
        exact[c] = min(cands) if cands else None
    found = [(v, c) for c in range(rest, top + 1) if (v := exact[c]) is not None]
    if not found:
        return None
    cost, gpus = min(found)
    return bulk * best_p + cost, bulk * best_g + gpus


def _options(
    offers: Sequence[Offer], w: Workload, market: Market | None = None, reserved: bool = False
) -> list[tuple[int, Decimal]]:
    return [
        (o.gpus_per_instance, o.hourly_usd)
        for o in offers
        if eligible(o, w) and (o.market.is_reserved if reserved else o.market is market)
    ]


def _caps(request: PlanRequest, w: Workload, offers: Sequence[Offer]) -> list[int]:
    smallest = min((o.gpus_per_instance for o in offers if eligible(o, w)), default=1)
    return [spread_cap(d, w, smallest) for d in request.demand[w.name]]


WORK_REASON = (
    "demand is in work units (tokens or samples a second): the plan's work report holds the best "
    "single-GPU-type plan under the same rules"
)


def _in_work_units(request: PlanRequest) -> bool:
    """These baselines count GPUs; a request whose demand is in work units gets none of them."""
    return any(w.replicas for w in request.workloads)


# ------------------------------------------------------------------------ (a) all on demand


def all_on_demand(request: PlanRequest, offers: Sequence[Offer]) -> Result:
    if _in_work_units(request):
        return Result(None, reason=WORK_REASON)
    od = [o for o in offers if o.market is Market.ON_DEMAND]
    if not od:
        return Result(None, reason="no on-demand offer in the request's clouds, regions and markets")
    places: dict[str, list[Offer]] = defaultdict(list)
    region_of: dict[str, tuple[str, str]] = {}
    for o in od:
        places[o.location].append(o)
        region_of[o.location] = (o.cloud.value, o.region)
    best: tuple[Decimal, str] | None = None
    for place in sorted(places):
        total = Decimal(0)
        where = place
        for w in request.workloads:
            if w.spread_zones >= 2:
                peers = {p: v for p, v in places.items() if region_of[p] == region_of[place]}
                got = _spread(request, w, peers, partial(_od_cost, w=w), first=place)
                if got is None:
                    break
                total += got[0]
                where = f"{place} (+ {', '.join(got[1][1:])} for {w.name})"
            else:
                got_one = _at_one_site(request, w, places[place], partial(_od_cost, w=w))
                if got_one is None:
                    break
                total += got_one
        else:
            if best is None or total < best[0]:
                best = (total, where)
    if best is None:
        return Result(None, reason="no single location offers every workload on demand under its rules")
    return Result(best[0], where=best[1])


def _od_cost(offers: Sequence[Offer], demand: int, cap: int | None = None, *, w: Workload) -> Decimal | None:
    got = cover(demand, _options(offers, w, Market.ON_DEMAND), cap)
    return None if got is None else got[0]


def _at_one_site(
    request: PlanRequest,
    w: Workload,
    offers: Sequence[Offer],
    slot_cost: Callable[[Sequence[Offer], int], Decimal | None],
) -> Decimal | None:
    """w's horizon cost on these offers; a gang picks its cheapest GPU model among them."""
    groups: dict[str, list[Offer]] = defaultdict(list)
    for o in offers:
        if eligible(o, w):
            groups[o.gpu if w.gang else ""].append(o)
    best: Decimal | None = None
    for group in groups.values():
        total: Decimal | None = Decimal(0)
        for d in request.demand[w.name]:
            c = slot_cost(group, d)
            if c is None:
                total = None
                break
            total = (total or Decimal(0)) + c
        if total is not None and (best is None or total < best):
            best = total
    if best is None and not any(request.demand[w.name]):
        return Decimal(0)
    return best


def _spread(
    request: PlanRequest,
    w: Workload,
    places: dict[str, list[Offer]],
    slot_cost: Callable[[Sequence[Offer], int, int], Decimal | None],
    first: str | None = None,
) -> tuple[Decimal, list[str]] | None:
    """w in equal shares ⌈D/k⌉ over k distinct locations, each under the spread cap: the k
    cheapest (with ``first`` always among them)."""
    k = w.spread_zones
    caps = _caps(request, w, [o for v in places.values() for o in v])
    per_place: dict[str, Decimal] = {}
    for place, offers in places.items():
        total = Decimal(0)
        for d, cap in zip(request.demand[w.name], caps, strict=True):
            c = slot_cost(offers, math.ceil(d / k), cap)
            if c is None:
                break
            total += c
        else:
            per_place[place] = total
    if first is not None and first not in per_place:
        return None
    order = sorted(per_place, key=lambda p: (p != first, per_place[p], p))
    if len(order) < k:
        return None
    chosen = order[:k]
    return sum((per_place[p] for p in chosen), Decimal(0)), chosen


# ------------------------------------------------------------------------ (b) best single offer


def best_single_offer(request: PlanRequest, offers: Sequence[Offer]) -> Result:
    if _in_work_units(request):
        return Result(None, reason=WORK_REASON)
    spread = [w.name for w in request.workloads if w.spread_zones >= 2]
    if spread:
        return Result(None, reason=f"one offer sits in one location; {', '.join(spread)} must spread over zones")
    slots = request.slots
    peak = max(sum(request.demand[w.name][t] for w in request.workloads) for t in range(slots))
    all_spot_ok = all(w.max_spot_fraction >= 1 for w in request.workloads)
    best: tuple[Decimal, Offer] | None = None
    for o in offers:
        if not all(eligible(o, w) for w in request.workloads):
            continue
        if o.market is Market.SPOT and not all_spot_ok:
            continue
        cost = o.hourly_usd * math.ceil(peak / o.gpus_per_instance) * slots
        if best is None or (cost, o.key) < (best[0], best[1].key):
            best = (cost, o)
    if best is None:
        return Result(None, reason="no single offer fits every workload's node size and spot ceiling")
    return Result(best[0], where=best[1].location, offer=best[1])


# ------------------------------------------------------------------------ (c) reserved base + spot


def reserved_plus_spot(request: PlanRequest, offers: Sequence[Offer]) -> Result:
    if _in_work_units(request):
        return Result(None, reason=WORK_REASON)
    if not any(o.market.is_reserved for o in offers):
        return Result(None, reason="no reserved offer in the request's markets")
    total = Decimal(0)
    for w in request.workloads:
        base = min(request.demand[w.name], default=0)
        if w.spread_zones >= 2:
            places: dict[str, list[Offer]] = defaultdict(list)
            for o in offers:
                if eligible(o, w):
                    places[o.location].append(o)
            share = math.ceil(base / w.spread_zones)
            got = _spread(request, w, places, partial(_rule_slot_at, w=w, base=share))
            if got is None:
                return Result(None, reason=f"{w.name}: no {w.spread_zones} locations can hold it by the rule")
            total += got[0]
        elif w.gang:
            sites: dict[tuple[str, str], list[Offer]] = defaultdict(list)
            for o in offers:
                if eligible(o, w):
                    sites[gang_site(o)].append(o)
            costs = [c for v in sites.values() if (c := _rule_horizon(request, w, v, base)) is not None]
            if not costs:
                return Result(None, reason=f"{w.name}: no one location holds the gang by the rule")
            total += min(costs)
        else:
            c = _rule_horizon(request, w, offers, base)
            if c is None:
                return Result(None, reason=f"{w.name}: the offers cannot hold it by the rule")
            total += c
    return Result(total)


def _rule_horizon(request: PlanRequest, w: Workload, offers: Sequence[Offer], base: int) -> Decimal | None:
    total = Decimal(0)
    for d in request.demand[w.name]:
        c = _rule_slot(offers, w, d, base)
        if c is None:
            return None
        total += c
    return total


def _rule_slot_at(offers: Sequence[Offer], demand: int, cap: int, *, w: Workload, base: int) -> Decimal | None:
    return _rule_slot(offers, w, demand, base, cap)


def _rule_slot(offers: Sequence[Offer], w: Workload, demand: int, base: int, cap: int | None = None) -> Decimal | None:
    """One slot by the rule: the base on reserved (held in every slot), spot up to the ceiling
    s·D on the cheapest spot rate per GPU, on demand for the rest; at most ``cap`` GPUs."""
    reserved = cover(base, _options(offers, w, reserved=True), cap)
    if reserved is None:
        return None
    cost, held = reserved
    rest = max(0, demand - held)
    room = min(rest, math.floor(w.max_spot_fraction * demand), (cap - held) if cap is not None else rest)
    spot = sorted(_options(offers, w, Market.SPOT), key=lambda gp: (gp[1] / gp[0], -gp[0]))
    spot_gpus = 0
    if spot and room > 0:
        g, p = spot[0]
        n = room // g
        cost += n * p
        spot_gpus = n * g
    left = rest - spot_gpus
    if left > 0:
        od = cover(left, _options(offers, w, Market.ON_DEMAND), None if cap is None else cap - held - spot_gpus)
        if od is None:
            return None
        cost += od[0]
    return cost


def min_cover_cost(demand: int, options: Sequence[tuple[int, Decimal]]) -> Decimal | None:
    """Least cost of instances (g GPUs at price p) that together hold at least ``demand`` GPUs."""
    got = cover(demand, options)
    return None if got is None else got[0]
