"""Exact reductions of the offer set before the MILP is built (see problem.py's docstring)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from gpuprov.models import Market, Offer, Workload
from gpuprov.optimizer.baselines import min_cover_cost
from gpuprov.optimizer.problem import OfferKey, PlanRequest, effective_price, eligible, gang_site


@dataclass(frozen=True)
class Prepared:
    offers: list[Offer]
    dropped: int  # dominated within a location, market and size
    pruned: int  # proven unable to improve the plan
    notes: tuple[str, ...]


def expand_reserved(offers: Sequence[Offer], capped: frozenset[OfferKey] = frozenset()) -> list[Offer]:
    """Give each regional reserved offer a copy in each zone offering its instance type
    (a capped one stays regional, so that its cap still names it)."""
    zones: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for o in offers:
        if o.zone is not None:
            zones[(o.cloud.value, o.region, o.instance_type)].add(o.zone)
    out: list[Offer] = []
    for o in offers:
        where = sorted(zones.get((o.cloud.value, o.region, o.instance_type), ()))
        if o.market.is_reserved and o.zone is None and where and o.key not in capped:
            out.extend(replace(o, zone=z) for z in where)
        else:
            out.append(o)
    return out


def drop_dominated(offers: Sequence[Offer], keep: set[OfferKey]) -> list[Offer]:
    """Keep, per (location, GPU model, market, GPUs per instance, interconnect), the cheapest offer
    (the model is part of the key: a gang runs one model, so a cheaper model does not dominate)."""
    best: dict[tuple[str, str, str, str, int, str | None, Decimal | None], Offer] = {}
    kept: list[Offer] = []
    for o in offers:
        if o.key in keep:
            kept.append(o)
            continue
        # spot pools with different interruption rates are not comparable on price alone
        k = (
            o.cloud.value,
            o.location,
            o.gpu,
            o.market.value,
            o.gpus_per_instance,
            o.interconnect,
            o.interruptions_per_hour,
        )
        cur = best.get(k)
        if cur is None or (o.hourly_usd, o.instance_type) < (cur.hourly_usd, cur.instance_type):
            best[k] = o
    return kept + sorted(best.values(), key=lambda o: o.key)


def _cheapest_per_class(offers: Sequence[Offer], w: Workload, request: PlanRequest) -> list[Offer]:
    best: dict[tuple[str, int], Offer] = {}
    for o in offers:
        if not eligible(o, w):
            continue
        k = (o.market.value, o.gpus_per_instance)
        price = effective_price(o, w, request)
        if k not in best or (price, o.key) < (effective_price(best[k], w, request), best[k].key):
            best[k] = o
    return list(best.values())


def _rates(offers: Sequence[Offer], w: Workload, request: PlanRequest) -> tuple[Decimal | None, Decimal | None]:
    """Cheapest $/GPU-h off spot and on spot (overhead included) among w's offers."""
    firm = [o.usd_per_gpu_hour for o in offers if eligible(o, w) and o.market is not Market.SPOT]
    spot = [
        effective_price(o, w, request) / o.gpus_per_instance
        for o in offers
        if eligible(o, w) and o.market is Market.SPOT
    ]
    return (min(firm) if firm else None), (min(spot) if spot else None)


def _lower(offers: Sequence[Offer], w: Workload, request: PlanRequest, demand: Sequence[int]) -> Decimal | None:
    """A lower bound on w's cost over the horizon with only these offers (reservations counted
    at their hourly rate for the GPU-hours w uses them: the share of a reservation's cost w
    must bear)."""
    firm, spot = _rates(offers, w, request)
    if firm is None and (spot is None or w.max_spot_fraction < 1):
        return None if any(demand) else Decimal(0)
    s = w.max_spot_fraction
    total = Decimal(0)
    for d in demand:
        cheap = min(r for r in (firm, spot) if r is not None)
        total += d * s * cheap + d * (1 - s) * (firm if firm is not None else cheap)
    return total


