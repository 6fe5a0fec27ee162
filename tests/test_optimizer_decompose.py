"""Solving by parts (``decompose.py``) against the whole model solved exactly.

The bound it proves must hold for the whole model: on small random requests the exact optimum
(CBC on the whole model, gap 0) lies between the decomposition's proven lower bound and its plan.
Its closed-form location values are checked against CBC's LP of the same relaxation, and its
plans against the rules of the request, recomputed here from the plan alone.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from decimal import Decimal as D

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.errors import InfeasibleError
from gpuprov.models import Market, Offer, Plan, Workload
from gpuprov.optimizer import decompose, lagrange
from gpuprov.optimizer.clock import Clock
from gpuprov.optimizer.problem import PlanRequest, gang_site, spread_cap
from gpuprov.optimizer.reduce import prepare
from gpuprov.optimizer.solve import solve
from tests.test_optimizer_exact import off

RATE = {"aws": D("0.02")}


offer_st = st.builds(
    off,
    zone=st.sampled_from(["a", "b", "c"]),
    market=st.sampled_from(["on_demand", "spot", "reserved_1y", "reserved_3y"]),
    gpus=st.sampled_from([1, 2, 8]),
    price=st.integers(1, 60),
    gpu=st.sampled_from(["A100-40GB", "A100-80GB"]),
)


def workloads(spread: int, gang: bool) -> tuple[Workload, ...]:
    inference = Workload("inference", D("0.3"), spread_zones=spread, lost_hours_per_interruption=D("0.05"))
    if not gang:
        return (inference,)
    return (Workload("training", D("0.5"), 8, gang=True, lost_hours_per_interruption=D(1)), inference)


def check_rules(req: PlanRequest, plan: Plan) -> None:
    """The plan obeys the request: cover, spot ceiling, spread caps and location count, one gang
    site, reserved use within whole reservations, recomputed from the plan alone."""
    small = min(o.gpus_per_instance for o in req.offers if o.gpu_fraction is None)
    for w in req.workloads:
        allocs = [a for a in plan.allocations if a.workload == w.name]
        resv = [(r, r.gpus_used_by_slot.get(w.name)) for r in plan.reservations]
        resv = [(r, u) for r, u in resv if u is not None]
        for t, d in enumerate(req.demand[w.name]):
            at: dict[str, int] = {}
            gpus = spot = 0
            for a in allocs:
                n = a.instances_by_slot[t] * a.offer.gpus_per_instance
                gpus += n
                spot += n if a.offer.market is Market.SPOT else 0
                at[a.offer.location] = at.get(a.offer.location, 0) + n
            for r, used in resv:
                gpus += used[t]
                at[r.offer.location] = at.get(r.offer.location, 0) + used[t]
            assert gpus >= d, (w.name, t, gpus, d)
            assert spot <= w.max_spot_fraction * d
            if w.spread_zones >= 2 and d > 0:
                cap = spread_cap(d, w, small)
                assert max(at.values()) <= cap, (w.name, t, at, cap)
                assert sum(1 for v in at.values() if v > 0) >= w.spread_zones
        if w.gang:
            sites = {gang_site(a.offer) for a in allocs} | {gang_site(r.offer) for r, u in resv if any(u)}
            assert len(sites) <= 1
    for r in plan.reservations:
        for t in range(req.slots):
            assert sum(u[t] for u in r.gpus_used_by_slot.values()) <= r.instances * r.offer.gpus_per_instance


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offers=st.lists(offer_st, min_size=2, max_size=10, unique_by=lambda o: o.key),
    seed=st.integers(0, 10_000),
    spread=st.sampled_from([1, 2]),
    gang=st.booleans(),
)
def test_the_exact_optimum_lies_between_the_proven_bound_and_the_plan(
    offers: list[Offer], seed: int, spread: int, gang: bool
) -> None:
    rng = random.Random(seed)
    slots = 6
    demand = {"inference": tuple(rng.randint(0, 20) for _ in range(slots))}
    if gang:
        demand["training"] = tuple(8 * rng.randint(0, 3) for _ in range(slots))
    req = PlanRequest(
        gpu="A100",
        workloads=workloads(spread, gang),
        demand=demand,
        offers=offers,
        interruptions_per_hour=RATE,
        gap=0.0,
        time_limit_s=30.0,
    )
    try:
        exact = solve(replace(req, method="monolithic"))
    except InfeasibleError:
        exact = None
    try:
        parts = solve(replace(req, method="decompose"))
    except InfeasibleError:
        parts = None
    assert (exact is None) == (parts is None)
    if exact is None or parts is None:
        return
    assert exact.objective_usd is not None and parts.objective_usd is not None
    tol = D("0.001") + exact.objective_usd * D("1e-7")
    assert parts.lower_bound_usd is not None
    assert parts.lower_bound_usd <= exact.objective_usd + tol, "the proven bound cuts off the optimum"
    assert parts.objective_usd >= exact.objective_usd - tol, "a plan cheaper than the optimum breaks a rule"
    if parts.status == "Optimal":
        assert parts.objective_usd <= exact.objective_usd + tol
    check_rules(req, parts)


def week(peak: int, seed: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rng = random.Random(seed)
    train, infer = [], []
    for t in range(48):
        level = 0.55 + 0.35 * math.sin((t % 24 - 8) / 24 * 2 * math.pi) + rng.uniform(-0.08, 0.08)
        total = max(8, round(peak * level))
        i = max(1, round(total * 0.3 + rng.uniform(-3, 3)))
        infer.append(i)
        train.append(((total - i) // 8) * 8)
    return tuple(train), tuple(infer)


def many_places() -> list[Offer]:
    rng = random.Random(3)
    offers = []
    for zone in "abcdefgh":
        for gpu in ("A100-40GB", "A100-80GB"):
            base = rng.randint(20, 40)
            offers += [
                off(zone, "on_demand", 8, base * 8, gpu),
                off(zone, "on_demand", 1, base + rng.randint(0, 4), gpu),
                off(zone, "spot", 8, base * 3 + rng.randint(0, 20), gpu),
                off(zone, "spot", 1, base // 2 + rng.randint(0, 6), gpu),
                off(zone, "reserved_1y", 8, base * 5 + rng.randint(0, 30), gpu),
                off(zone, "reserved_3y", 1, base // 2 + rng.randint(1, 8), gpu),
            ]
    return offers


@pytest.mark.parametrize("seed", [1, 2])
def test_closed_form_bound_equals_cbc_lp_of_the_same_relaxation(seed: int) -> None:
    """At the end of column generation the Lagrangian bound of the priced site is the LP relaxation
    of the whole model with the gang at that site (every location, location-count rows dropped):
    computed once from closed forms and duals, once by CBC on the whole LP."""
    import pulp

    train, infer = week(160, seed)
    req = PlanRequest(
        gpu="A100",
        workloads=workloads(2, True),
        demand={"training": train, "inference": infer},
        offers=many_places(),
        interruptions_per_hour=RATE,
        gap=0.005,
    )
    prepared = prepare(req)
    s = lagrange.shape(req, prepared.offers)
    bounds = lagrange.Bounds(s)
    site = min(s.sites)
    got = decompose.price(s, site, frozenset(list(s.locations)[:2]), bounds, Clock.after(60))
    assert got is not None
    model = decompose._model(s, site, frozenset(s.locations), relaxed=True)
    for v in model.prob.variables():
        v.cat = pulp.LpContinuous
    model.prob.solve(pulp.PULP_CBC_CMD(msg=False))
    lp = float(model.prob.objective.value())
    assert bounds.best[site] <= lp * (1 + 1e-7) + 1e-6, "the bound exceeds the LP it relaxes"
    assert bounds.best[site] >= lp * (1 - 1e-6) - 1e-6, "column generation stopped short of the LP"


def pool_at(
    r: float, hours: int, rate: float, base: float, units: list[list[tuple[float, float]]], required: list[float]
) -> float:
    """The function min_pool minimises, at one reservation level, written out directly."""
    total = hours * rate * r + base
    for u, need in zip(units, required, strict=True):
        left = r - need
        for value, count in u:
            take = max(0.0, min(left, count))
            total -= value * take
            left -= take
    return total


def test_min_pool_is_the_minimum_over_every_reservation_level() -> None:
    rng = random.Random(5)
    for _ in range(200):
        profiles = rng.randint(1, 6)
        units = []
        for _p in range(profiles):
            u = sorted(((rng.uniform(0, 10), float(rng.randint(1, 5))) for _ in range(rng.randint(0, 3))), reverse=True)
            units.append(u)
        required = [float(rng.choice([0, 0, 1, 3])) for _ in range(profiles)]
        hours, rate, base = rng.randint(1, 10), rng.uniform(0.1, 3), rng.uniform(-5, 5)

        grid = [max(required) + k / 4 for k in range(0, 4 * 40)]
        want = min(pool_at(r, hours, rate, base, units, required) for r in grid)
        got = lagrange.min_pool(hours, rate, base, units, required)
        assert abs(got - want) < 1e-9, (got, want)


def test_a_week_that_never_repeats_is_solved_by_parts_within_the_gap() -> None:
    train, infer = week(400, 11)
    req = PlanRequest(
        gpu="A100",
        workloads=workloads(2, True),
        demand={"training": train, "inference": infer},
        offers=many_places(),
        interruptions_per_hour=RATE,
        gap=0.01,
    )
    parts = solve(replace(req, method="decompose"))
    assert any(n.startswith("solved by parts") for n in parts.notes)
    assert parts.objective_usd is not None and parts.lower_bound_usd is not None
    proven = (parts.objective_usd - parts.lower_bound_usd) / parts.objective_usd
    if parts.status == "Optimal":
        assert proven <= D("0.01")
    check_rules(req, parts)
    # the whole model solved at once (CBC may stop at its time limit: compare like with like)
    whole = solve(replace(req, method="monolithic", gap=0.005, time_limit_s=60))
    assert whole.objective_usd is not None and whole.lower_bound_usd is not None
    assert parts.lower_bound_usd <= whole.objective_usd + D("0.001"), "the bound cuts off a feasible plan"
    assert parts.objective_usd >= whole.lower_bound_usd - D("0.001"), "the plan beats a proven bound"


def test_small_requests_are_also_solved_whole_when_the_parts_prove_too_little() -> None:
    """A request of few profiles: the parts first; the whole model too when they do not prove the
    gap; the plan is the better of the two and the bound the better of the two."""
    req = PlanRequest(
        gpu="A100",
        workloads=workloads(2, True),
        demand={"training": (8, 16), "inference": (3, 5)},
        offers=many_places(),
        interruptions_per_hour=RATE,
        gap=0.0,
    )
    offers = prepare(req).offers
    assert decompose.applicable(req) and not decompose.large(req, offers)
    assert decompose.large(replace(req, method="decompose"), offers)
    parts = solve(replace(req, method="decompose"))
    whole = solve(replace(req, method="monolithic"))
    both = solve(req)
    assert whole.status == "Optimal" and both.status == "Optimal"
    assert both.objective_usd == min(parts.objective_usd or 0, whole.objective_usd or 0)
    assert parts.lower_bound_usd is not None and both.lower_bound_usd is not None
    assert parts.lower_bound_usd <= both.lower_bound_usd <= (both.objective_usd or 0)
