"""Solving by parts with couplings (caps, budget, commitments, Savings Plans, a running fleet, several
workloads) against the whole model solved exactly.

On small random requests the exact optimum (the whole model, gap 0) must lie between the bound
the parts prove (``lagrange.py``: the couplings priced or relaxed) and their plan; both methods
must agree on whether a plan exists; and a request built so that a known plan meets it (its caps
and budget at that plan's own usage) must never be reported infeasible.
"""

from __future__ import annotations

import random
from dataclasses import replace
from decimal import Decimal as D

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.errors import InfeasibleError
from gpuprov.models import Market, Offer, Plan, Workload, WorkloadSite
from gpuprov.optimizer.problem import Held, PlanRequest, SavingsPlanOption
from gpuprov.optimizer.solve import solve
from tests.test_optimizer_decompose import check_rules
from tests.test_optimizer_exact import off

RATE = {"aws": D("0.02")}
COUPLINGS = ("region_cap", "budget", "held", "savings_plan", "fleet", "three", "no_gang")

offer_st = st.builds(
    off,
    zone=st.sampled_from(["a", "b", "c"]),
    market=st.sampled_from(["on_demand", "spot", "reserved_1y"]),
    gpus=st.sampled_from([1, 2, 8]),
    price=st.integers(1, 60),
    gpu=st.sampled_from(["A100-40GB", "A100-80GB"]),
)


def regional(offers: list[Offer]) -> list[Offer]:
    """Zones a and b in region r1, zone c in r2 (so that a region cap binds part of the offers)."""
    return [replace(o, region="r2" if o.zone == "c" else "r1") for o in offers]


def base_request(offers: list[Offer], rng: random.Random, coupling: str) -> PlanRequest:
    slots = 5
    inference = Workload("inference", D("0.3"), lost_hours_per_interruption=D("0.05"))
    training = Workload("training", D("0.5"), 8, gang=coupling != "no_gang", lost_hours_per_interruption=D(1))
    workloads: tuple[Workload, ...] = (training, inference)
    demand = {
        "training": tuple(8 * rng.randint(0, 2) for _ in range(slots)),
        "inference": tuple(rng.randint(0, 14) for _ in range(slots)),
    }
    if coupling == "three":
        workloads = (*workloads, Workload("batch", D("0.8"), lost_hours_per_interruption=D("0.5")))
        demand["batch"] = tuple(rng.randint(0, 6) for _ in range(slots))
    return PlanRequest(
        gpu="A100",
        workloads=workloads,
        demand=demand,
        offers=offers,
        interruptions_per_hour=RATE,
        gap=0.0,
        time_limit_s=30.0,
    )


def couple(req: PlanRequest, coupling: str, rng: random.Random) -> PlanRequest:
    od = [o for o in req.offers if o.market is Market.ON_DEMAND]
    if coupling == "region_cap":
        return replace(req, region_caps={("aws", rng.choice(["r1", "r2"])): rng.randint(0, 4)})
    if coupling == "budget":
        return replace(req, budget_per_hour=D(rng.randint(20, 400)))
    if coupling == "held" and od:
        o = rng.choice(od)
        held = Held(
            id="ri",
            cloud="aws",
            hourly_usd=o.hourly_usd * D("0.6") * 2,
            active=tuple(rng.random() < 0.8 for _ in range(req.slots)),
            count=rng.randint(1, 3),
            instance_type=o.instance_type,
            region=o.region,
        )
        return replace(req, held=(held,))
    if coupling == "savings_plan" and od:
        option = SavingsPlanOption("compute_1y", 8760, {o.instance_type: D("0.3") for o in od})
        return replace(req, savings_plan_options=(option,))
    if coupling == "fleet":
        running = rng.sample(list(req.offers), k=min(3, len(req.offers)))
        incumbent = {
            WorkloadSite(
                o.cloud.value, o.location, o.instance_type, o.market.value, rng.choice(["training", "inference"])
            ): (rng.randint(1, 3))
            for o in running
            if not o.market.is_reserved
        }
        return replace(
            req,
            current_slot=0,
            incumbent=incumbent,
            migration_hours={"training": D(1), "inference": D("0.2")},
        )
    return req


