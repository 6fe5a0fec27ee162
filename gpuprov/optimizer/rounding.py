"""Whole instances from an LP solution of the model (``decompose.py``'s restricted models).

Reservations are rounded (down, to the nearest and up: the cheapest of the three is kept), then
each profile is filled on its own: reserved use and instances rounded down, the shortfall covered
greedily by the option cheapest per GPU still needed that keeps the spot ceiling and the spread
caps, and a spread workload's location count made up where its caps alone do not force it. The
result is written into the model's variables and checked against every row and bound of the
model; a solution that fails a row is never used (None).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuprov.models import Market
from gpuprov.optimizer.problem import PlanRequest, effective_price, spread_cap

if TYPE_CHECKING:
    from gpuprov.optimizer.solve import Model

EPS = 1e-6


@dataclass(frozen=True)
class Option:
    var: Any
    gpus: int
    cost: float  # USD for the profile (weight included); 0 for reserved use
    place: str
    spot: bool
    reserved: int | None  # index of the reservation it uses


def round_lp(m: Model, request: PlanRequest, lp: Mapping[str, float], smallest: Mapping[str, int]) -> float | None:
    """Round the LP solution ``lp`` (values by variable name) into ``m``'s variables; return the
    objective, or None when no rounding passes every row of the model."""
    options: dict[tuple[str, int], list[Option]] = defaultdict(list)
    wl = {w.name: w for w in request.workloads}
    for (i, wn, p), var in m.x.items():
        o = m.flex[i]
        price = float(effective_price(o, wl[wn], request)) * m.profiles[p].weight
        options[wn, p].append(Option(var, o.gpus_per_instance, price, o.location, o.market is Market.SPOT, None))
    for (j, wn, p), var in m.r.items():
        options[wn, p].append(Option(var, m.rc[j, wn, p], 0.0, m.resv[j].location, False, j))
    best: tuple[float, dict[Any, int]] | None = None
    for mode in ("floor", "nearest", "ceil"):
        y = {j: _round(lp.get(var.name, 0.0), mode) for j, var in m.y.items()}
        filled = _fill(m, request, lp, y, options, smallest)
        if filled is not None and (best is None or filled[0] < best[0]):
            best = filled
    if best is None:
        return None
    values = best[1]
    for var in m.prob.variables():
        var.varValue = float(values.get(var, 0))
    for sites in m.gang.values():
        for b, c in sites.values():
            b.varValue = c.varValue = 1.0  # a restricted model has the gang's one site
    if not _feasible(m):
        return None
    return float(m.prob.objective.value() or 0.0)


def _round(v: float, mode: str) -> int:
    if abs(v - round(v)) < EPS or mode == "nearest":
        return round(v)
    return math.floor(v) if mode == "floor" else math.ceil(v)


@dataclass
class _Slot:
    """One workload in one profile while it is filled."""

    opts: list[Option]
    spare: dict[int, int]  # reserved GPUs left, shared by the workloads of the profile
    spot_cap: int
    cap: int | None
    values: dict[Any, int]
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
        if o.reserved is not None:
            self.spare[o.reserved] -= n * o.gpus

    def fits(self, o: Option, new_place: bool = False) -> bool:
        if o.reserved is not None and self.spare[o.reserved] < o.gpus:
            return False
        if o.spot and self.spot + o.gpus > self.spot_cap:
            return False
        if new_place and self.count[o.place] > 0:
            return False
        return self.cap is None or self.load[o.place] + o.gpus <= self.cap

    def cover(self, d: int) -> bool:
        while self.covered < d:
            need = d - self.covered
            fit = [o for o in self.opts if self.fits(o)]
            if not fit:
                return False
            self.put(min(fit, key=lambda o: (o.cost / min(o.gpus, need), o.gpus)), 1)
        return True

    def spread(self, k: int) -> bool:
        while sum(1 for n in self.count.values() if n > 0) < k:
            fit = [o for o in self.opts if self.fits(o, new_place=True)]
            if not fit:
                return False
            self.put(min(fit, key=lambda o: (o.cost, o.gpus)), 1)
        return True


def _fill(
    m: Model,
    request: PlanRequest,
    lp: Mapping[str, float],
    y: Mapping[int, int],
    options: Mapping[tuple[str, int], list[Option]],
    smallest: Mapping[str, int],
) -> tuple[float, dict[Any, int]] | None:
    values: dict[Any, int] = {m.y[j]: n for j, n in y.items()}
    cost = sum(n * float(m.resv[j].hourly_usd) * request.slots for j, n in y.items())
    widx = {w.name: k for k, w in enumerate(request.workloads)}
    for p, prof in enumerate(m.profiles):
        spare = {j: m.resv[j].gpus_per_instance * n for j, n in y.items()}
        for w in request.workloads:
            d = prof.demand[widx[w.name]]
            if d <= 0:
                continue
            cap = spread_cap(d, w, smallest.get(w.name, 1)) if w.spread_zones >= 2 else None
            slot = _Slot(options.get((w.name, p), []), spare, math.floor(w.max_spot_fraction * d), cap, values)
            for o in slot.opts:
                n = math.floor(lp.get(o.var.name, 0.0) + EPS)
                if o.reserved is not None:
                    n = min(n, spare[o.reserved] // o.gpus)
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


def _feasible(m: Model) -> bool:
    for var in m.prob.variables():
        v = var.varValue or 0.0
        if var.lowBound is not None and v < var.lowBound - EPS:
            return False
        if var.upBound is not None and v > var.upBound + EPS:
            return False
    return all(row.valid(EPS) for row in m.prob.constraints())
