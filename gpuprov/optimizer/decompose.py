r"""Long horizons that never repeat: the model of ``problem.py`` solved by parts, with a proven bound.

A week of hourly slots that repeats nothing has ~168 distinct demand profiles; the whole model then
holds every offer of every location in every profile and a binary per gang site, and CBC neither
builds nor closes it in reasonable time. This module solves the same model for requests with one
gang workload G (or none) and one other workload N, and no caps, budget, commitments or fleet
(``applicable``); it returns a plan of the whole model and a lower bound proven on the whole model.

Notation as in ``problem.py``; p ranges over profiles (weight ω_p slots), |T| = Σ ω_p.

Restriction (the plan, an upper bound)
    M(k, S): G only at site k = (location, GPU model), N only at the locations S ∪ {loc k}. Every
    constraint of the whole model holds for a solution of M(k, S) (the spread caps keep the whole
    offer set's rounding), so its MILP optimum is a plan of the whole model.

Relaxation (the bound)
    Drop the rows that count the locations a spread workload uses (they only matter for tiny
    demands), relax integrality, and price N's cover and spot-ceiling rows with multipliers
    π_p ≥ 0, μ_p ≥ 0. With G at site k the Lagrangian separates by location:

        L_k(π, μ) = Σ_p (π_p·d_p − μ_p·⌊s_N·d_p⌋) + Σ_{l ≠ loc k} V_l(π, μ) + J_k(π, μ)

    V_l  location l's best use for N alone: sell up to C_p GPUs in profile p at π_p, bought on
         demand (ω_p·a_l a GPU), on spot (ω_p·e_l + μ_p) or from R reserved GPUs paid every slot
         (|T|·ρ_l·R). With q_p = max(0, π_p − alt_p) and v_p = min(π_p, alt_p), alt_p the cheaper
         of the first two: V_l = min_{R≥0} |T|ρ_l R − Σ_p q_p C_p − Σ_p v_p·min(R, C_p), a convex
         piecewise-linear function minimised at a breakpoint (found by bisection on its slope).
    J_k  G's whole cover at k (on demand, spot up to ⌊s_G·d⌋, reserved) and N at loc k, sharing
         one pool of R reserved GPUs at G's cheapest reserved rate at k; N's own cheaper
         reservation there, if any, is counted per GPU-hour used (a relaxation: a reservation is
         paid every slot). Each reserved GPU in profile p goes to the use it saves most on.
    C_p  N's cap at one location: the spread cap of problem.py, or d_p + g_max − 1 with no spread
         (some optimal plan never overshoots by a whole instance).

    For every π, μ ≥ 0, L_k bounds every plan with G at k, and min_k L_k bounds the whole model.
    The multipliers are the duals of M(k, S)'s LP relaxation; locations with V_l < 0 there are
    added to S and the LP solved again (column generation), so that at the end L_k is the LP
    relaxation of the whole model with G at k. Each site's bound is the best over the multiplier
    sets tried; sites whose bound could still beat the plan get their own multipliers and, if
    still promising, their own MILP.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gpuprov.models import Market, Offer, SolveStatus, Workload
from gpuprov.optimizer.problem import (
    PlanRequest,
    effective_price,
    eligible,
    gang_site,
    profiles,
    spread_cap,
)

if TYPE_CHECKING:
    from gpuprov.optimizer.reduce import Prepared
    from gpuprov.optimizer.solve import Model

# with fewer distinct profiles or variables the whole model is small: solved at once as well when
# the parts have not proven the gap
MIN_PROFILES = 25
MIN_VARIABLES = 20_000
START_LOCATIONS = 2  # N's locations in the first restricted model, beyond the spread's minimum
ADD_PER_ROUND = 3  # locations added per round of column generation
MAX_ROUNDS = 8
MAX_SITES = 40  # sites given their own multipliers (and a rounding) beyond the first, within the time limit
INF = math.inf


def applicable(request: PlanRequest) -> bool:
    """Whether the request has the shape solved by parts (one gang workload or none, one other,
    nothing that couples locations: no caps, budget, commitments or running fleet)."""
    if request.method == "monolithic" or not request.exact_reductions or request.capped:
        return False
    if any(w.replicas for w in request.workloads):  # its bounds and rounding count GPUs
        return False
    gangs = [w for w in request.workloads if w.gang]
    others = [w for w in request.workloads if not w.gang]
    return len(gangs) <= 1 and len(others) == 1 and not any(w.spread_zones >= 2 for w in gangs)


def large(request: PlanRequest, offers: Sequence[Offer]) -> bool:
    """Whether the whole model is too large to be worth solving at once when the parts have not
    proven the gap: many distinct profiles and many variables (``method`` may force either)."""
    if request.method != "auto":
        return request.method == "decompose"
    active = len(profiles(request))
    size = sum(1 for o in offers for w in request.workloads if eligible(o, w)) * active
    return active >= MIN_PROFILES and size >= MIN_VARIABLES


@dataclass(frozen=True)
class Rates:
    """Cheapest per-GPU prices of one place for one workload (USD per GPU-hour, overhead included)."""

    on_demand: float = INF
    spot: float = INF
    reserved: float = INF


def rates(offers: Sequence[Offer], w: Workload, request: PlanRequest) -> Rates:
    od = sp = rs = INF
    for o in offers:
        if not eligible(o, w):
            continue
        per = float(effective_price(o, w, request)) / o.gpus_per_instance
        if o.market is Market.ON_DEMAND:
            od = min(od, per)
        elif o.market is Market.SPOT:
            sp = min(sp, per)
        else:
            rs = min(rs, per)
    return Rates(od, sp, rs)


Units = list[tuple[float, float]]  # (saving of one reserved GPU, how many GPUs save that), best first


def min_pool(
    hours: int, rate: float, base: float, units: Sequence[Units], required: Sequence[float] | None = None
) -> float:
    """min over R of |T|·rate·R + base − Σ_p (sum of the best R − req_p units of profile p), with
    R ≥ max_p req_p (req_p GPUs of profile p that only a reservation can cover): a convex
    piecewise-linear function of R, minimised at a breakpoint found by bisection on its slope."""
    req = list(required) if required is not None else [0.0] * len(units)
    floor = max(req, default=0.0)
    if rate == INF:
        return base if floor <= 0 else INF
    points = sorted({floor, *(r + c for u, r in zip(units, req, strict=True) for c in _cumulative(u) if r + c > floor)})

    def top(u: Units, r: float) -> float:
        total, left = 0.0, r
        for value, count in u:
            if left <= 0:
                break
            take = min(left, count)
            total += value * take
            left -= take
        return total

    def slope(r: float) -> float:  # right derivative at r
        s = hours * rate
        for u, off in zip(units, req, strict=True):
            left = r - off
            for value, count in u:
                if left < count:
                    s -= value
                    break
                left -= count
        return s

    lo, hi = 0, len(points) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if slope(points[mid]) >= 0:
            hi = mid
        else:
            lo = mid + 1
    r = points[lo]
    return hours * rate * r + base - sum(top(u, r - off) for u, off in zip(units, req, strict=True))


def _cumulative(u: Units) -> list[float]:
    out, total = [], 0.0
    for _value, count in u:
        total += count
        out.append(total)
    return out


@dataclass
class Shape:
    """The request, read once: profiles, weights, demands, caps, per-place rates."""

    request: PlanRequest
    offers: list[Offer]
    gang: Workload | None
    other: Workload
    weights: list[float]
    d_other: list[int]
    d_gang: list[int]
    caps: list[float]
    smallest: dict[str, int]
    locations: dict[str, Rates] = field(default_factory=dict)  # N's rates per location
    sites: dict[tuple[str, str], Rates] = field(default_factory=dict)  # G's rates per site

    @property
    def hours(self) -> int:
        return self.request.slots


def shape(request: PlanRequest, offers: list[Offer]) -> Shape:
    from gpuprov.optimizer.solve import smallest_instance

    gang = next((w for w in request.workloads if w.gang), None)
    other = next(w for w in request.workloads if not w.gang)
    P = profiles(request)
    names = [w.name for w in request.workloads]
    d_other = [prof.demand[names.index(other.name)] for prof in P]
    d_gang = [prof.demand[names.index(gang.name)] for prof in P] if gang else [0] * len(P)
    smallest = {w.name: smallest_instance(offers, w) for w in request.workloads}
    small = smallest[other.name]
    g_max = max((o.gpus_per_instance for o in offers if eligible(o, other)), default=1)
    caps = [
        0.0 if d <= 0 else float(spread_cap(d, other, small) if other.spread_zones >= 2 else d + g_max - 1)
        for d in d_other
    ]
    s = Shape(
        request,
        offers,
        gang,
        other,
        [float(prof.weight) for prof in P],
        d_other,
        d_gang,
        caps,
        smallest,
    )
    by_loc: dict[str, list[Offer]] = {}
    by_site: dict[tuple[str, str], list[Offer]] = {}
    for o in offers:
        if eligible(o, other):
            by_loc.setdefault(o.location, []).append(o)
        if gang is not None and eligible(o, gang):
            by_site.setdefault(gang_site(o), []).append(o)
    s.locations = {loc: rates(v, other, request) for loc, v in sorted(by_loc.items())}
    if gang is not None:
        s.sites = {k: rates(v, gang, request) for k, v in sorted(by_site.items())}
    return s


def location_value(
    s: Shape, r: Rates, pi: Sequence[float], mu: Sequence[float], extra: float = INF
) -> tuple[float, list[Units]]:
    """N alone at one location: (the part without reservations, the units a reserved GPU saves);
    ``extra`` a further per-GPU-hour alternative (a reservation counted per hour used)."""
    base, units = 0.0, list[Units]()
    for p, cap in enumerate(s.caps):
        if cap <= 0:
            units.append([])
            continue
        w = s.weights[p]
        alt = min(w * r.on_demand, w * r.spot + mu[p], w * extra)
        q = max(0.0, pi[p] - alt)
        base -= q * cap
        v = min(pi[p], alt)
        units.append([(v, cap)] if v > 0 else [])
    return base, units


def V(s: Shape, loc: str, pi: Sequence[float], mu: Sequence[float]) -> float:
    r = s.locations[loc]
    base, units = location_value(s, r, pi, mu)
    return min_pool(s.hours, r.reserved, base, units)


def J(s: Shape, site: tuple[str, str], pi: Sequence[float], mu: Sequence[float]) -> float:
    """G's whole cover at the site and N at its location, sharing the site's reservations.

    Without a reservation for G at the site, N's location is priced alone (V) beside G's cover
    without reservations (exact). Otherwise the larger of two relaxations (neither dominates):
    one pool at G's reserved rate ρ_G serves both, N's cheaper reservation ρ_N there, if any,
    counted per GPU-hour N uses it; or one pool at min(ρ_G, ρ_N) serves both and G pays
    ρ_G − ρ_N per GPU-hour it uses the pool. A reservation is paid every hour, so each costs
    no more than the subproblem itself."""
    assert s.gang is not None
    g = s.sites[site]
    n = s.locations.get(site[0], Rates())
    if g.reserved == INF:
        base = 0.0
        for p, d in enumerate(s.d_gang):
            if d <= 0:
                continue
            spot_max = math.floor(s.gang.max_spot_fraction * d) if g.spot < INF else 0
            if g.on_demand == INF and spot_max < d:
                return INF  # G cannot be covered at this site
            od = g.on_demand if g.on_demand < INF else g.spot
            base += s.weights[p] * (min(g.spot, od) * spot_max + od * (d - spot_max))
        return base + (V(s, site[0], pi, mu) if site[0] in s.locations else 0.0)
    hourly = _pool(s, g, n, pi, mu, g.reserved, 0.0, n.reserved if n.reserved < g.reserved else INF)
    rate = min(g.reserved, n.reserved)
    return max(hourly, _pool(s, g, n, pi, mu, rate, g.reserved - rate, INF))


def _pool(
    s: Shape,
    g: Rates,
    n: Rates,
    pi: Sequence[float],
    mu: Sequence[float],
    rate: float,
    premium: float,
    extra: float,
) -> float:
    """One pool of reserved GPUs at ``rate`` shared by G (paying ``premium`` a GPU-hour used) and
    N (with ``extra`` a further per-GPU-hour alternative); each GPU goes where it saves most."""
    assert s.gang is not None
    base, n_units = location_value(s, n, pi, mu, extra)
    units: list[Units] = []
    required: list[float] = []
    for p, d in enumerate(s.d_gang):
        mine = list(n_units[p])
        need = 0.0
        if d > 0:
            w = s.weights[p]
            spot_max = math.floor(s.gang.max_spot_fraction * d) if g.spot < INF else 0
            pieces: list[tuple[float, float]] = []
            if g.on_demand == INF:  # what spot may not carry only reservations can
                need = float(d - spot_max)
                base += w * premium * need
                if spot_max:
                    pieces.append((g.spot, float(spot_max)))
            elif g.spot < g.on_demand and spot_max > 0:
                pieces += [(g.on_demand, float(d - spot_max)), (g.spot, float(spot_max))]
            else:
                pieces.append((g.on_demand, float(d)))
            for price, count in pieces:
                base += w * price * count
                if price > premium:
                    mine.append((w * (price - premium), count))
        mine.sort(key=lambda t: -t[0])
        units.append(mine)
        required.append(need)
    return min_pool(s.hours, rate, base, units, required)


@dataclass
class Bounds:
    """The Lagrangian bound per site, the best over the multiplier sets tried."""

    s: Shape
    best: dict[tuple[str, str] | None, float] = field(default_factory=dict)

    def update(self, pi: Sequence[float], mu: Sequence[float]) -> None:
        s = self.s
        const = sum(
            pi[p] * d - mu[p] * math.floor(s.other.max_spot_fraction * d) for p, d in enumerate(s.d_other) if d > 0
        )
        values = {loc: V(s, loc, pi, mu) for loc in s.locations}
        total = sum(values.values())
        if s.gang is None:
            self.best[None] = max(self.best.get(None, -INF), const + total)
            return
        for site in s.sites:
            lb = const + total - values.get(site[0], 0.0) + J(s, site, pi, mu)
            self.best[site] = max(self.best.get(site, -INF), lb)


def _allow(s: Shape, site: tuple[str, str] | None, locations: frozenset[str]) -> Callable[[Offer, Workload], bool]:
    where = set(locations) | ({site[0]} if site else set())

    def allow(o: Offer, w: Workload) -> bool:
        if w.gang:
            return site is not None and gang_site(o) == site
        return o.location in where

    return allow


def _model(s: Shape, site: tuple[str, str] | None, locations: frozenset[str], relaxed: bool) -> Model:
    from gpuprov.optimizer.solve import build

    allow = _allow(s, site, locations)
    offers = [o for o in s.offers if any(eligible(o, w) and allow(o, w) for w in s.request.workloads)]
    # the LPs keep rows in GPUs (their duals are prices per GPU); the MILP's rows are tightened
    return build(s.request, offers, allow=allow, smallest=s.smallest, spread_counts=not relaxed, normalize=not relaxed)


def solve_lp(
    s: Shape, site: tuple[str, str] | None, locations: frozenset[str]
) -> tuple[list[float], list[float], float, dict[str, float]] | None:
    """The LP relaxation of M(site, locations) (location-counting rows dropped): N's cover and
    spot duals per profile, and its value; None when it has no solution."""
    import pulp

    m = _model(s, site, locations, relaxed=True)
    for v in m.prob.variables():
        v.cat = pulp.LpContinuous
    try:  # CBC for the LPs whatever the MILP solver (PuLP ships it); it gives the duals
        m.prob.solve(pulp.PULP_CBC_CMD(msg=False, threads=1))
    except pulp.PulpSolverError:
        return None  # the caller solves the whole model, which reports CBC's failure itself
    if m.prob.status != pulp.LpStatusOptimal:
        return None
    n = s.other.name
    pi = [
        max(0.0, float(m.rows[("cover", n, p)].pi or 0.0)) if ("cover", n, p) in m.rows else 0.0
        for p in range(len(s.caps))
    ]
    mu = [
        max(0.0, -float(m.rows[("spot", n, p)].pi or 0.0)) if ("spot", n, p) in m.rows else 0.0
        for p in range(len(s.caps))
    ]
    values = {v.name: float(v.varValue or 0.0) for v in m.prob.variables()}
    return pi, mu, float(m.prob.objective.value() or 0.0), values


@dataclass
class Outcome:
    """The plan's model (the best restricted MILP), its status, the bound on the whole model."""

    model: Model
    status: str
    bound: float
    note: str


