r"""Long horizons that never repeat: the model of ``problem.py`` solved by parts, with a proven bound.

A week of hourly slots that repeats nothing has ~168 distinct demand profiles; the whole model then
holds every offer of every location in every profile and a binary per gang site, and CBC neither
builds nor closes it in reasonable time. This module solves the same model for requests with at
most one gang workload G (not spread) and any number of other workloads N, with any couplings
(offer and region caps, a budget, held commitments, Savings Plans to buy, a running fleet with
migration costs, reservations held fixed); it returns a plan of the whole model and a lower bound
proven on the whole model (``lagrange.py``: the couplings enter it as priced rows or are relaxed).

Restriction (the plan, an upper bound)
    M(k, S): G only at site k = (location, GPU model), the N only at the locations S ∪ {loc k}, with
    every row of the whole model (caps, budget, commitments, migration). Every constraint of the
    whole model holds for a solution of M(k, S) (the spread caps keep the whole offer set's
    rounding), so its optimum is a plan of the whole model. S starts with the cheapest locations,
    those where the fleet runs now (the rebalancer's incumbent, whose gang site is priced first),
    and those of held reservations and counted commitments.

Bound
    The multipliers of ``lagrange.py`` are the duals of M(k, S)'s LP relaxation (location-counting
    rows dropped); locations with V_l < 0 there are added to S and the LP solved again (column
    generation). The site's own bound is its restricted LP plus Σ_{l ∉ S} V_l at those duals: at
    the LP's optimum the restricted locations contribute nothing more, and V_l with the caps',
    budget's and migration's multipliers left at 0 only underestimates the others. Every site's
    Lagrangian bound is the best over the multiplier sets tried; sites whose bound could still
    beat the plan get their own multipliers and, if still promising, their own rounding.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpuprov.models import Offer, SolveStatus, Workload
from gpuprov.optimizer.lagrange import INF, Bounds, Duals, J, Shape, V, shape
from gpuprov.optimizer.problem import PlanRequest, eligible, gang_site, profiles

if TYPE_CHECKING:
    from gpuprov.optimizer.clock import Clock
    from gpuprov.optimizer.model import Model
    from gpuprov.optimizer.reduce import Prepared

# with fewer distinct profiles or variables the whole model is small: solved at once as well when
# the parts have not proven the gap
MIN_PROFILES = 25
MIN_VARIABLES = 20_000
START_LOCATIONS = 2  # N's locations in the first restricted model, beyond the spread's minimum
ADD_PER_ROUND = 3  # locations added per round of column generation
MAX_ROUNDS = 8
MIN_MILP_S = 2.0  # a restricted MILP is only started with this much time left beyond writing it out
MAX_SITES = 40  # sites given their own multipliers (and a rounding) beyond the first, within the time limit


def applicable(request: PlanRequest) -> bool:
    """Whether the request has the shape solved by parts: at most one gang workload (not spread)
    and any others (couplings are priced or relaxed in the bound)."""
    if request.method == "monolithic" or not request.exact_reductions:
        return False
    if any(w.replicas for w in request.workloads):  # its bounds and rounding count GPUs
        return False
    gangs = [w for w in request.workloads if w.gang]
    return len(gangs) <= 1 and not any(w.spread_zones >= 2 for w in gangs) and bool(request.workloads)


def large(request: PlanRequest, offers: Sequence[Offer]) -> bool:
    """Whether the whole model is too large to be worth solving at once when the parts have not
    proven the gap: many distinct profiles and many variables (``method`` may force either)."""
    if request.method != "auto":
        return request.method == "decompose"
    active = len(profiles(request))
    size = sum(1 for o in offers for w in request.workloads if eligible(o, w)) * active
    return active >= MIN_PROFILES and size >= MIN_VARIABLES


def _allow(s: Shape, site: tuple[str, str] | None, locations: frozenset[str]) -> Callable[[Offer, Workload], bool]:
    where = set(locations) | ({site[0]} if site else set())

    def allow(o: Offer, w: Workload) -> bool:
        if w.gang:
            return site is not None and gang_site(o) == site
        return o.location in where

    return allow


def _model(s: Shape, site: tuple[str, str] | None, locations: frozenset[str], relaxed: bool) -> Model:
    from gpuprov.optimizer.model import build

    allow = _allow(s, site, locations)
    fixed = s.request.reserved_fixed or {}
    offers = [
        o
        for o in s.offers
        if any(eligible(o, w) and allow(o, w) for w in s.request.workloads) or fixed.get(o.site, 0) > 0
    ]
    # the LPs keep rows in GPUs (their duals are prices per GPU); the MILP's rows are tightened
    return build(s.request, offers, allow=allow, smallest=s.smallest, spread_counts=not relaxed, normalize=not relaxed)


LP = tuple[Duals, float, dict[str, float]]


def solve_lp(s: Shape, site: tuple[str, str] | None, locations: frozenset[str]) -> LP | None:
    """The LP relaxation of M(site, locations) (location-counting rows dropped): the multipliers
    (the N's cover and spot duals, the commitments' capacity duals, per profile), its value and
    its solution; None when it has no solution."""
    from gpuprov.errors import SolverError
    from gpuprov.optimizer.cbc import solve_lp as lp_of

    m = _model(s, site, locations, relaxed=True)
    try:  # CBC for the LPs whatever the MILP solver (PuLP ships it); it gives the duals
        lp = lp_of(m.prob)
    except SolverError:
        return None  # the caller solves the whole model, which reports CBC's failure itself
    if not lp.optimal:
        return None
    P = range(s.n_profiles)

    def dual(key: tuple[str, str, int], sign: float) -> float:
        row = m.rows.get(key)
        return max(0.0, sign * float(row.pi or 0.0)) if row is not None else 0.0

    duals = Duals(
        pi={w.name: [dual(("cover", w.name, p), 1.0) for p in P] for w in s.others},
        mu={w.name: [dual(("spot", w.name, p), -1.0) for p in P] for w in s.others},
        eta=[[dual(("commit", str(h), p), -1.0) for p in P] for h in range(len(s.commits))],
    )
    return duals, lp.value, lp.values


@dataclass
class Outcome:
    """The plan's model (the best restricted MILP), its status, the bound on the whole model."""

    model: Model
    status: str
    bound: float
    note: str


