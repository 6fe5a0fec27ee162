"""Build the MILP of ``problem.py`` with PuLP, solve it with CBC (or HiGHS), read back a Plan.

Pure: no printing, no database, no clock. The model is built from coefficient lists
(``LpAffineExpression``), not ``+=`` loops, which is several times faster to build.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from gpuprov.errors import InfeasibleError, SolverError
from gpuprov.models import Allocation, Market, Plan, Reservation
from gpuprov.optimizer import explain
from gpuprov.optimizer.problem import PlanRequest, big_m, effective_price, eligible, prepare

CENT = Decimal("0.000001")


def _check(request: PlanRequest) -> None:
    slots = request.slots
    if slots < 1:
        raise InfeasibleError("the plan has no slots")
    for w in request.workloads:
        if any(d < 0 for d in request.demand[w.name]):
            raise InfeasibleError(f"negative demand for {w.name}")


def solve(request: PlanRequest) -> Plan:
    import pulp

    _check(request)
    offers, dropped = prepare(request)
    T = range(request.slots)
    W = request.workloads
    explain.raise_if_obviously_infeasible(request, offers)

    flex = [o for o in offers if not o.market.is_reserved]
    resv = [o for o in offers if o.market.is_reserved]
    prob = pulp.LpProblem("gpuprov", pulp.LpMinimize)
    x: dict[tuple[int, str, int], Any] = {}
    r: dict[tuple[int, str, int], Any] = {}
    y: dict[int, Any] = {}
    cat_int = pulp.LpInteger

    for i, o in enumerate(flex):
        for w in W:
            if not eligible(o, w):
                continue
            ub = big_m(request.demand[w.name], o.gpus_per_instance)
            for t in T:
                if request.demand[w.name][t] > 0:
                    x[i, w.name, t] = prob.add_variable(f"x_{i}_{w.name}_{t}", 0, ub, cat_int)
    for j, o in enumerate(resv):
        peak = max(big_m(request.demand[w.name], o.gpus_per_instance)
                   for w in W if eligible(o, w))
        total_peak = sum(big_m(request.demand[w.name], o.gpus_per_instance)
                         for w in W if eligible(o, w))
        y[j] = prob.add_variable(f"y_{j}", 0, max(peak, total_peak), cat_int)
        for w in W:
            if not eligible(o, w):
                continue
            for t in T:
                if request.demand[w.name][t] > 0:
                    r[j, w.name, t] = prob.add_variable(f"r_{j}_{w.name}_{t}", 0, None)

    def add(terms: Sequence[tuple[Any, float]], sense: int, rhs: float, name: str) -> None:
        prob.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(terms), sense, name, rhs))

    le, ge, eq = pulp.LpConstraintLE, pulp.LpConstraintGE, pulp.LpConstraintEQ

    # reserved use
    by_resv_t: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for (j, _w, t), var in r.items():
        by_resv_t[j, t].append(var)
    for (j, t), vars_ in by_resv_t.items():
        add([(v, 1) for v in vars_] + [(y[j], -1)], le, 0, f"resv_{j}_{t}")

    # cover and spot ceiling
    cover: dict[tuple[str, int], list[tuple[Any, float]]] = defaultdict(list)
    spot: dict[tuple[str, int], list[tuple[Any, float]]] = defaultdict(list)
    for (i, wn, t), var in x.items():
        g = flex[i].gpus_per_instance
        cover[wn, t].append((var, g))
        if flex[i].market is Market.SPOT:
            spot[wn, t].append((var, g))
    for (j, wn, t), var in r.items():
        cover[wn, t].append((var, resv[j].gpus_per_instance))
    wl = {w.name: w for w in W}
    for w in W:
        for t in T:
            d = request.demand[w.name][t]
            if d <= 0:
                continue
            add(cover[w.name, t], ge, d, f"cover_{w.name}_{t}")
            if spot[w.name, t]:
                add(spot[w.name, t], le, float(wl[w.name].max_spot_fraction) * d,
                    f"spot_{w.name}_{t}")

    # gang: one location per gang workload
    gang_vars: dict[str, dict[str, Any]] = {}
    for w in W:
        if not w.gang:
            continue
        places = sorted({o.location for o in offers if eligible(o, w)})
        b = {k: prob.add_variable(f"b_{w.name}_{n}", 0, 1, cat_int) for n, k in enumerate(places)}
        gang_vars[w.name] = b
        add([(v, 1) for v in b.values()], eq, 1, f"gang_{w.name}")
        for (i, wn, t), var in x.items():
            if wn == w.name:
                o = flex[i]
                add([(var, 1), (b[o.location], -big_m(request.demand[wn], o.gpus_per_instance))],
                    le, 0, f"gx_{i}_{wn}_{t}")
        for (j, wn, t), var in r.items():
            if wn == w.name:
                o = resv[j]
                add([(var, 1), (b[o.location], -big_m(request.demand[wn], o.gpus_per_instance))],
                    le, 0, f"gr_{j}_{wn}_{t}")

    # caps
    flex_t: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for (i, _w, t), var in x.items():
        flex_t[i, t].append(var)
    for i, o in enumerate(flex):
        cap = request.offer_caps.get(o.key)
        if cap is not None:
            for t in T:
                if flex_t[i, t]:
                    add([(v, 1) for v in flex_t[i, t]], le, cap, f"cap_{i}_{t}")
    for j, o in enumerate(resv):
        cap = request.offer_caps.get(o.key)
        if cap is not None:
            y[j].upBound = min(cap, y[j].upBound)
    for (cloud, region), cap in request.region_caps.items():
        ridx = [j for j, o in enumerate(resv) if (o.cloud.value, o.region) == (cloud, region)]
        for t in T:
            rterms: list[tuple[Any, float]] = [
                (v, 1) for i, o in enumerate(flex) if (o.cloud.value, o.region) == (cloud, region)
                for v in flex_t[i, t]]
            rterms += [(y[j], 1) for j in ridx]
            if rterms:
                add(rterms, le, cap, f"rcap_{cloud}_{region}_{t}")

    # budget per slot (list prices, not the interruption overhead)
    if request.budget_per_hour is not None:
        for t in T:
            bterms: list[tuple[Any, float]] = [
                (v, float(o.hourly_usd)) for i, o in enumerate(flex) for v in flex_t[i, t]]
            bterms += [(y[j], float(o.hourly_usd)) for j, o in enumerate(resv)]
            add(bterms, le, float(request.budget_per_hour), f"budget_{t}")

    nslots = len(T)
    objective = [(var, float(effective_price(flex[i], request))) for (i, _w, _t), var in x.items()]
    objective += [(y[j], float(o.hourly_usd) * nslots) for j, o in enumerate(resv)]
    prob.setObjective(pulp.LpAffineExpression(objective))

    status, bound = _run(prob, request)
    if status != "Optimal" and status != "Feasible":
        raise explain.infeasible(request, offers, status)

    def val(v: Any) -> int:
        return round(v.value() or 0)

    allocations: list[Allocation] = []
    for i, o in enumerate(flex):
        for w in W:
            counts = tuple(val(x[i, w.name, t]) if (i, w.name, t) in x else 0 for t in T)
            if any(counts):
                allocations.append(Allocation(offer=o, workload=w.name, instances_by_slot=counts))
    reservations: list[Reservation] = []
    for j, o in enumerate(resv):
        n = val(y[j])
        if n:
            used = {w.name: tuple(math.ceil((r[j, w.name, t].value() or 0) - 1e-6)
                                  if (j, w.name, t) in r else 0 for t in T) for w in W}
            reservations.append(Reservation(offer=o, instances=n,
                                            used_by_slot={k: v for k, v in used.items() if any(v)}))
    slot_cost = tuple(
        sum((a.offer.hourly_usd * a.instances_by_slot[t] for a in allocations), Decimal(0))
        + sum((rv.offer.hourly_usd * rv.instances for rv in reservations), Decimal(0))
        for t in T)
    plan_wo_bound = Plan(
        gpu=request.gpu, demand={k: tuple(v) for k, v in request.demand.items()},
        allocations=tuple(allocations), reservations=tuple(reservations),
        slot_cost_usd=tuple(c.quantize(CENT) for c in slot_cost), lower_bound_usd=Decimal(0),
        status=status, solver=request.solver, offers_considered=len(offers),
        offers_dropped=dropped)
    lower = min(Decimal(str(bound)).quantize(CENT), plan_wo_bound.total_cost_usd)
    return Plan(**{**_fields(plan_wo_bound), "lower_bound_usd": lower,
                   "binding": explain.binding(request, plan_wo_bound, gang_vars)})


def _fields(plan: Plan) -> dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


def _run(prob: Any, request: PlanRequest) -> tuple[str, float]:
    """Solve; return PuLP's status name and a proven lower bound on the objective."""
    import pulp

    if request.solver == "highs":
        from gpuprov.optimizer.highs import solve_highs

        return solve_highs(prob, request)
    if request.solver != "cbc":
        raise SolverError(f"unknown solver {request.solver!r}", hint="use cbc or highs")
    with tempfile.TemporaryDirectory(prefix="gpuprov-cbc-") as tmp:
        log = os.path.join(tmp, "cbc.log")
        solver = pulp.PULP_CBC_CMD(msg=False, gapRel=request.gap, timeLimit=request.time_limit_s,
                                   threads=1, logPath=log, keepFiles=False)
        try:
            prob.solve(solver)
        except pulp.PulpSolverError as exc:
            raise SolverError(f"CBC failed: {exc}") from exc
        status = pulp.LpStatus[prob.status]
        if prob.sol_status == pulp.LpSolutionOptimal:
            status = "Optimal"
        elif prob.sol_status == pulp.LpSolutionIntegerFeasible:
            status = "Feasible"
        with open(log, encoding="utf-8", errors="replace") as fh:
            bound = _cbc_bound(fh.read())
    if bound is None:
        bound = _relaxation_bound(prob)
    return status, bound


def _cbc_bound(log: str) -> float | None:
    """CBC's best proven bound, read from its log.

    'Search completed - best objective X' proves X optimal; a search stopped early (gap or
    time) prints 'Partial search - best objective X (best possible Y)' or 'Lower bound: Y';
    failing those, the last node line's 'best possible', then the root LP relaxation.
    """
    import re

    number = r"([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
    patterns = (rf"Search completed - best objective {number}",
                rf"Partial search - best objective \S+ \(best possible {number}\)",
                rf"Lower bound:\s+{number}", rf"best possible {number}",
                rf"Continuous objective value is {number}")
    for pattern in patterns:
        found = re.findall(pattern, log)
        if found:
            return float(found[-1])
    return None


def _relaxation_bound(prob: Any) -> float:
    import pulp

    relaxed = prob.deepcopy()
    for v in relaxed.variables():
        v.cat = pulp.LpContinuous
    relaxed.solve(pulp.PULP_CBC_CMD(msg=False))
    return float(pulp.value(relaxed.objective) or 0.0)
