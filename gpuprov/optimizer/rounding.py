"""Whole instances from an LP solution of the model: the feasible start of every plan.

Reservations are rounded (down, to the nearest and up: the cheapest of the three is kept); a gang
with several sites in the model is placed at the sites its LP solution uses most (the best of a
few); then each profile is filled on its own: reserved use and instances rounded down, the
shortfall covered greedily by the option cheapest per GPU still needed that keeps the spot
ceiling, the spread caps, the per-offer and per-region instance caps and the $/h budget, and a
spread workload's location count made up where its caps alone do not force it. The continuous
part (usage billed against commitments, Savings Plan levels, launches beyond the running fleet)
is then the LP with every whole number fixed. The result is written into the model's variables
and checked against every row and bound of the model; a solution that fails a row is never used
(None).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuprov.models import Market
from gpuprov.optimizer.problem import PlanRequest, effective_price, spread_cap

if TYPE_CHECKING:
    from gpuprov.optimizer.clock import Clock
    from gpuprov.optimizer.model import Model

EPS = 1e-6
SITES_TRIED = 3  # gang sites rounded when the model holds several


@dataclass(frozen=True)
class Option:
    var: Any
    gpus: int
    cost: float  # USD for the profile (weight included); 0 for reserved use
    place: str
    spot: bool
    reserved: int | None  # index of the reservation it uses
    flex: int | None = None  # index of the on-demand or spot offer it launches
    region: tuple[str, str] | None = None
    hourly: float = 0.0  # USD an hour of one instance (the budget's count)
    site: tuple[str, str] | None = None  # (location, GPU model): a gang's site


@dataclass
class Room:
    """What the caps and the budget leave in one profile, shared by its workloads."""

    offer_caps: dict[int, int]
    region_caps: dict[tuple[str, str], int]
    budget: float | None
    used: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    region: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    spend: float = 0.0

    def fits(self, o: Option, n: int = 1) -> bool:
        if o.flex is None:
            return True
        cap = self.offer_caps.get(o.flex)
        if cap is not None and self.used[o.flex] + n > cap:
            return False
        rcap = self.region_caps.get(o.region) if o.region else None
        if rcap is not None and self.region[o.region] + n > rcap:  # type: ignore[index]
            return False
        return self.budget is None or self.spend + n * o.hourly <= self.budget + 1e-6

    def most(self, o: Option) -> int | None:
        """How many more instances of o the caps and the budget allow (None: no limit)."""
        if o.flex is None:
            return None
        limits = []
        cap = self.offer_caps.get(o.flex)
        if cap is not None:
            limits.append(cap - self.used[o.flex])
        rcap = self.region_caps.get(o.region) if o.region else None
        if rcap is not None:
            limits.append(rcap - self.region[o.region])  # type: ignore[index]
        if self.budget is not None and o.hourly > 0:
            limits.append(math.floor((self.budget + 1e-6 - self.spend) / o.hourly))
        return min(limits) if limits else None

    def put(self, o: Option, n: int) -> None:
        if o.flex is None:
            return
        self.used[o.flex] += n
        if o.region:
            self.region[o.region] += n
        self.spend += n * o.hourly


def round_lp(
    m: Model,
    request: PlanRequest,
    lp: Mapping[str, float],
    smallest: Mapping[str, int],
    clock: Clock | None = None,
) -> float | None:
    """Round the LP solution ``lp`` (values by variable name) into ``m``'s variables; return the
    objective, or None when no rounding passes every row of the model."""
    options: dict[tuple[str, int], list[Option]] = defaultdict(list)
    wl = {w.name: w for w in request.workloads}
    for (i, wn, p), var in m.x.items():
        o = m.flex[i]
        price = float(effective_price(o, wl[wn], request)) * m.profiles[p].weight
        options[wn, p].append(
            Option(
                var,
                o.gpus_per_instance,
                price,
                o.location,
                o.market is Market.SPOT,
                None,
                i,
                (o.cloud.value, o.region),
                float(o.hourly_usd),
                (o.location, o.gpu),
            )
        )
    for (j, wn, p), var in m.r.items():
        o = m.resv[j]
        options[wn, p].append(Option(var, m.rc[j, wn, p], 0.0, o.location, False, j, site=(o.location, o.gpu)))
    best: tuple[float, dict[Any, int], dict[str, tuple[str, str]]] | None = None
    for sites in _site_choices(m, lp):
        tried: list[dict[int, int]] = []
        for mode in ("floor", "nearest", "ceil"):
            y = {j: _round(lp.get(var.name, 0.0), mode, var) for j, var in m.y.items()}
            if y in tried:
                continue
            tried.append(y)
            filled = _fill(m, request, lp, y, options, smallest, sites)
            if filled is not None and (best is None or filled[0] < best[0]):
                best = (*filled, sites)
        if clock is not None and clock.left() < 1 and best is not None:
            break
    if best is None:
        return None
    values, sites = best[1], best[2]
    for var in m.prob.variables():
        var.varValue = float(values.get(var, 0))
    for wn, by_site in m.gang.items():
        for (place, gpu), (b, c) in by_site.items():
            b.varValue = float(place == sites[wn][0]) if wn in sites else 0.0
            c.varValue = float(gpu == sites[wn][1]) if wn in sites else 0.0
    if _continuous(m) and not _fix_and_solve(m, clock):
        return None
    if not _feasible(m):
        return None
    return float(m.prob.objective.value() or 0.0)


def _site_choices(m: Model, lp: Mapping[str, float]) -> list[dict[str, tuple[str, str]]]:
    """Where each gang goes: the sites its LP solution uses most (GPU-weighted), a few per gang
    (the first gang's alternatives; the others at their best)."""
    if not m.gang:
        return [{}]
    ranked: dict[str, list[tuple[str, str]]] = {}
    for wn, by_site in m.gang.items():
        mass: dict[tuple[str, str], float] = defaultdict(float)
        for (i, w2, _p), var in m.x.items():
            if w2 == wn:
                o = m.flex[i]
                mass[o.location, o.gpu] += lp.get(var.name, 0.0) * o.gpus_per_instance
        for (j, w2, p), var in m.r.items():
            if w2 == wn:
                o = m.resv[j]
                mass[o.location, o.gpu] += lp.get(var.name, 0.0) * m.rc[j, w2, p]
        ranked[wn] = sorted(by_site, key=lambda k: (-mass.get(k, 0.0), k))
    first = next(iter(ranked))
    return [{wn: (site if wn == first else ranked[wn][0]) for wn in ranked} for site in ranked[first][:SITES_TRIED]]


def _round(v: float, mode: str, var: Any) -> int:
    if abs(v - round(v)) < EPS or mode == "nearest":
        n = round(v)
    else:
        n = math.floor(v) if mode == "floor" else math.ceil(v)
    if var.lowBound is not None:
        n = max(n, math.ceil(var.lowBound - EPS))
    if var.upBound is not None:
        n = min(n, math.floor(var.upBound + EPS))
    return n


@dataclass
class _Slot:
    """One workload in one profile while it is filled."""

    opts: list[Option]
    spare: dict[int, int]  # reserved GPUs left, shared by the workloads of the profile
    spot_cap: int
    cap: int | None
    values: dict[Any, int]
    room: Room
    covered: int = 0
    spot: int = 0

    def __post_init__(self) -> None:
        self.load: dict[str, int] = defaultdict(int)
        self.count: dict[str, int] = defaultdict(int)

    def put(self, o: Option, n: int) -> None:
        self.values[o.var] = self.values.get(o.var, 0) + n
        self.covered += n * o.gpus
        self.spot += n * o.gpus if o.spot else 0
        self.load[o.place] += n * o.gpus
        self.count[o.place] += n
        self.room.put(o, n)
        if o.reserved is not None:
            self.spare[o.reserved] -= n * o.gpus

    def fits(self, o: Option, new_place: bool = False) -> bool:
        if o.reserved is not None and self.spare[o.reserved] < o.gpus:
            return False
        if o.spot and self.spot + o.gpus > self.spot_cap:
            return False
        if new_place and self.count[o.place] > 0:
            return False
        if not self.room.fits(o):
            return False
        return self.cap is None or self.load[o.place] + o.gpus <= self.cap

    def cover(self, d: int) -> bool:
        """Cover the shortfall greedily: the option cheapest per GPU still needed, as many at once
        as keep that choice (whole instances within the need) and every limit."""
        while self.covered < d:
            need = d - self.covered
            fit = [o for o in self.opts if self.fits(o)]
            if not fit:
                return False
            o = min(fit, key=lambda o: (o.cost / min(o.gpus, need), o.gpus))
            self.put(o, max(1, self._most(o, need)))
        return True

    def _most(self, o: Option, need: int) -> int:
        n = need // o.gpus
        if o.reserved is not None:
            n = min(n, self.spare[o.reserved] // o.gpus)
        if o.spot:
            n = min(n, (self.spot_cap - self.spot) // o.gpus)
        if self.cap is not None:
            n = min(n, (self.cap - self.load[o.place]) // o.gpus)
        room = self.room.most(o)
        return n if room is None else min(n, room)

    def spread(self, k: int) -> bool:
        while sum(1 for n in self.count.values() if n > 0) < k:
            fit = [o for o in self.opts if self.fits(o, new_place=True)]
            if not fit:
                return False
            self.put(min(fit, key=lambda o: (o.cost, o.gpus)), 1)
        return True


def _rooms(m: Model, request: PlanRequest, y: Mapping[int, int]) -> Room:
    """The room reservations leave under the caps and the budget (the same in every profile)."""
    caps = {i: request.offer_caps[o.key] for i, o in enumerate(m.flex) if o.key in request.offer_caps}
    region: dict[tuple[str, str], int] = defaultdict(int)
    spend = 0.0
    for j, n in y.items():
        o = m.resv[j]
        region[o.cloud.value, o.region] += n
        spend += n * float(o.hourly_usd)
    room = Room(
        caps, dict(request.region_caps), None if request.budget_per_hour is None else float(request.budget_per_hour)
    )
    room.region.update(region)
    room.spend = spend
    return room


def _fill(
    m: Model,
    request: PlanRequest,
    lp: Mapping[str, float],
    y: Mapping[int, int],
    options: Mapping[tuple[str, int], list[Option]],
    smallest: Mapping[str, int],
    sites: Mapping[str, tuple[str, str]],
) -> tuple[float, dict[Any, int]] | None:
    values: dict[Any, int] = {m.y[j]: n for j, n in y.items()}
    cost = sum(n * float(m.resv[j].hourly_usd) * request.slots for j, n in y.items())
    widx = {w.name: k for k, w in enumerate(request.workloads)}
    for p, prof in enumerate(m.profiles):
        spare = {j: m.resv[j].gpus_per_instance * n for j, n in y.items()}
        room = _rooms(m, request, y)
        for w in request.workloads:
            d = prof.demand[widx[w.name]]
            if d <= 0:
                continue
            cap = spread_cap(d, w, smallest.get(w.name, 1)) if w.spread_zones >= 2 else None
            opts = options.get((w.name, p), [])
            if w.name in sites:
                opts = [o for o in opts if o.site == sites[w.name]]
            slot = _Slot(opts, spare, math.floor(w.max_spot_fraction * d), cap, values, room)
            for o in slot.opts:
                n = math.floor(lp.get(o.var.name, 0.0) + EPS)
                if o.reserved is not None:
                    n = min(n, spare[o.reserved] // o.gpus)
                while n > 0 and not room.fits(o, n):
                    n -= 1
                values.setdefault(o.var, 0)
                slot.put(o, n)
            if not slot.cover(d):
                return None
            used = [key for key in m.used if key[:2] == (w.name, p)]
            if used:
                if not slot.spread(w.spread_zones):
                    return None
                for key in used:
                    values[m.used[key]] = 1 if slot.count[key[2]] > 0 else 0
            cost += sum(values[o.var] * o.cost for o in slot.opts)
    return cost, values


def _continuous(m: Model) -> bool:
    return bool(m.v or m.levels or m.migration)


def _fix_and_solve(m: Model, clock: Clock | None) -> bool:
    """With every whole number fixed at its rounded value, the LP of what is left (coverage by
    commitments, Savings Plan levels, launches): its optimum, written into the variables."""
    from gpuprov.optimizer.cbc import pulp_module, solve_lp

    pulp = pulp_module()
    fixed = [(v, v.lowBound, v.upBound) for v in m.prob.variables() if v.cat == pulp.LpInteger]
    for v, _lo, _hi in fixed:
        v.lowBound = v.upBound = round(v.varValue or 0.0)
    try:
        lp = solve_lp(m.prob, None if clock is None else clock.solver_time(0.5))
    finally:
        for v, lo, hi in fixed:
            v.lowBound, v.upBound = lo, hi
    if not lp.optimal:
        return False
    for v in m.prob.variables():
        v.varValue = round(lp.values[v.name]) if v.cat == pulp.LpInteger else lp.values[v.name]
    return True


def _feasible(m: Model) -> bool:
    for var in m.prob.variables():
        v = var.varValue or 0.0
        if var.lowBound is not None and v < var.lowBound - EPS:
            return False
        if var.upBound is not None and v > var.upBound + EPS:
            return False
    return all(row.valid(EPS) for row in m.prob.constraints())
