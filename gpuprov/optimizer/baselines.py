"""What the plan is compared with: how people buy GPUs without gpuprov.

(a) ``all_on_demand``: every slot's demand bought on demand in the one location (zone, or
    region where prices are regional) that is cheapest over the horizon.
(b) ``best_single_offer``: one offer held every slot at peak total demand, as a
    one-resource picker (SkyPilot, dstack) would choose; spot only where every workload
    may run wholly on spot.
(c) ``reserved_plus_spot``: the common rule: the base load (the quietest slot) on the
    cheapest reserved rate per GPU, everything above it on the cheapest spot rate per GPU
    (on demand where no spot is allowed), in any location.

Each respects node sizes; None where the baseline cannot be built from the offers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal
from functools import lru_cache

from gpuprov.models import Market, Offer, Workload
from gpuprov.optimizer.problem import PlanRequest, eligible


def min_cover_cost(demand: int, options: Sequence[tuple[int, Decimal]]) -> Decimal | None:
    """Least cost of instances (g GPUs at price p) that together hold at least ``demand`` GPUs."""
    if demand <= 0:
        return Decimal(0)
    if not options:
        return None
    by_size: dict[int, Decimal] = {}
    for g, p in options:
        if g not in by_size or p < by_size[g]:
            by_size[g] = p
    return _cover(demand, tuple(sorted(by_size.items())))


@lru_cache(maxsize=4096)
def _cover(demand: int, sizes: tuple[tuple[int, Decimal], ...]) -> Decimal:
    """Exact: an optimal cover uses fewer than g* instances of every other size (g* GPUs at
    the best price per GPU): g* of size g can give way to g of size g* at no more cost. So
    all but the last g*·(Σ g + 1) GPUs go on the best size, and a small search does the rest."""
    best_g, best_p = min(sizes, key=lambda gp: (gp[1] / gp[0], -gp[0]))
    window = best_g * (sum(g for g, _p in sizes) + 1)
    bulk = max(0, (demand - window) // best_g)
    rest = demand - bulk * best_g
    table = [Decimal(0)] * (rest + 1)
    for d in range(1, rest + 1):
        table[d] = min(p + table[max(0, d - g)] for g, p in sizes)
    return bulk * best_p + table[rest]


def all_on_demand(request: PlanRequest, offers: Sequence[Offer]) -> tuple[Decimal, str] | None:
    places: dict[str, list[Offer]] = defaultdict(list)
    for o in offers:
        if o.market is Market.ON_DEMAND:
            places[o.location].append(o)
    best: tuple[Decimal, str] | None = None
    for place in sorted(places):
        total = _horizon_cost(request, places[place])
        if total is not None and (best is None or total < best[0]):
            best = (total, place)
    return best


def _horizon_cost(request: PlanRequest, offers: Sequence[Offer]) -> Decimal | None:
    total = Decimal(0)
    for w in request.workloads:
        opts = [(o.gpus_per_instance, o.hourly_usd) for o in offers if eligible(o, w)]
        for d in request.demand[w.name]:
            cost = min_cover_cost(d, opts)
            if cost is None:
                return None
            total += cost
    return total


def best_single_offer(request: PlanRequest, offers: Sequence[Offer]) -> tuple[Decimal, Offer] | None:
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
    return best


def reserved_plus_spot(request: PlanRequest, offers: Sequence[Offer]) -> Decimal | None:
    slots = request.slots
    totals = [sum(request.demand[w.name][t] for w in request.workloads) for t in range(slots)]
    workloads: Sequence[Workload] = request.workloads

    def ok(o: Offer) -> bool:
        return all(eligible(o, w) for w in workloads)

    reserved = [(o.gpus_per_instance, o.hourly_usd) for o in offers if o.market.is_reserved and ok(o)]
    spot_allowed = any(w.max_spot_fraction > 0 for w in workloads)
    burst_market = Market.SPOT if spot_allowed else Market.ON_DEMAND
    burst = [(o.gpus_per_instance, o.hourly_usd) for o in offers if o.market is burst_market and ok(o)]
    if not burst:
        burst = [(o.gpus_per_instance, o.hourly_usd) for o in offers
                 if o.market is Market.ON_DEMAND and ok(o)]
    base = min(totals, default=0)
    base_cost = min_cover_cost(base, reserved) if reserved else None
    if base_cost is None:      # no reservation to be had: all of it is burst
        base, base_cost = 0, Decimal(0)
    total = base_cost * slots
    for d in totals:
        extra = min_cover_cost(max(0, d - base), burst)
        if extra is None:
            return None
        total += extra
    return total
