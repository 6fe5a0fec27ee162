r"""The Lagrangian bound of the decomposition (``decompose.py``), in closed form per location.

Notation as in ``problem.py``; p ranges over profiles (weight ω_p slots), |T| = Σ ω_p; G is the
gang workload (at most one), N ranges over the other workloads.

Relaxation
    Drop the rows that count the locations a spread workload uses, the offer and region caps, the
    budget, the migration terms and the fixing of held reservations (each only restricts the model
    or adds a non-negative cost: dropping it lowers the optimum), relax integrality, and price
    each N's cover and spot-ceiling rows with multipliers π_{N,p} ≥ 0, μ_{N,p} ≥ 0 and each
    commitment's capacity row (held, and Savings Plans to buy) with η_{h,p} ≥ 0. With G at site
    k = (location, GPU model) the Lagrangian separates by location:

        L_k = Σ_{N,p} (π·d − μ·⌊s_N·d⌋) − Σ_{h held,p} η_{h,p}·n_h·a_{h,p} + Σ_{l ≠ loc k} V_l + J_k

    (a Savings Plan to buy adds (|T| − Σ_p η_{s,p})·L_s, minimised at L_s = 0 when Σ_p η_{s,p} ≤ |T|;
    larger η are scaled down to that).

    V_l  location l's best use for the N workloads alone: each sells up to C_{N,p} GPUs in profile p
         at π_{N,p}, bought on demand (ω_p·a a GPU, or η_{h,p}·ρ_{h,o} per instance where a
         commitment h covers the offer: the relaxed coverage), on spot (ω_p·e + μ_{N,p}) or from
         a pool of R reserved GPUs paid every slot at a rate ρ (|T|·ρ·R). A workload whose own
         cheapest reservation ρ_N is above ρ pays ρ_N − ρ per GPU-hour it uses the pool; one whose
         ρ_N is below ρ may also count its reservation per GPU-hour used (a relaxation: a
         reservation is paid every slot). Any ρ gives a valid relaxation; the largest value over
         the workloads' own rates is kept. With q = max(0, π − alt) and v = min(π, alt) − premium,
         V_l = min_{R≥0} |T|ρR − Σ q·C − Σ_p (the R best units v of profile p), a convex
         piecewise-linear function minimised at a breakpoint (bisection on its slope).
    J_k  G's whole cover at k (on demand, spot up to ⌊s_G·d⌋, reserved) and the N at loc k, sharing
         one pool the same way (G's own reservation counted per hour used below ρ, or paying the
         premium above it; the GPUs only a reservation can cover are required of the pool).
    C    N's cap at one location: the spread cap of problem.py, or d + g_max − 1 with no spread
         (some optimal plan never overshoots by a whole instance).

For every π, μ, η ≥ 0, L_k bounds every plan with G at k, and min_k L_k bounds the whole model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuprov.models import Market, Offer, Workload
from gpuprov.optimizer.problem import Held, PlanRequest, effective_price, eligible, gang_site, profiles, spread_cap

INF = math.inf


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
class Duals:
    """The multipliers: per non-gang workload and profile (cover π, spot ceiling μ), per commitment
    (held first, then Savings Plans to buy) and profile (η)."""

    pi: dict[str, list[float]]
    mu: dict[str, list[float]]
    eta: list[list[float]]


@dataclass(frozen=True)
class Covered:
    """An on-demand offer some commitment covers: GPUs, price, and (commitment, ρ) pairs."""

    gpus: int
    price: float
    by: tuple[tuple[int, float], ...]


@dataclass
class Shape:
    """The request, read once: profiles, weights, demands, caps, per-place rates."""

    request: PlanRequest
    offers: list[Offer]
    gang: Workload | None
    others: list[Workload]
    weights: list[float]
    demand: dict[str, list[int]]  # per workload, per profile
    caps: dict[str, list[float]]  # per non-gang workload, per profile
    smallest: dict[str, int]
    commits: list[Held]  # held, then Savings Plans to buy (at level 0)
    active: list[list[bool]]  # per commitment, per profile
    locations: dict[str, dict[str, Rates]] = field(default_factory=dict)  # N's rates per location
    sites: dict[tuple[str, str], Rates] = field(default_factory=dict)  # G's rates per site
    covered: dict[tuple[str, str], list[Covered]] = field(default_factory=dict)  # (place, workload)

    @property
    def hours(self) -> int:
        return self.request.slots

    @property
    def n_profiles(self) -> int:
        return len(self.weights)

    def zero(self) -> Duals:
        z = [0.0] * self.n_profiles
        return Duals({w.name: list(z) for w in self.others}, {w.name: list(z) for w in self.others}, [])


def shape(request: PlanRequest, offers: list[Offer]) -> Shape:
    from gpuprov.optimizer.model import smallest_instance

    gang = next((w for w in request.workloads if w.gang), None)
    others = [w for w in request.workloads if not w.gang]
    P = profiles(request)
    names = [w.name for w in request.workloads]
    demand = {w.name: [prof.demand[names.index(w.name)] for prof in P] for w in request.workloads}
    smallest = {w.name: smallest_instance(offers, w) for w in request.workloads}
    caps: dict[str, list[float]] = {}
    for w in others:
        g_max = max((o.gpus_per_instance for o in offers if eligible(o, w)), default=1)
        caps[w.name] = [
            0.0 if d <= 0 else float(spread_cap(d, w, smallest[w.name]) if w.spread_zones >= 2 else d + g_max - 1)
            for d in demand[w.name]
        ]
    commits = [*request.held, *(opt.held(request.slots, 0) for opt in request.savings_plan_options)]  # type: ignore[arg-type]
    active = [[h.active[prof.slots[0]] for prof in P] for h in commits]
    s = Shape(
        request, offers, gang, others, [float(prof.weight) for prof in P], demand, caps, smallest, commits, active
    )
    by_loc: dict[str, list[Offer]] = {}
    by_site: dict[tuple[str, str], list[Offer]] = {}
    for o in offers:
        if any(eligible(o, w) for w in others):
            by_loc.setdefault(o.location, []).append(o)
        if gang is not None and eligible(o, gang):
            by_site.setdefault(gang_site(o), []).append(o)
    for loc, mine in sorted(by_loc.items()):
        s.locations[loc] = {w.name: rates(mine, w, request) for w in others if any(eligible(o, w) for o in mine)}
    if gang is not None:
        s.sites = {k: rates(v, gang, request) for k, v in sorted(by_site.items())}
    if commits:
        for o in offers:
            by = tuple((h, float(c.rate(o))) for h, c in enumerate(commits) if c.covers(o))
            if not by:
                continue
            for w in request.workloads:
                if eligible(o, w):
                    key = (gang_site(o)[0] if w.gang else o.location, w.name)
                    s.covered.setdefault(key, []).append(Covered(o.gpus_per_instance, float(o.hourly_usd), by))
    return s


def od_costs(s: Shape, place: str, w: str, r: Rates, duals: Duals) -> list[float]:
    """Per profile, the cheapest on-demand GPU of w at ``place`` for its ω_p slots: the offer's
    price, or a commitment's η·ρ where one covers it (relaxed coverage)."""
    base = [wt * r.on_demand for wt in s.weights]
    covered = s.covered.get((place, w))
    if not covered or not duals.eta:
        return base
    out = list(base)
    for c in covered:
        for p, wt in enumerate(s.weights):
            cost = wt * c.price
            for h, rho in c.by:
                if s.active[h][p]:
                    cost = min(cost, duals.eta[h][p] * rho)
            out[p] = min(out[p], cost / c.gpus)
    return out


