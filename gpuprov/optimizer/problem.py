r"""The mixed-integer program behind ``gpuprov plan``.

Sets and data
    t ∈ T          hourly slots (1 for a constant plan, 24 for a day, 168 for a week)
    w ∈ W          workloads (e.g. ``training``, ``inference``), demand D[w,t] in GPUs
    o ∈ F          on-demand and spot offers: g_o GPUs per instance, p_o USD per instance-hour
    o ∈ R          reserved offers, p_o their effective hourly rate (commitment amortised)
    E(w) ⊆ F ∪ R   offers workload w may use: g_o equals w's node size when one is set
    l(o)           the offer's location: its zone, or its region when it has no zone

Variables
    x[o,w,t] ∈ ℤ≥0     instances of o ∈ F serving w in slot t
    y[o]     ∈ ℤ≥0     reserved instances of o ∈ R, held (and paid) in every slot
    r[o,w,t] ≥ 0       reserved instances of o used by w in slot t
    b[w,k]   ∈ {0,1}   w's gang sits in location k (gang workloads only)

Constraints
    reserved use   Σ_w r[o,w,t] ≤ y[o]                                     ∀ o∈R, t
    cover          Σ_{o∈E(w)} g_o·(x[o,w,t] + r[o,w,t]) ≥ D[w,t]           ∀ w, t
    spot ceiling   Σ_{o∈E(w), spot} g_o·x[o,w,t] ≤ s_w·D[w,t]              ∀ w, t
    gang           Σ_k b[w,k] = 1;  x[o,w,t] ≤ M_{o,w}·b[w,l(o)], r[o,w,t] ≤ M_{o,w}·b[w,l(o)]
                   with M_{o,w} = ⌈max_t D[w,t] / g_o⌉ (all of w's capacity, every slot, one place)
    offer cap      Σ_w x[o,w,t] ≤ u_o (o∈F);  y[o] ≤ u_o (o∈R)             ∀ t
    region cap     Σ_{o∈F in region} Σ_w x[o,w,t] + Σ_{o∈R in region} y[o] ≤ U_region   ∀ t
    budget         Σ_{o∈F} p_o·Σ_w x[o,w,t] + Σ_{o∈R} p_o·y[o] ≤ B        ∀ t

Objective
    min Σ_t Σ_{o∈F} p_o·(1 + h_o)·Σ_w x[o,w,t] + |T|·Σ_{o∈R} p_o·y[o]
    where h_o = interruptions per hour × hours of work lost per interruption for spot
    offers (the expected interruption overhead), 0 otherwise.

A regional reserved offer (no zone) is expanded, before the model is built, into one
copy per zone where the same instance type is offered in that region, so that a gang
can count it as sitting in its zone. Offers dominated within a (location, market,
instance size) — a higher price per GPU than another offer there — are dropped first,
unless a cap names them.

This module only builds; ``solve.py`` runs a solver and reads the answer back.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

from gpuprov.models import Market, Offer, Workload


@dataclass(frozen=True)
class PlanRequest:
    """Everything the optimizer needs; it never reads a database, a clock or the screen."""

    gpu: str
    workloads: tuple[Workload, ...]
    demand: Mapping[str, Sequence[int]]
    offers: Sequence[Offer]
    offer_caps: Mapping[tuple[str, str, str, str, str], int] = field(default_factory=dict)
    region_caps: Mapping[tuple[str, str], int] = field(default_factory=dict)
    budget_per_hour: Decimal | None = None
    spot_overhead: Mapping[str, Decimal] = field(default_factory=dict)   # cloud -> h_o
    gap: float = 0.001
    time_limit_s: float = 60.0
    solver: str = "cbc"

    @property
    def slots(self) -> int:
        lengths = {len(v) for v in self.demand.values()}
        if len(lengths) != 1:
            raise ValueError("every workload needs a demand for every slot")
        return lengths.pop()


def expand_reserved(offers: Sequence[Offer]) -> list[Offer]:
    """Give each regional reserved offer a copy in each zone offering its instance type."""
    zones: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for o in offers:
        if o.zone is not None:
            zones[(o.cloud.value, o.region, o.instance_type)].add(o.zone)
    out: list[Offer] = []
    for o in offers:
        if o.market.is_reserved and o.zone is None:
            where = sorted(zones.get((o.cloud.value, o.region, o.instance_type), ()))
            out.extend(replace(o, zone=z) for z in where) if where else out.append(o)
        else:
            out.append(o)
    return out


def drop_dominated(offers: Sequence[Offer], keep: set[tuple[str, str, str, str, str]]) -> list[Offer]:
    """Keep, per (location, market, GPUs per instance, interconnect), the cheapest offer per GPU."""
    best: dict[tuple[str, str, str, int, str | None], Offer] = {}
    kept: list[Offer] = []
    for o in offers:
        if o.key in keep:
            kept.append(o)
            continue
        k = (o.cloud.value, o.location, o.market.value, o.gpus_per_instance, o.interconnect)
        cur = best.get(k)
        if cur is None or (o.hourly_usd, o.instance_type) < (cur.hourly_usd, cur.instance_type):
            best[k] = o
    return kept + sorted(best.values(), key=lambda o: o.key)


def eligible(offer: Offer, workload: Workload) -> bool:
    return workload.node_gpus is None or offer.gpus_per_instance == workload.node_gpus


def big_m(demand: Sequence[int], gpus_per_instance: int) -> int:
    return max(1, math.ceil(max(demand, default=0) / gpus_per_instance))


def prepare(request: PlanRequest) -> tuple[list[Offer], int]:
    """The offers the model is built on, and how many dominated ones were dropped."""
    usable = [o for o in expand_reserved(request.offers)
              if any(eligible(o, w) for w in request.workloads)]
    kept = drop_dominated(usable, set(request.offer_caps))
    return kept, len(usable) - len(kept)


def effective_price(offer: Offer, request: PlanRequest) -> Decimal:
    if offer.market is Market.SPOT:
        return offer.hourly_usd * (1 + request.spot_overhead.get(offer.cloud.value, Decimal(0)))
    return offer.hourly_usd