def solved(req: PlanRequest) -> Plan | None:
    try:
        return solve(req)
    except InfeasibleError:
        return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offers=st.lists(offer_st, min_size=2, max_size=9, unique_by=lambda o: o.key),
    seed=st.integers(0, 10_000),
    coupling=st.sampled_from(COUPLINGS),
)
def test_the_exact_optimum_lies_between_the_bound_and_the_plan_by_parts(
    offers: list[Offer], seed: int, coupling: str
) -> None:
    rng = random.Random(seed)
    req = couple(base_request(regional(offers), rng, coupling), coupling, rng)
    exact = solved(replace(req, method="monolithic"))
    parts = solved(replace(req, method="decompose"))
    assert (exact is None) == (parts is None), "one method finds a plan, the other reports infeasible"
    if exact is None or parts is None:
        return
    assert exact.status == "Optimal"
    assert exact.objective_usd is not None and parts.objective_usd is not None and parts.lower_bound_usd is not None
    # Savings Plan levels are bought to the cent, rounded up: two plans of (nearly) one LP cost may
    # differ by that much an hour
    tol = D("0.001") + exact.objective_usd * D("1e-7") + D("0.01") * req.slots * len(req.savings_plan_options)
    assert parts.lower_bound_usd <= exact.objective_usd + tol, "the proven bound cuts off the optimum"
    assert parts.objective_usd >= exact.objective_usd - tol, "a plan cheaper than the optimum breaks a rule"
    if parts.status == "Optimal":
        assert parts.objective_usd <= exact.objective_usd + tol
    check_rules(req, parts)
    _check_couplings(req, parts)


def _check_couplings(req: PlanRequest, plan: Plan) -> None:
    """The caps and the budget, recomputed from the plan alone."""
    for t in range(req.slots):
        spend = sum((a.offer.hourly_usd * a.instances_by_slot[t] for a in plan.allocations), D(0))
        spend += sum((r.offer.hourly_usd * r.instances for r in plan.reservations), D(0))
        if req.budget_per_hour is not None:
            assert spend <= req.budget_per_hour + D("0.000001"), (t, spend)
        for (cloud, region), cap in req.region_caps.items():
            n = sum(
                a.instances_by_slot[t]
                for a in plan.allocations
                if (a.offer.cloud.value, a.offer.region) == (cloud, region)
            )
            n += sum(r.instances for r in plan.reservations if (r.offer.cloud.value, r.offer.region) == (cloud, region))
            assert n <= cap, (t, region, n, cap)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offers=st.lists(offer_st, min_size=3, max_size=9, unique_by=lambda o: o.key),
    seed=st.integers(0, 10_000),
)
def test_a_request_a_known_plan_meets_is_never_reported_infeasible(offers: list[Offer], seed: int) -> None:
    """Caps and a budget set at a plan's own usage: that plan meets them, so a plan exists."""
    rng = random.Random(seed)
    req = base_request(regional(offers), rng, "region_cap")
    known = solved(req)
    if known is None:
        return
    usage: dict[tuple[str, str], int] = {}
    for t in range(req.slots):
        here: dict[tuple[str, str], int] = {}
        for a in known.allocations:
            k = (a.offer.cloud.value, a.offer.region)
            here[k] = here.get(k, 0) + a.instances_by_slot[t]
        for r in known.reservations:
            k = (r.offer.cloud.value, r.offer.region)
            here[k] = here.get(k, 0) + r.instances
        for k, n in here.items():
            usage[k] = max(usage.get(k, 0), n)
    capped = replace(req, region_caps=usage, budget_per_hour=max(known.slot_cost_usd))
    _check_couplings(capped, known)  # the known plan meets the coupled request
    for method in ("decompose", "monolithic", "auto"):
        plan = solve(replace(capped, method=method))  # never InfeasibleError
        assert plan.objective_usd is not None and known.objective_usd is not None
        assert plan.objective_usd <= known.objective_usd + D("0.001")  # gap 0: no worse than the known plan