def _pool(s: Shape, place: str, duals: Duals, rate: float, site: tuple[str, str] | None) -> float:
    """The N workloads at ``place`` (and G at ``site``, whose location it is) sharing one pool of
    reserved GPUs at ``rate``; each reserved GPU goes where it saves most (see the docstring)."""
    P = s.n_profiles
    base = 0.0
    units: list[Units] = [[] for _ in range(P)]
    required = [0.0] * P
    for wn, r in s.locations.get(place, {}).items():
        if r.reserved < rate:
            extra, premium = r.reserved, 0.0
        else:
            extra, premium = INF, (r.reserved - rate if r.reserved < INF else INF)
        odc = od_costs(s, place, wn, r, duals)
        pi, mu = duals.pi[wn], duals.mu[wn]
        for p, cap in enumerate(s.caps[wn]):
            if cap <= 0:
                continue
            wt = s.weights[p]
            alt = min(odc[p], wt * r.spot + mu[p], wt * extra)
            base -= max(0.0, pi[p] - alt) * cap
            v = min(pi[p], alt) - wt * premium
            if v > 0:
                units[p].append((v, cap))
    if site is not None:
        assert s.gang is not None
        g = s.sites[site]
        if g.reserved < rate:
            extra, premium = g.reserved, 0.0
        else:
            extra, premium = INF, (g.reserved - rate if g.reserved < INF else INF)
        odc = od_costs(s, place, s.gang.name, g, duals)
        for p, d in enumerate(s.demand[s.gang.name]):
            if d <= 0:
                continue
            wt = s.weights[p]
            spot_max = math.floor(s.gang.max_spot_fraction * d) if g.spot < INF else 0
            firm = min(odc[p], wt * extra)
            pieces: list[tuple[float, float]] = []
            if firm == INF:  # what spot may not carry only the pool can
                if premium == INF:
                    return INF  # G cannot be covered at this site
                required[p] = float(d - spot_max)
                base += wt * premium * required[p]
                if spot_max:
                    pieces.append((wt * g.spot, float(spot_max)))
            elif wt * g.spot < firm and spot_max > 0:
                pieces += [(firm, float(d - spot_max)), (wt * g.spot, float(spot_max))]
            else:
                pieces.append((firm, float(d)))
            for cost, count in pieces:
                base += cost * count
                if premium < INF and cost > wt * premium:
                    units[p].append((cost - wt * premium, count))
    for u in units:
        u.sort(key=lambda t: -t[0])
    return min_pool(s.hours, rate, base, units, required)