def _upper(offers: Sequence[Offer], w: Workload, request: PlanRequest, demand: Sequence[int]) -> Decimal | None:
    """The cost of one feasible way to serve w with these offers: spot up to the ceiling on the
    cheapest spot size, the rest on demand (overhead included)."""
    od = [(o.gpus_per_instance, o.hourly_usd) for o in offers if eligible(o, w) and o.market is Market.ON_DEMAND]
    spots = sorted(
        (
            (effective_price(o, w, request) / o.gpus_per_instance, o.gpus_per_instance, effective_price(o, w, request))
            for o in offers
            if eligible(o, w) and o.market is Market.SPOT
        ),
        key=lambda t: t[0],
    )
    total = Decimal(0)
    for d in demand:
        spot_cost, spot_gpus = Decimal(0), 0
        if spots:
            _rate, g, p = spots[0]
            n = int(w.max_spot_fraction * d) // g
            spot_cost, spot_gpus = n * p, n * g
        rest = min_cover_cost(d - spot_gpus, od)
        if rest is None:
            return None
        total += spot_cost + rest
    return total


def prune(offers: list[Offer], request: PlanRequest) -> tuple[list[Offer], list[str]]:
    """Drop offers that provably cannot be in an optimal plan (exact; skipped under caps/budget,
    and for demand in work units: the bounds below count GPUs)."""
    if request.capped or any(w.replicas for w in request.workloads):
        return offers, []
    notes: list[str] = []
    keep: set[OfferKey] = set()
    lowers: dict[str, Decimal] = {}
    uppers: dict[str, Decimal] = {}
    per_place: dict[str, dict[tuple[str, str], list[Offer]]] = {}
    for w in request.workloads:
        demand = request.demand[w.name]
        if w.gang:
            places: dict[tuple[str, str], list[Offer]] = defaultdict(list)
            for o in offers:
                if eligible(o, w):
                    places[gang_site(o)].append(o)
            per_place[w.name] = places
            lo = [b for b in (_lower(v, w, request, demand) for v in places.values()) if b is not None]
            up = [b for b in (_upper(v, w, request, demand) for v in places.values()) if b is not None]
            if not lo or not up:
                return offers, []
            lowers[w.name], uppers[w.name] = min(lo), min(up)
        elif w.spread_zones <= 1:
            mine = _cheapest_per_class(offers, w, request)
            keep.update(o.key for o in mine)
            lo_w = _lower(mine, w, request, demand)
            up_w = _upper(mine, w, request, demand)
            if lo_w is None or up_w is None:
                return offers, []
            lowers[w.name], uppers[w.name] = lo_w, up_w
        else:
            keep.update(o.key for o in offers if eligible(o, w))
            lo_s = _lower(offers, w, request, demand)
            if lo_s is None:
                return offers, []
            lowers[w.name], uppers[w.name] = lo_s, Decimal("Infinity")
    best_total = sum(uppers.values(), Decimal(0))
    for w in request.workloads:
        if not w.gang:
            continue
        others = sum((v for k, v in lowers.items() if k != w.name), Decimal(0))
        kept_places = 0
        for mine in per_place[w.name].values():
            lo_p = _lower(mine, w, request, request.demand[w.name])
            if lo_p is not None and lo_p + others <= best_total:
                keep.update(o.key for o in mine)
                kept_places += 1
        notes.append(f"{w.name}: {kept_places} of {len(per_place[w.name])} gang locations can beat a feasible plan")
    kept = [o for o in offers if o.key in keep]
    return kept, notes


def usable(request: PlanRequest) -> list[Offer]:
    """The request's whole offer set before any reduction: regional reservations in their zones,
    offers some workload may use, pools not marked unavailable. Baselines are built on this."""
    return [
        o
        for o in expand_reserved(request.offers, frozenset(request.offer_caps))
        if any(eligible(o, w) for w in request.workloads)
        and (o.cloud.value, o.location, o.instance_type, o.market.value) not in request.unavailable
    ]


def prepare(request: PlanRequest) -> Prepared:
    usable_offers = usable(request)
    if not request.exact_reductions:
        return Prepared(offers=usable_offers, dropped=0, pruned=0, notes=())
    running = {k[:4] for k in request.incumbent}
    commits = [*request.held, *(opt.held(request.slots, Decimal(0)) for opt in request.savings_plan_options)]
    keep = set(request.offer_caps) | {
        o.key
        for o in usable_offers
        if (o.cloud.value, o.location, o.instance_type, o.market.value) in running
        or any(c.covers(o) for c in commits)  # a covered offer may cost nothing at the margin
    }
    undominated = drop_dominated(usable_offers, keep)
    kept, notes = prune(undominated, request)
    return Prepared(
        offers=kept,
        dropped=len(usable_offers) - len(undominated),
        pruned=len(undominated) - len(kept),
        notes=tuple(notes),
    )
