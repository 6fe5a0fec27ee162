"""Build the MILP of ``problem.py`` with PuLP, solve it with CBC (or HiGHS), read back a Plan.

Pure: no printing, no database, no clock. The model is built from coefficient lists
(``LpAffineExpression``), not ``+=`` loops, which is several times faster to build.
Variables are per demand profile (distinct demand vector), not per slot; the answer is
expanded back to every slot.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_UP, Decimal
from typing import Any

from gpuprov.errors import InfeasibleError, SolverError
from gpuprov.models import Allocation, Market, Offer, Plan, Reservation, SolveStatus, Workload, WorkloadSite
from gpuprov.optimizer import explain
from gpuprov.optimizer.problem import (
    PlanRequest,
    Profile,
    big_m,
    effective_price,
    eligible,
    overhead,
    profiles,
    spread_cap,
    spread_cap_work,
    whole_instances,
    work,
)
from gpuprov.optimizer.reduce import prepare

MICRO = Decimal("0.000001")
MILLI = Decimal("0.001")
CENT = Decimal("0.01")
Terms = list[tuple[Any, float]]


def _check(request: PlanRequest) -> None:
    if request.slots < 1:
        raise InfeasibleError("the plan has no slots")
    for w in request.workloads:
        if any(d < 0 for d in request.demand[w.name]):
            raise InfeasibleError(f"negative demand for {w.name}")
        if w.spread_zones < 1:
            raise InfeasibleError(f"{w.name}: spread over at least 1 zone")


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
    rows: dict[tuple[str, str, int], Any] = field(default_factory=dict)  # ("cover"|"spot", workload, profile)
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


def _pulp() -> Any:
    """PuLP, without letting it import highspy (and numpy) in this process: that costs ~0.2 s
    of every plan's start-up, and gpuprov runs HiGHS in a child process anyway (highs.py)."""
    import sys

    if "pulp" not in sys.modules:
        sys.modules.setdefault("highspy", None)  # type: ignore[arg-type]
        try:
            import pulp
        finally:
            if sys.modules.get("highspy", 0) is None:
                del sys.modules["highspy"]
    import pulp

    return pulp


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
    pulp = _pulp()

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
                m.add(cap, pulp.LpConstraintLE, float(rhs or 0), f"held_{h}_{p}")
            else:
                level = m.levels[h - len(held)]
                m.add([*cap, (level, -1)], pulp.LpConstraintLE, 0, f"sp_{h}_{p}")
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


def solve(request: PlanRequest) -> Plan:
    _check(request)
    prepared = prepare(request)
    offers = prepared.offers
    explain.raise_if_obviously_infeasible(request, offers)
    from gpuprov.optimizer import decompose

    started = time.monotonic()
    large = decompose.large(request, offers)
    # a small whole model gets the time a restricted MILP would take: the parts only round
    parts = decompose.solve(request, prepared, milp=large) if decompose.applicable(request) else None
    if parts is not None and (parts.status == SolveStatus.OPTIMAL or large):
        model, status, bound, notes = parts.model, parts.status, parts.bound, (*prepared.notes, parts.note)
    else:
        # the whole model at once; when the parts found a plan but not within the gap, the better
        # plan and the better bound of the two (both bound the same model)
        left = max(1.0, request.time_limit_s - (time.monotonic() - started))
        model = build(request, offers)
        if parts is not None:
            _seed(model, parts.model)
        status, bound = _run(model.prob, replace(request, time_limit_s=left), warm=parts is not None)
        notes = prepared.notes
        if parts is not None:
            whole = float(model.prob.objective.value() or 0.0) if status in _SOLVED else math.inf
            mine = float(parts.model.prob.objective.value() or 0.0)
            bound = max(bound, parts.bound) if status in _SOLVED else parts.bound
            if mine < whole - 1e-6:
                model, notes = parts.model, (*notes, parts.note)
            best = min(mine, whole)
            status = SolveStatus.OPTIMAL if best - bound <= request.gap * best + 1e-6 else SolveStatus.FEASIBLE
    if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        raise explain.infeasible(request, offers, status)
    plan = _read(model, request, prepared.dropped + prepared.pruned, len(offers), status, bound, notes)
    return _with(plan, binding=explain.binding(request, plan, model.gang))


