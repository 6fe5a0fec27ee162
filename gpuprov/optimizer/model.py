"""Build the MILP of ``problem.py`` with PuLP (``solve.py`` runs it).

The model is built from coefficient lists (``LpAffineExpression``), not ``+=`` loops, which is
several times faster to build. Variables are per demand profile (distinct demand vector), not per
slot; the answer is expanded back to every slot.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuprov.models import Market, Offer, Workload, WorkloadSite
from gpuprov.optimizer.cbc import pulp_module
from gpuprov.optimizer.problem import (
    PlanRequest,
    Profile,
    big_m,
    effective_price,
    eligible,
    profiles,
    spread_cap,
    spread_cap_work,
    whole_instances,
    work,
)

Terms = list[tuple[Any, float]]


@dataclass
class Model:
    """The PuLP problem and its variables, indexed by (offer index, workload, profile index)."""

    prob: Any
    flex: list[Offer]
    resv: list[Offer]
    profiles: list[Profile]
    x: dict[tuple[int, str, int], Any] = field(default_factory=dict)
    r: dict[tuple[int, str, int], Any] = field(default_factory=dict)
    rc: dict[tuple[int, str, int], int] = field(default_factory=dict)  # GPUs per unit of r: g_o or 1
    y: dict[int, Any] = field(default_factory=dict)
    gang: dict[str, dict[tuple[str, str], tuple[Any, Any]]] = field(default_factory=dict)
    migration: list[tuple[Any, Offer, Decimal]] = field(default_factory=list)
    # coverage by commitments: v[(h, i, p)] with h indexing held + options (held first)
    v: dict[tuple[int, int, int], Any] = field(default_factory=dict)
    levels: list[Any] = field(default_factory=list)  # L_s of each Savings Plan option
    # ("cover"|"spot", workload, profile) and ("commit", commitment index, profile): the rows whose
    # duals price the decomposition's multipliers
    rows: dict[tuple[str, str, int], Any] = field(default_factory=dict)
    used: dict[tuple[str, int, str], Any] = field(default_factory=dict)  # u[w,k,t] by (workload, profile, place)

    normalize: bool = True  # divide all-integer rows by their coefficients' gcd (see add)

    def add(self, terms: Sequence[tuple[Any, float]], sense: int, rhs: float, name: str) -> Any:
        """Add a row. A ≤ or ≥ row over integer variables with integral coefficients is divided by
        the coefficients' gcd and its right-hand side rounded inward (the same whole solutions):
        CBC 2.10's preprocessing returned a wrong "optimal" plan on rows it would tighten this way
        itself (e.g. 2x + 2y ≥ 7 covering 7 GPUs with 2-GPU nodes; tests/test_optimizer_exact.py)."""
        import pulp

        if self.normalize and sense != pulp.LpConstraintEQ:
            terms, rhs = _tightened(terms, sense, rhs)
        row = pulp.LpConstraint(pulp.LpAffineExpression(terms), sense, name, rhs)
        self.prob.addConstraint(row)
        return row


def _tightened(terms: Sequence[tuple[Any, float]], sense: int, rhs: float) -> tuple[Sequence[tuple[Any, float]], float]:
    import pulp

    g = 0
    for var, c in terms:
        if var.cat != pulp.LpInteger or not float(c).is_integer():
            return terms, rhs
        g = math.gcd(g, int(c))
    if g <= 1:
        return terms, rhs
    bound = rhs / g
    return [(var, int(c) // g) for var, c in terms], (
        math.floor(bound + 1e-9) if sense == pulp.LpConstraintLE else math.ceil(bound - 1e-9)
    )


Allow = Callable[[Offer, Workload], bool]


def build(
    request: PlanRequest,
    offers: list[Offer],
    allow: Allow | None = None,
    smallest: Mapping[str, int] | None = None,
    spread_counts: bool = True,
    normalize: bool = True,
) -> Model:
    """The model of problem.py on these offers. ``allow`` narrows which offers a workload may use
    (the decomposition fixes a gang's site and the locations in play); ``smallest`` fixes the
    instance size the spread caps round to (that of the whole offer set, so that a narrowed model
    keeps the caps of the whole one); ``spread_counts`` False leaves out the rows that count the
    locations a spread workload uses (its LP relaxation is then a relaxation of the model's)."""
    pulp = pulp_module()

    def usable(o: Offer, w: Workload) -> bool:
        return eligible(o, w) and (allow is None or allow(o, w))

    W = request.workloads
    widx = {w.name: i for i, w in enumerate(W)}
    P = profiles(request)
    m = Model(
        pulp.LpProblem("gpuprov", pulp.LpMinimize),
        [o for o in offers if not o.market.is_reserved],
        [o for o in offers if o.market.is_reserved],
        P,
        normalize=normalize,
    )
    le, ge = pulp.LpConstraintLE, pulp.LpConstraintGE
    integer = pulp.LpInteger

    for i, o in enumerate(m.flex):
        for w in W:
            if usable(o, w):
                ub = big_m(request.demand[w.name], work(o, w))
                for p, prof in enumerate(P):
                    if prof.demand[widx[w.name]] > 0:
                        m.x[i, w.name, p] = m.prob.add_variable(f"x_{i}_{w.name}_{p}", 0, ub, integer)
    for j, o in enumerate(m.resv):
        ub = sum(big_m(request.demand[w.name], work(o, w)) for w in W if usable(o, w))
        m.y[j] = m.prob.add_variable(f"y_{j}", 0, ub, integer)
        for w in W:
            if usable(o, w):
                whole = whole_instances(w)
                for p, prof in enumerate(P):
                    if prof.demand[widx[w.name]] > 0:
                        m.r[j, w.name, p] = m.prob.add_variable(
                            f"r_{j}_{w.name}_{p}",
                            0,
                            big_m(request.demand[w.name], work(o, w)) if whole else max(request.demand[w.name]),
                            integer,
                        )
                        m.rc[j, w.name, p] = o.gpus_per_instance if whole else 1

    by_resv: dict[tuple[int, int], Terms] = defaultdict(list)
    for (j, wn, p), var in m.r.items():
        by_resv[j, p].append((var, m.rc[j, wn, p]))
    for (j, p), terms in by_resv.items():
        m.add([*terms, (m.y[j], -m.resv[j].gpus_per_instance)], le, 0, f"resv_{j}_{p}")

    cover: dict[tuple[str, int], Terms] = defaultdict(list)
    spot: dict[tuple[str, int], Terms] = defaultdict(list)
    at_place: dict[tuple[str, int, str], Terms] = defaultdict(list)
    count_at_place: dict[tuple[str, int, str], Terms] = defaultdict(list)
    wl = {w.name: w for w in W}
    for (i, wn, p), var in m.x.items():
        o = m.flex[i]
        a = _coef(work(o, wl[wn]))  # a_{o,w}: the instance's GPUs, or its work (problem.py)
        cover[wn, p].append((var, a))
        at_place[wn, p, o.location].append((var, a))
        count_at_place[wn, p, o.location].append((var, 1))
        if o.market is Market.SPOT:
            spot[wn, p].append((var, a))
    for (j, wn, p), var in m.r.items():
        o = m.resv[j]
        a = _coef(m.rc[j, wn, p] * work(o, wl[wn]) / o.gpus_per_instance)  # c_{o,w}·a_{o,w}/g_o
        cover[wn, p].append((var, a))
        at_place[wn, p, o.location].append((var, a))
        count_at_place[wn, p, o.location].append((var, 1))
    for w in W:
        for p, prof in enumerate(P):
            d = prof.demand[widx[w.name]]
            if d <= 0:
                continue
            m.rows["cover", w.name, p] = m.add(cover[w.name, p], ge, d, f"cover_{w.name}_{p}")
            if spot[w.name, p]:
                # GPUs are whole: ⌊s·D⌋ is the same constraint, and an integral right-hand side
                # keeps CBC 2.10's preprocessing from a wrong fixing it makes on fractional ones
                m.rows["spot", w.name, p] = m.add(
                    spot[w.name, p], le, math.floor(w.max_spot_fraction * d), f"spot_{w.name}_{p}"
                )
            if w.spread_zones >= 2:
                if w.replicas:
                    cap: int | float = _coef(spread_cap_work(d, w, least_work(offers, w)))
                else:
                    cap = spread_cap(d, w, (smallest or {}).get(w.name) or smallest_instance(offers, w))
                _spread(m, w.name, p, d, cap, w.spread_zones, at_place, count_at_place, spread_counts)

    for w in W:
        if w.gang:
            _gang(m, request, w.name)
    _caps(m, request)
    _budget(m, request)

    objective: Terms = []
    for (i, wn, p), var in m.x.items():
        objective.append((var, float(effective_price(m.flex[i], wl[wn], request)) * P[p].weight))
    objective += [(m.y[j], float(o.hourly_usd) * request.slots) for j, o in enumerate(m.resv)]
    objective += _migration(m, request)
    objective += _commitments(m, request)
    if request.reserved_fixed is not None:
        for j, o in enumerate(m.resv):
            held = request.reserved_fixed.get(o.site, 0)
            m.y[j].lowBound, m.y[j].upBound = held, held
    m.prob.setObjective(pulp.LpAffineExpression(objective))
    return m


def smallest_instance(offers: Sequence[Offer], w: Workload) -> int:
    """The smallest instance w may use: a spread cap's unit when w has no node size."""
    return min((o.gpus_per_instance for o in offers if eligible(o, w)), default=1)


def least_work(offers: Sequence[Offer], w: Workload) -> Decimal:
    """The least work one instance w may use does: a spread cap's unit for demand in work units."""
    return min((work(o, w) for o in offers if eligible(o, w)), default=Decimal(1))


def _coef(value: Decimal) -> int | float:
    """A row coefficient: whole numbers stay integers (the gcd tightening of ``Model.add`` needs them)."""
    return int(value) if value == value.to_integral_value() else float(value)


def _commitments(m: Model, request: PlanRequest) -> Terms:
    """Usage billed against held commitments and Savings Plans to buy (problem.py, "Commitments")."""
    import pulp

    held = list(request.held)
    if not held and not request.savings_plan_options:
        return []
    options = [opt.held(request.slots, Decimal(0)) for opt in request.savings_plan_options]
    flex = _flex_by_offer(m)
    terms: Terms = []
    m.levels = [
        m.prob.add_variable(f"L_{n}", 0, None, pulp.LpContinuous) for n in range(len(request.savings_plan_options))
    ]
    for level in m.levels:
        terms.append((level, float(request.slots)))
    link: dict[tuple[int, int], Terms] = defaultdict(list)
    for h, c in enumerate([*held, *options]):
        covered = [i for i, o in enumerate(m.flex) if c.covers(o)]
        for p, prof in enumerate(m.profiles):
            active = h >= len(held) or c.active[prof.slots[0]]
            if not active:
                continue
            cap: Terms = []
            for i in covered:
                if not flex[i, p]:
                    continue
                var = m.prob.add_variable(f"v_{h}_{i}_{p}", 0, None, pulp.LpContinuous)
                m.v[h, i, p] = var
                link[i, p].append((var, 1.0))
                cap.append((var, float(c.rate(m.flex[i]))))
                terms.append((var, -float(m.flex[i].hourly_usd) * prof.weight))
            if not cap:
                continue
            if h < len(held):
                rhs = c.count if c.count is not None else c.usd_per_hour
                m.rows["commit", str(h), p] = m.add(cap, pulp.LpConstraintLE, float(rhs or 0), f"held_{h}_{p}")
            else:
                level = m.levels[h - len(held)]
                m.rows["commit", str(h), p] = m.add([*cap, (level, -1)], pulp.LpConstraintLE, 0, f"sp_{h}_{p}")
    for (i, p), cov in link.items():
        m.add([*cov, *((var, -1.0) for var, _c in flex[i, p])], pulp.LpConstraintLE, 0, f"link_{i}_{p}")
    return terms


def _migration(m: Model, request: PlanRequest) -> Terms:
    """n[o,w] ≥ x[o,w,t0] − c[o,w]: launches beyond what runs now pay m_w hours of their price."""
    import pulp

    if request.current_slot is None:
        return []
    p0 = next(p for p, prof in enumerate(m.profiles) if request.current_slot in prof.slots)
    terms: Terms = []
    for (i, wn, p), var in m.x.items():
        if p != p0:
            continue
        o = m.flex[i]
        hours = float(request.migration_hours.get(wn, Decimal(0)))
        if hours <= 0:
            continue
        have = request.incumbent.get(WorkloadSite(o.cloud.value, o.location, o.instance_type, o.market.value, wn), 0)
        n = m.prob.add_variable(f"n_{i}_{wn}", 0, None)
        m.add([(n, 1), (var, -1)], pulp.LpConstraintGE, -have, f"mig_{i}_{wn}")
        terms.append((n, float(o.hourly_usd) * hours))
        m.migration.append((n, o, request.migration_hours[wn]))
    return terms


def _spread(
    m: Model,
    wn: str,
    p: int,
    demand: int,
    cap: int | float,
    k: int,
    at_place: dict[tuple[str, int, str], Terms],
    count_at_place: dict[tuple[str, int, str], Terms],
    counts: bool = True,
) -> None:
    import pulp

    places = sorted(pl for (w2, p2, pl) in at_place if (w2, p2) == (wn, p))
    for n, place in enumerate(places):
        m.add(at_place[wn, p, place], pulp.LpConstraintLE, cap, f"spread_{wn}_{p}_{n}")
    if not counts or cap * (k - 1) < demand:
        return  # the caps alone force k locations
    used = []
    for n, place in enumerate(places):
        u = m.prob.add_variable(f"u_{wn}_{p}_{n}", 0, 1, pulp.LpInteger)
        m.used[wn, p, place] = u
        used.append((u, 1))
        m.add([*count_at_place[wn, p, place], (u, -1)], pulp.LpConstraintGE, 0, f"used_{wn}_{p}_{n}")
    m.add(used, pulp.LpConstraintGE, k, f"spreadk_{wn}_{p}")


def _gang(m: Model, request: PlanRequest, wn: str) -> None:
    """One location b[w,k] and, where the offers carry several GPU models, one model c[w,g]: the
    same plans as one binary per (location, model) site, with locations + models binaries
    instead of their product (CBC proves the optimum far sooner)."""
    import pulp

    used = [m.flex[i] for (i, w2, _p) in m.x if w2 == wn] + [m.resv[j] for (j, w2, _p) in m.r if w2 == wn]
    places = sorted({o.location for o in used})
    if not places:
        return  # no demand, nothing to place
    b = {k: m.prob.add_variable(f"b_{wn}_{n}", 0, 1, pulp.LpInteger) for n, k in enumerate(places)}
    m.add([(v, 1) for v in b.values()], pulp.LpConstraintEQ, 1, f"gang_{wn}")
    models = sorted({o.gpu for o in used})
    c = {g: m.prob.add_variable(f"c_{wn}_{n}", 0, 1, pulp.LpInteger) for n, g in enumerate(models)}
    if len(models) > 1:
        m.add([(v, 1) for v in c.values()], pulp.LpConstraintEQ, 1, f"gangmodel_{wn}")
    else:
        c[models[0]].lowBound = 1  # the one model there is
    m.gang[wn] = {(k, g): (b[k], c[g]) for k in places for g in models}
    demand = request.demand[wn]
    w = next(w for w in request.workloads if w.name == wn)
    for kind, items, offers in (("x", m.x, m.flex), ("r", m.r, m.resv)):
        for (i, w2, p), var in items.items():
            if w2 != wn:
                continue
            o = offers[i]
            bound = big_m(demand, work(o, w))
            m.add([(var, 1), (b[o.location], -bound)], pulp.LpConstraintLE, 0, f"g{kind}_{i}_{wn}_{p}")
            if len(models) > 1:
                m.add([(var, 1), (c[o.gpu], -bound)], pulp.LpConstraintLE, 0, f"g{kind}m_{i}_{wn}_{p}")


def _flex_by_offer(m: Model) -> dict[tuple[int, int], Terms]:
    out: dict[tuple[int, int], Terms] = defaultdict(list)
    for (i, _w, p), var in m.x.items():
        out[i, p].append((var, 1))
    return out


def _caps(m: Model, request: PlanRequest) -> None:
    import pulp

    if not (request.offer_caps or request.region_caps):
        return
    flex = _flex_by_offer(m)
    for i, o in enumerate(m.flex):
        cap = request.offer_caps.get(o.key)
        if cap is not None:
            for p in range(len(m.profiles)):
                if flex[i, p]:
                    m.add(flex[i, p], pulp.LpConstraintLE, cap, f"cap_{i}_{p}")
    for j, o in enumerate(m.resv):
        cap = request.offer_caps.get(o.key)
        if cap is not None:
            m.y[j].upBound = min(cap, m.y[j].upBound)
    for n, ((cloud, region), cap) in enumerate(sorted(request.region_caps.items())):
        resv = [(m.y[j], 1.0) for j, o in enumerate(m.resv) if (o.cloud.value, o.region) == (cloud, region)]
        for p in range(len(m.profiles)):
            terms = [
                t for i, o in enumerate(m.flex) if (o.cloud.value, o.region) == (cloud, region) for t in flex[i, p]
            ]
            if terms or resv:
                m.add(terms + resv, pulp.LpConstraintLE, cap, f"rcap_{n}_{p}")


def _budget(m: Model, request: PlanRequest) -> None:
    import pulp

    if request.budget_per_hour is None:
        return
    resv = [(m.y[j], float(o.hourly_usd)) for j, o in enumerate(m.resv)]
    for p in range(len(m.profiles)):
        terms = [(var, float(m.flex[i].hourly_usd)) for (i, _w, p2), var in m.x.items() if p2 == p]
        m.add(terms + resv, pulp.LpConstraintLE, float(request.budget_per_hour), f"budget_{p}")