def price(
    s: Shape, site: tuple[str, str] | None, start: frozenset[str], bounds: Bounds, clock: Clock
) -> tuple[frozenset[str], dict[str, float]] | None:
    """Column generation for one site: add the locations that would lower the restricted LP until
    none does; every round's multipliers tighten every site's bound. Returns the locations and
    the last LP's solution (values by variable name)."""
    locations = start
    values: dict[str, float] = {}
    for rounds in range(1, MAX_ROUNDS + 1):
        began = time.monotonic()
        with clock.phase("parts: LPs"):
            lp = solve_lp(s, site, locations)
        if lp is None:
            return None
        duals, value, values = lp
        with clock.phase("parts: bounds"):
            bounds.update(duals)
            here = {site[0]} if site else set()
            # the column-generation bound of this site: its restricted LP (every column of the site
            # and of these locations) plus the most the other locations could still take off
            gains = sorted((V(s, loc, duals), loc) for loc in s.locations if loc not in locations and loc not in here)
            bounds.best[site] = max(bounds.best.get(site, -INF), value + sum(v for v, _loc in gains))
        tol = 1e-7 * max(1.0, abs(value))
        new = [loc for v, loc in gains[:ADD_PER_ROUND] if v < -tol]
        took = time.monotonic() - began
        clock.note("round", took)
        if not new or rounds == MAX_ROUNDS or clock.left() < 2 * took + clock.estimate("rounding"):
            break  # (the values returned are always those of the locations returned)
        locations = locations | frozenset(new)
    return locations, values