def _rates_at(s: Shape, place: str, site: tuple[str, str] | None) -> list[float]:
    found = {r.reserved for r in s.locations.get(place, {}).values()}
    if site is not None:
        found.add(s.sites[site].reserved)
    finite = sorted(r for r in found if r < INF)
    return finite or [INF]


def V(s: Shape, loc: str, duals: Duals) -> float:
    return max(_pool(s, loc, duals, rate, None) for rate in _rates_at(s, loc, None))


def J(s: Shape, site: tuple[str, str], duals: Duals) -> float:
    """G's whole cover at the site and the N at its location, sharing the site's reservations."""
    return max(_pool(s, site[0], duals, rate, site) for rate in _rates_at(s, site[0], site))


def feasible_eta(s: Shape, duals: Duals) -> Duals:
    """η with Σ_p η_{s,p} ≤ |T| for every Savings Plan to buy (its level's term is then ≥ 0)."""
    held = len(s.request.held)
    eta = [list(e) for e in duals.eta]
    for h in range(held, len(eta)):
        total = sum(eta[h])
        if total > s.hours:
            eta[h] = [e * s.hours / total for e in eta[h]]
    return Duals(duals.pi, duals.mu, eta)


@dataclass
class Bounds:
    """The Lagrangian bound per site, the best over the multiplier sets tried."""

    s: Shape
    best: dict[tuple[str, str] | None, float] = field(default_factory=dict)

    def update(self, duals: Duals) -> None:
        s = self.s
        duals = feasible_eta(s, duals)
        const = 0.0
        for w in s.others:
            for p, d in enumerate(s.demand[w.name]):
                if d > 0:
                    const += duals.pi[w.name][p] * d - duals.mu[w.name][p] * math.floor(w.max_spot_fraction * d)
        for h, c in enumerate(s.request.held):
            cap = float(c.count if c.count is not None else c.usd_per_hour or 0)
            const -= sum(duals.eta[h][p] * cap for p in range(s.n_profiles) if s.active[h][p]) if duals.eta else 0.0
        values = {loc: V(s, loc, duals) for loc in s.locations}
        total = sum(values.values())
        if s.gang is None:
            self.best[None] = max(self.best.get(None, -INF), const + total)
            return
        for site in s.sites:
            lb = const + total - values.get(site[0], 0.0) + J(s, site, duals)
            self.best[site] = max(self.best.get(site, -INF), lb)