def price(
    s: Shape, site: tuple[str, str] | None, start: frozenset[str], bounds: Bounds
) -> tuple[frozenset[str], dict[str, float]] | None:
    """Column generation for one site: add the locations that would lower the restricted LP until
    none does; every round's multipliers tighten every site's bound. Returns the locations and
    the last LP's solution (values by variable name)."""
    locations = start
    values: dict[str, float] = {}
    for rounds in range(1, MAX_ROUNDS + 1):
        lp = solve_lp(s, site, locations)
        if lp is None:
            return None
        pi, mu, value, values = lp
        bounds.update(pi, mu)
        here = {site[0]} if site else set()
        # the column-generation bound of this site: its restricted LP (every column of the site
        # and of these locations) plus the most the other locations could still take off
        gains = sorted((V(s, loc, pi, mu), loc) for loc in s.locations if loc not in locations and loc not in here)
        bounds.best[site] = max(bounds.best.get(site, -INF), value + sum(v for v, _loc in gains))
        tol = 1e-7 * max(1.0, abs(value))
        new = [loc for v, loc in gains[:ADD_PER_ROUND] if v < -tol]
        if not new or rounds == MAX_ROUNDS:
            break  # (the values returned are always those of the locations returned)
        locations = locations | frozenset(new)
    return locations, values


