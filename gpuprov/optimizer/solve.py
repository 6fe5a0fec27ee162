"""Solve the MILP of ``problem.py`` (built by ``model.py``) with CBC (or HiGHS), read back a Plan.

Pure: no printing, no database; the only clock is the request's deadline (``clock.py``).
Variables are per demand profile (distinct demand vector), not per slot; the answer is
expanded back to every slot.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import replace
from decimal import ROUND_UP, Decimal
from typing import TYPE_CHECKING, Any

from gpuprov.errors import InfeasibleError
from gpuprov.models import Allocation, Plan, Reservation, SolveStatus
from gpuprov.optimizer import explain
from gpuprov.optimizer.cbc import run, solve_lp
from gpuprov.optimizer.clock import Clock
from gpuprov.optimizer.model import Model, build, smallest_instance
from gpuprov.optimizer.problem import (
    PlanRequest,
    overhead,
)
from gpuprov.optimizer.reduce import Prepared, prepare

if TYPE_CHECKING:
    from gpuprov.optimizer import decompose

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


def solve(request: PlanRequest) -> Plan:
    """The plan of ``request``: the parts (decompose.py) where the shape allows, else (or as well,
    when they prove too little on a small model) the whole model from a feasible start.

    Status is honest: "Optimal" means within the gap asked, "Feasible" a plan stopped by the
    time limit (``Plan.gap`` says how far it got); ``InfeasibleError`` only with a proof (a rule
    no offer can meet, an infeasible LP relaxation, or the solver's proof); a time-out with no
    plan is ``TimeLimitError``."""
    clock = Clock(request.deadline if request.deadline is not None else time.monotonic() + request.time_limit_s)
    _check(request)
    with clock.phase("reductions"):
        prepared = prepare(request)
    offers = prepared.offers
    explain.raise_if_obviously_infeasible(request, offers)
    from gpuprov.optimizer import decompose

    large = decompose.large(request, offers)
    # a small whole model gets the time a restricted MILP would take: the parts only round
    parts = None
    if decompose.applicable(request):
        parts = decompose.solve(request, prepared, clock, milp=large)  # its phases are "parts: …"
    if parts is not None and (parts.status == SolveStatus.OPTIMAL or large or clock.left() < 1):
        model, status, bound, notes = parts.model, parts.status, parts.bound, (*prepared.notes, parts.note)
    else:
        model, status, bound, notes = _whole(request, prepared, clock, parts)
    plan = _read(model, request, prepared.dropped + prepared.pruned, len(offers), status, bound, notes)
    return replace(
        plan,
        binding=explain.binding(request, plan, model.gang),
        phases=tuple(clock.phases.items()),
        gap_asked=request.gap,
    )


_SOLVED = (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


def _whole(
    request: PlanRequest, prepared: Prepared, clock: Clock, parts: decompose.Outcome | None
) -> tuple[Model, str, float, tuple[str, ...]]:
    """The whole model: its LP relaxation (a bound, or a proof of infeasibility), a feasible start
    (the parts' plan, else the LP rounded to whole instances under every row), then the MILP
    started from it in the time left; the better of start and MILP is kept, with the best bound."""
    from gpuprov.optimizer import rounding

    offers = prepared.offers
    notes = prepared.notes
    with clock.phase("build"):
        model = build(request, offers)
    bounds = [parts.bound] if parts is not None else []
    tried = []
    start: float | None = None
    if parts is not None:
        _seed(model, parts.model)
        start = float(parts.model.prob.objective.value() or 0.0)
        tried.append("the plan by parts")
    else:
        with clock.phase("lp"):
            lp = solve_lp(model.prob, clock.solver_time(0.5))
        tried.append("the LP relaxation")
        if lp.status == "Infeasible":
            with clock.phase("explain"):
                raise explain.proven_infeasible(request, offers, clock)
        if lp.optimal:
            bounds.append(lp.value)
            with clock.phase("start"):
                smallest = {w.name: smallest_instance(offers, w) for w in request.workloads}
                start = rounding.round_lp(model, request, lp.values, smallest, clock)
            tried.append("rounding it to whole instances" + (" (no rounding met every row)" if start is None else ""))
    kept = {v: v.varValue for v in model.prob.variables()} if start is not None else {}
    status: str
    proved = False
    if start is not None and bounds and start - max(bounds) <= request.gap * start + 1e-6:
        status, value = SolveStatus.OPTIMAL, start  # the start is within the gap: no MILP needed
    else:
        with clock.phase("milp"):
            status, milp_bound = run(
                model.prob, request.solver, request.gap, clock.solver_time(), warm=start is not None
            )
        tried.append(f"the MILP ({request.solver}, {status})")
        value = float(model.prob.objective.value() or 0.0) if status in _SOLVED else math.inf
        proved = status == SolveStatus.OPTIMAL  # the solver's own proof, within the gap asked
        if status in _SOLVED:
            bounds.append(milp_bound)
        elif status == "Infeasible" and start is None:
            raise explain.infeasible(request, offers, "the solver proved it infeasible")
        if start is not None and start < value - 1e-6:
            for v, x in kept.items():  # the solver did not beat the start: keep it
                v.varValue = x
            value, proved = start, False
    if math.isinf(value):
        raise explain.timed_out(request, clock, tried)
    if parts is not None and float(parts.model.prob.objective.value() or 0.0) <= value + 1e-6:
        model, notes, proved = parts.model, (*notes, parts.note), proved and parts.status == SolveStatus.OPTIMAL
        value = float(model.prob.objective.value() or 0.0)
    # every cost term of the objective is non-negative net of coverage (a commitment covers at most
    # what the instance costs): 0 bounds it when nothing better is proven
    bound = min(max([0.0, *(b for b in bounds if math.isfinite(b))]), value)
    close = value - bound <= request.gap * abs(value) + max(1e-6, 1e-9 * abs(value))
    status = SolveStatus.OPTIMAL if proved or close else SolveStatus.FEASIBLE
    return model, status, bound, notes


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