_SOLVED = (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


def _seed(whole: Model, part: Model) -> None:
    """Start the whole model from the parts' plan (CBC's MIP start): the same instances by offer,
    workload and profile, the gang's one site, the locations each spread workload uses. CBC
    checks a start and drops one it finds infeasible."""
    x = {(part.flex[i].key, wn, p): var.varValue or 0.0 for (i, wn, p), var in part.x.items()}
    r = {(part.resv[j].key, wn, p): var.varValue or 0.0 for (j, wn, p), var in part.r.items()}
    y = {part.resv[j].key: var.varValue or 0.0 for j, var in part.y.items()}
    for v in whole.prob.variables():
        v.varValue = 0.0
    load: dict[tuple[str, int, str], float] = defaultdict(float)
    sites: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for (i, wn, p), var in whole.x.items():
        o = whole.flex[i]
        var.varValue = round(x.get((o.key, wn, p), 0.0))
        load[wn, p, o.location] += var.varValue
        if var.varValue:
            sites[wn].add((o.location, o.gpu))
    for (j, wn, p), var in whole.r.items():
        o = whole.resv[j]
        var.varValue = round(r.get((o.key, wn, p), 0.0))
        load[wn, p, o.location] += var.varValue
        if var.varValue:
            sites[wn].add((o.location, o.gpu))
    for j, var in whole.y.items():
        var.varValue = round(y.get(whole.resv[j].key, 0.0))
    for wn, by_site in whole.gang.items():
        places, models = {k[0] for k in sites[wn]}, {k[1] for k in sites[wn]}
        for (place, gpu), (b, c) in by_site.items():
            b.varValue, c.varValue = float(place in places), float(gpu in models)
    for key, u in whole.used.items():
        u.varValue = 1.0 if load[key] > 0 else 0.0


def _read(
    m: Model, request: PlanRequest, dropped: int, considered: int, status: str, bound: float, notes: tuple[str, ...]
) -> Plan:
    W, T = request.workloads, range(request.slots)
    slot_profile = {t: p for p, prof in enumerate(m.profiles) for t in prof.slots}

    def val(v: Any) -> int:
        return round(v.value() or 0)

    allocations = []
    for i, o in enumerate(m.flex):
        for w in W:
            counts = tuple(val(m.x[k]) if (k := (i, w.name, slot_profile[t])) in m.x else 0 for t in T)
            if any(counts):
                allocations.append(Allocation(offer=o, workload=w.name, instances_by_slot=counts))
    reservations = []
    for j, o in enumerate(m.resv):
        n = val(m.y[j])
        if n:
            used = {
                w.name: tuple(val(m.r[k]) * m.rc[k] if (k := (j, w.name, slot_profile[t])) in m.r else 0 for t in T)
                for w in W
            }
            reservations.append(
                Reservation(offer=o, instances=n, gpus_used_by_slot={k: v for k, v in used.items() if any(v)})
            )
    held = sum((rv.offer.hourly_usd * rv.instances for rv in reservations), Decimal(0))
    coverage, covered, levels, value = _coverage(m, request, slot_profile)
    held_cost = tuple(
        sum((c.hourly_usd for c in request.held if c.active[t]), Decimal(0)) + sum(levels.values(), Decimal(0))
        for t in T
    )
    slot_cost = tuple(
        (
            sum((a.offer.hourly_usd * a.instances_by_slot[t] for a in allocations), Decimal(0))
            + held
            + held_cost[t]
            - covered[t]
        )
        for t in T
    )
    wl = {w.name: w for w in W}
    interruptions = sum(
        (
            a.offer.hourly_usd * overhead(a.offer, wl[a.workload], request) * sum(a.instances_by_slot)
            for a in allocations
        ),
        Decimal(0),
    )
    migration = sum(
        (Decimal(repr(var.value() or 0.0)).quantize(MILLI) * o.hourly_usd * hours for var, o, hours in m.migration),
        Decimal(0),
    )
    objective = sum(slot_cost, Decimal(0)) + interruptions + migration
    constant = sum((c.hourly_usd for c in request.held for t in T if c.active[t]), Decimal(0))
    lower = min(Decimal(repr(bound)).quantize(MICRO) + constant, objective)
    return Plan(
        gpu=request.gpu,
        demand={w.name: tuple(request.demand[w.name]) for w in W},
        allocations=tuple(allocations),
        reservations=tuple(reservations),
        slot_cost_usd=slot_cost,
        lower_bound_usd=lower,
        status=status,
        solver=request.solver,
        offers_considered=considered,
        offers_dropped=dropped,
        objective_usd=objective,
        notes=notes,
        expected_interruption_usd=interruptions,
        held_used=coverage,
        held_covered_usd=value,
        held_cost_usd=constant,
        savings_plans=tuple((opt, levels[opt.name]) for opt in request.savings_plan_options if levels[opt.name] > 0),
    )


def _coverage(
    m: Model, request: PlanRequest, slot_profile: dict[int, int]
) -> tuple[dict[str, tuple[Decimal, ...]], tuple[Decimal, ...], dict[str, Decimal], dict[str, Decimal]]:
    """Per commitment, what it covers in each slot (instances, or USD of a Savings Plan); the
    on-demand USD covered in each slot (not billed at the on-demand rate); the Savings Plan
    levels bought (USD an hour, to the cent, rounded up so that what they cover stays paid)."""
    T = range(request.slots)
    levels = {
        opt.name: (Decimal(repr(max(0.0, m.levels[n].value() or 0.0))).quantize(CENT, rounding=ROUND_UP))
        for n, opt in enumerate(request.savings_plan_options)
    }
    commits = [*request.held, *(opt.held(request.slots, levels[opt.name]) for opt in request.savings_plan_options)]
    per: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    cov: dict[int, Decimal] = defaultdict(Decimal)
    by_commit: dict[int, Decimal] = defaultdict(Decimal)
    for (h, i, p), var in m.v.items():
        amount = Decimal(repr(max(0.0, var.value() or 0.0))).quantize(MILLI)
        if not amount:
            continue
        o = m.flex[i]
        per[h, p] += amount * commits[h].rate(o)
        cov[p] += amount * o.hourly_usd
        by_commit[h] += amount * o.hourly_usd * m.profiles[p].weight
    used = {}
    value: dict[str, Decimal] = {}
    for h, c in enumerate(commits):
        value[c.id] = by_commit[h].quantize(MICRO)
        counts = tuple((per[h, slot_profile[t]]).quantize(MILLI) for t in T)
        if c.count is not None:
            counts = tuple(Decimal(round(n)) for n in counts)
        used[c.id] = counts
    covered = tuple(cov[slot_profile[t]].quantize(MICRO) for t in T)
    return used, covered, levels, value


def _with(plan: Plan, **changes: Any) -> Plan:
    return replace(plan, **changes)


def _run(prob: Any, request: PlanRequest, warm: bool = False) -> tuple[str, float]:
    """Solve; return "Optimal", "Feasible" or the solver's status, and a proven lower bound.
    ``warm``: start CBC from the variables' current values (a known whole solution)."""
    import pulp

    if request.solver == "highs":
        from gpuprov.optimizer.highs import solve_highs

        return solve_highs(prob, request)
    if request.solver != "cbc":
        raise SolverError(f"unknown solver {request.solver!r}", hint="use cbc or highs")
    with tempfile.TemporaryDirectory(prefix="gpuprov-cbc-") as tmp:
        log = os.path.join(tmp, "cbc.log")
        solver = pulp.PULP_CBC_CMD(
            msg=False,
            gapRel=request.gap,
            timeLimit=request.time_limit_s,
            threads=1,
            logPath=log,
            keepFiles=False,
            warmStart=warm,
        )
        try:
            prob.solve(solver)
        except pulp.PulpSolverError as exc:
            raise SolverError(f"CBC failed: {exc}") from exc
        status = pulp.LpStatus[prob.status]
        if prob.sol_status == pulp.LpSolutionOptimal:
            status = SolveStatus.OPTIMAL
        elif prob.sol_status == pulp.LpSolutionIntegerFeasible:
            status = SolveStatus.FEASIBLE
        with open(log, encoding="utf-8", errors="replace") as fh:
            bound = cbc_bound(fh.read(), request.gap)
    if bound is None:
        bound = _relaxation_bound(prob)
    return status, bound


def cbc_bound(log: str, gap: float = 0.0) -> float | None:
    """The best lower bound CBC's log proves on the objective (minimisation).

    Every one of these is a valid bound, so the largest is taken: the root LP relaxation
    ('Continuous objective value is'), the root after cuts ('Cuts at root node changed
    objective from A to B'), the last node line's 'best possible', 'Lower bound:' of a
    search stopped early, and, when CBC reports 'Optimal solution found', the objective less
    the relative gap CBC was allowed to stop at (it may prune nodes within that gap).
    """
    number = r"([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
    found: list[float] = []
    for pattern in (
        rf"Continuous objective value is {number}",
        rf"Cuts at root node changed objective from \S+ to {number}",
        rf"best possible {number}",
        rf"Lower bound:\s+{number}",
    ):
        hits = re.findall(pattern, log)
        if hits:
            found.append(float(hits[-1]))
    objective = re.findall(rf"Objective value:\s+{number}", log)
    if objective and "Optimal solution found" in log:
        value = float(objective[-1])
        found.append(value - gap * abs(value))
        found = [min(b, value) for b in found]
    found = [b for b in found if abs(b) < 1e300]
    return max(found) if found else None


def _relaxation_bound(prob: Any) -> float:
    import pulp

    relaxed = prob.deepcopy()
    for v in relaxed.variables():
        v.cat = pulp.LpContinuous
    relaxed.solve(pulp.PULP_CBC_CMD(msg=False))
    return float(pulp.value(relaxed.objective) or 0.0)