def _first_locations(s: Shape) -> frozenset[str]:
    """The N's cheapest locations, where the fleet runs now, and where commitments are held."""

    def score(loc: str) -> float:
        return min(min(r.on_demand, r.spot, r.reserved) for r in s.locations[loc].values())

    ranked = sorted(s.locations, key=lambda loc: (score(loc), loc))
    spread = max((w.spread_zones for w in s.others), default=1)
    chosen = set(ranked[: max(1, spread) + START_LOCATIONS])
    request = s.request
    chosen |= {k.location for k in request.incumbent if k.location in s.locations}
    chosen |= {k.location for k in (request.reserved_fixed or {}) if k.location in s.locations}
    counted = [h for h in request.held if not h.savings_plan]
    chosen |= {o.location for o in s.offers if o.location in s.locations and any(h.covers(o) for h in counted)}
    return frozenset(chosen)


def _first_site(s: Shape, duals: Duals) -> list[tuple[str, str] | None]:
    """Gang sites in the order they are priced: where the gang runs now first (the rebalancer's
    incumbent), then by their bound at zero multipliers."""
    if s.gang is None:
        return [None]
    alone = {k: J(s, k, duals) for k in s.sites}
    order: list[tuple[str, str] | None] = [*sorted(s.sites, key=lambda k: (alone[k], k))]
    gang = s.gang.name
    running: dict[tuple[str, str], int] = {}
    models = {o.instance_type: o.gpu for o in s.offers}
    for k, n in s.request.incumbent.items():
        site = (k.location, models.get(k.instance_type, ""))
        if k.workload == gang and site in s.sites:
            running[site] = running.get(site, 0) + n
    if running:
        here = max(sorted(running), key=lambda k: running[k])
        order = [here, *(k for k in order if k != here)]
    return order


def solve(request: PlanRequest, prepared: Prepared, clock: Clock, milp: bool = True) -> Outcome | None:
    """The plan (the best restricted model, rounded from its LP or solved as a MILP) and the bound
    proven on the whole model; None when this method cannot answer (the caller then solves the
    whole model)."""
    s = shape(request, prepared.offers)
    if (not s.locations and s.gang is None) or (s.gang is not None and not s.sites):
        return None
    bounds = Bounds(s)
    order = _first_site(s, s.zero())
    priced: dict[tuple[str, str] | None, tuple[frozenset[str], dict[str, float]]] = {}
    first = _first_locations(s)
    got = None
    for k in order[:3]:  # a first site whose restricted model has no solution (caps) gives way
        got = price(s, k, first, bounds, clock)
        if got is not None:
            priced[k] = got
            break
    if got is None:
        return None
    locations = got[0]
    _relaxed_bounds(s, order[0] if order[0] in priced else next(iter(priced)), first, bounds, clock)
    gap = request.gap
    best: tuple[float, Model, tuple[str, str] | None] | None = None
    solved: set[tuple[str, str] | None] = set()
    # a small whole model is solved after the parts (started from their plan): they only give it a
    # start and a bound, from the first site; a large one gets the sites' own pricing
    for _ in range(MAX_SITES + 1 if milp else 1):
        ub = best[0] if best else INF
        candidates = sorted(
            (k for k in bounds.best if k not in solved and bounds.best[k] < ub * (1 - gap)),
            key=lambda k: (k not in priced, bounds.best[k], str(k)) if best is None else (bounds.best[k], str(k)),
        )
        if not candidates or (best and clock.left() < 2 * clock.estimate("round") + clock.estimate("rounding")):
            break
        k = candidates[0]
        solved.add(k)
        if k not in priced:
            got = price(s, k, locations, bounds, clock)
            if got is None:
                continue
            priced[k] = got
            if bounds.best[k] >= ub * (1 - gap):
                continue
        # the MILP only for the first site, and only when the rounding is not within the gap of
        # the site's own bound (no MILP of this site can go below it); the others (near-ties on
        # their bounds) are rounded: a MILP lowers the plan's cost a little, never the bound
        value = _whole(s, k, priced[k], bounds.best[k], clock, milp=milp and best is None)
        if value is not None and value[0] < ub:
            best = (value[0], value[1], k)
            _report(best[0], min(bounds.best.values()))
    if best is None:
        return None
    ub, model, site = best
    lb = min(max(0.0, min(bounds.best.values())), ub)  # (the objective is never negative)
    proven = (ub - lb) / ub if ub > 0 else 0.0
    where = ""
    if s.gang is not None:
        where = f"{len(priced)} of {len(s.sites)} gang sites priced on their own (the rest bounded by their prices), "
    names = ", ".join(w.name for w in s.others)
    them = f"{len(priced[site][0])} of {len(s.locations)} locations for {names} in the plan's model; " if names else ""
    note = f"solved by parts: {where}{them}proven gap {proven:.3%} on the whole model"
    status = SolveStatus.OPTIMAL if proven <= gap + 1e-9 else SolveStatus.FEASIBLE
    return Outcome(model, status, lb, note)