def _first_locations(s: Shape) -> frozenset[str]:
    def score(loc: str) -> float:
        r = s.locations[loc]
        return min(r.on_demand, r.spot, r.reserved)

    ranked = sorted(s.locations, key=lambda loc: (score(loc), loc))
    return frozenset(ranked[: max(1, s.other.spread_zones) + START_LOCATIONS])


def solve(request: PlanRequest, prepared: Prepared, milp: bool = True) -> Outcome | None:
    """The plan (the best restricted model, rounded from its LP or solved as a MILP) and the bound
    proven on the whole model; None when this method cannot answer (the caller then solves the
    whole model)."""
    started = time.monotonic()
    s = shape(request, prepared.offers)
    if not s.locations or (s.gang is not None and not s.sites):
        return None
    bounds = Bounds(s)
    zero = [0.0] * len(s.caps)
    order: list[tuple[str, str] | None] = [None]
    if s.gang is not None:
        alone = {k: J(s, k, zero, zero) for k in s.sites}
        order = [*sorted(s.sites, key=lambda k: (alone[k], k))]
    priced: dict[tuple[str, str] | None, tuple[frozenset[str], dict[str, float]]] = {}
    got = price(s, order[0], _first_locations(s), bounds)
    if got is None:
        return None
    priced[order[0]] = got
    locations = got[0]
    gap = request.gap
    best: tuple[float, Model, tuple[str, str] | None] | None = None
    solved: set[tuple[str, str] | None] = set()
    for _ in range(MAX_SITES + 1):
        ub = best[0] if best else INF
        candidates = sorted(
            (k for k in bounds.best if k not in solved and bounds.best[k] < ub * (1 - gap)),
            key=lambda k: (bounds.best[k], str(k)),
        )
        if not candidates or (best and time.monotonic() - started > request.time_limit_s):
            break
        k = candidates[0]
        solved.add(k)
        if k not in priced:
            got = price(s, k, locations, bounds)
            if got is None:
                continue
            priced[k] = got
            if bounds.best[k] >= ub * (1 - gap):
                continue
        # the MILP only for the first site, and only when the rounding is not within the gap of
        # the site's own bound (no MILP of this site can go below it); the others (near-ties on
        # their bounds) are rounded: a MILP lowers the plan's cost a little, never the bound
        value = _whole(s, k, priced[k], bounds.best[k], started, milp=milp and best is None)
        if value is not None and value[0] < ub:
            best = (value[0], value[1], k)
    if best is None:
        return None
    ub, model, site = best
    lb = min(min(bounds.best.values()), ub)
    proven = (ub - lb) / ub if ub > 0 else 0.0
    where = ""
    if s.gang is not None:
        where = f"{len(priced)} of {len(s.sites)} gang sites priced on their own (the rest bounded by their prices), "
    note = (
        f"solved by parts: {where}{len(priced[site][0])} of {len(s.locations)} locations for {s.other.name} "
        f"in the plan's model; proven gap {proven:.3%} on the whole model"
    )
    status = SolveStatus.OPTIMAL if proven <= gap + 1e-9 else SolveStatus.FEASIBLE
    return Outcome(model, status, lb, note)


def _whole(
    s: Shape,
    site: tuple[str, str] | None,
    priced: tuple[frozenset[str], dict[str, float]],
    lower: float,
    started: float,
    milp: bool = True,
) -> tuple[float, Model] | None:
    """Whole instances for a site's restricted model: its LP rounded and, when that is not within
    the gap of the bound (or there is no rounding), the MILP started from it in the time left."""
    from gpuprov.optimizer.rounding import round_lp
    from gpuprov.optimizer.solve import _run

    request = s.request
    model = _model(s, site, priced[0], relaxed=False)
    value = round_lp(model, request, priced[1], s.smallest)
    if value is not None and (value - lower <= request.gap * value or not milp):
        return value, model
    kept = {v: v.varValue for v in model.prob.variables()}
    left = request.time_limit_s - (time.monotonic() - started)
    if left >= 1:
        status, _bound = _run(
            model.prob, replace(request, gap=request.gap / 2, time_limit_s=left), warm=value is not None
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