def _relaxed_bounds(
    s: Shape, site: tuple[str, str] | None, start: frozenset[str], bounds: Bounds, clock: Clock
) -> None:
    """Multipliers from the request without the rows the bound relaxes (caps, budget, migration,
    reservations held fixed): where those bind in a restricted model, its duals price the cover
    rows for the caps' sake and make poor multipliers for the relaxation. Its bounds hold for the
    request too (a relaxation of it), so each site keeps the better of the two."""
    request = s.request
    coupled = request.offer_caps or request.region_caps or request.budget_per_hour is not None
    if not (coupled or request.current_slot is not None or request.reserved_fixed is not None):
        return
    if clock.left() < 3 * clock.estimate("round") + clock.estimate("rounding"):
        return
    loose = replace(
        request,
        offer_caps={},
        region_caps={},
        budget_per_hour=None,
        current_slot=None,
        incumbent={},
        migration_hours={},
        reserved_fixed=None,
    )
    r = shape(loose, s.offers)
    more = Bounds(r)
    with clock.phase("parts: relaxed bound"):
        price(r, site, start, more, clock)
    for k, v in more.best.items():
        if k in bounds.best or k is None:
            bounds.best[k] = max(bounds.best.get(k, -INF), v)


def _report(incumbent: float, bound: float) -> None:
    from gpuprov.optimizer.cbc import progress

    report = progress.get()
    if report is not None:
        report("parts", incumbent, bound)


def _whole(
    s: Shape,
    site: tuple[str, str] | None,
    priced: tuple[frozenset[str], dict[str, float]],
    lower: float,
    clock: Clock,
    milp: bool = True,
) -> tuple[float, Model] | None:
    """Whole instances for a site's restricted model: its LP rounded and, when that is not within
    the gap of the bound (or there is no rounding), the MILP started from it in the time left."""
    from gpuprov.optimizer.cbc import run
    from gpuprov.optimizer.rounding import round_lp

    request = s.request
    began = time.monotonic()
    with clock.phase("parts: rounding"):
        model = _model(s, site, priced[0], relaxed=False)
        value = round_lp(model, request, priced[1], s.smallest, clock)
    took = time.monotonic() - began
    clock.note("rounding", took)
    if value is not None and (value - lower <= request.gap * value or not milp):
        return value, model
    kept = {v: v.varValue for v in model.prob.variables()}
    if clock.left() >= took + MIN_MILP_S:  # writing the MILP out costs about what building it did
        with clock.phase("parts: MILP"):
            status, _bound = run(
                model.prob, request.solver, request.gap / 2, clock.solver_time() - took / 2, warm=value is not None
            )
        if status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            solved = float(model.prob.objective.value() or 0.0)
            if value is None or solved < value:
                return solved, model
    if value is None:
        return None
    for v, x in kept.items():  # the MILP did no better: the rounding again
        v.varValue = x
    return value, model
