"""The time-varying model: slots, two workloads, shared reservations, spread, budget, overhead."""

from __future__ import annotations

from decimal import Decimal as D

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.errors import InfeasibleError
from gpuprov.models import Cloud, Market, Offer, Plan, Workload
from gpuprov.optimizer.problem import PlanRequest
from gpuprov.optimizer.solve import solve


def off(
    zone: str | None, market: str, gpus: int, price: str, region: str = "r1", cloud: Cloud = Cloud.AWS, itype: str = "p"
) -> Offer:
    return Offer(
        cloud=cloud,
        region=region,
        zone=zone,
        instance_type=f"{itype}{gpus}",
        gpu="A100-80GB",
        gpus_per_instance=gpus,
        gpu_memory_gib=80,
        vcpus=8 * gpus,
        memory_gib=D(100),
        market=Market(market),
        hourly_usd=D(price),
    )


TRAIN = Workload("training", D(0), 8, gang=True)
INFER = Workload("inference", D(0), 1)


def gpus_at(plan: Plan, t: int, workload: str | None = None, market: Market | None = None) -> D:
    n = D(0) + sum(
        a.offer.gpus_per_instance * a.instances_by_slot[t]
        for a in plan.allocations
        if (workload is None or a.workload == workload) and (market is None or a.offer.market is market)
    )
    for r in plan.reservations:
        if market is None or r.offer.market is market:
            if workload is None:
                n += r.offer.gpus_per_instance * r.instances
            else:
                n += r.gpus_used_by_slot.get(workload, (0,) * (t + 1))[t]
    return n


def test_a_reservation_serves_training_by_night_and_inference_by_day() -> None:
    # 8 GPUs needed all day, by training at night (slot 0) and inference by day (slot 1).
    # One reserved 8-GPU node (20/h) covers both; on demand would cost 32/h for either.
    offers = [off("a", "on_demand", 8, "32"), off("a", "reserved_1y", 8, "20")]
    req = PlanRequest(
        gpu="A100-80GB",
        workloads=(TRAIN, Workload("inference", D(0), 8)),
        demand={"training": (8, 0), "inference": (0, 8)},
        offers=offers,
    )
    plan = solve(req)
    assert [(r.instances, r.offer.market) for r in plan.reservations] == [(1, Market.RESERVED_1Y)]
    assert plan.allocations == ()
    assert plan.total_cost_usd == D(40)
    assert plan.reservations[0].gpus_used_by_slot == {"training": (8, 0), "inference": (0, 8)}


def test_reservation_only_pays_when_used_often_enough() -> None:
    # Reserved at 20/h every slot vs on demand at 32/h only in the busy slot: 1 busy slot of 4 -> on demand.
    offers = [off("a", "on_demand", 8, "32"), off("a", "reserved_1y", 8, "20")]
    req = PlanRequest(gpu="A100-80GB", workloads=(TRAIN,), demand={"training": (8, 0, 0, 0)}, offers=offers)
    plan = solve(req)
    assert plan.reservations == () and plan.total_cost_usd == D(32)
    busy = PlanRequest(gpu="A100-80GB", workloads=(TRAIN,), demand={"training": (8, 8, 0, 0)}, offers=offers)
    assert solve(busy).total_cost_usd == D(64)  # 2×32 = 64 < 4×20 = 80
    busier = PlanRequest(gpu="A100-80GB", workloads=(TRAIN,), demand={"training": (8, 8, 8, 0)}, offers=offers)
    assert solve(busier).total_cost_usd == D(80)  # 3×32 = 96 > 80


def test_equal_slots_share_variables_without_changing_the_answer() -> None:
    offers = [
        off("a", "on_demand", 8, "32"),
        off("a", "spot", 8, "12"),
        off("b", "on_demand", 1, "4.5"),
        off("a", "reserved_1y", 8, "21"),
    ]
    wl = (Workload("training", D("0.5"), 8, gang=True), Workload("inference", D("0.25")))
    day = {"training": (16,) * 12 + (32,) * 12, "inference": (9,) * 12 + (3,) * 12}
    plan = solve(PlanRequest(gpu="A100-80GB", workloads=wl, demand=day, offers=offers))
    two = solve(
        PlanRequest(gpu="A100-80GB", workloads=wl, demand={"training": (16, 32), "inference": (9, 3)}, offers=offers)
    )
    # 12 copies of each slot cost 12× the two-slot plan, reservations included
    assert plan.total_cost_usd == 12 * two.total_cost_usd
    assert plan.slot_cost_usd[:12] == (two.slot_cost_usd[0],) * 12


def test_spread_puts_inference_in_k_zones_under_the_per_zone_cap() -> None:
    offers = [off("a", "on_demand", 1, "3"), off("b", "on_demand", 1, "4"), off("c", "on_demand", 1, "5")]
    w = Workload("inference", D(0), 1, spread_zones=2)
    plan = solve(PlanRequest(gpu="A100-80GB", workloads=(w,), demand={"inference": (10,)}, offers=offers))
    by_zone = {a.offer.location: a.instances_by_slot[0] for a in plan.allocations}
    assert by_zone == {"a": 5, "b": 5}
    assert plan.total_cost_usd == D(35)


def test_spread_needs_distinct_zones_even_when_caps_do_not_force_them() -> None:
    # demand 2 over 3 zones of 8-GPU nodes: cap per zone is one node, so 3 zones must each get one
    offers = [off(z, "on_demand", 8, p) for z, p in (("a", "10"), ("b", "11"), ("c", "12"), ("d", "13"))]
    w = Workload("inference", D(0), 8, spread_zones=3)
    plan = solve(PlanRequest(gpu="A100-80GB", workloads=(w,), demand={"inference": (2,)}, offers=offers))
    assert sorted(a.offer.location for a in plan.allocations) == ["a", "b", "c"]


def test_budget_cap_is_kept_or_reported() -> None:
    offers = [off("a", "on_demand", 8, "32"), off("a", "spot", 8, "10")]
    w = Workload("training", D("0.5"), 8)
    ok = solve(
        PlanRequest(gpu="A100-80GB", workloads=(w,), demand={"training": (16,)}, offers=offers, budget_per_hour=D(42))
    )
    assert max(ok.slot_cost_usd) <= D(42)
    with pytest.raises(InfeasibleError, match="budget"):
        solve(
            PlanRequest(
                gpu="A100-80GB", workloads=(w,), demand={"training": (16,)}, offers=offers, budget_per_hour=D(41)
            )
        )


def test_region_cap_moves_capacity_elsewhere() -> None:
    offers = [off("a", "on_demand", 8, "30", region="r1"), off("b", "on_demand", 8, "33", region="r2")]
    w = Workload("training", D(0), 8)
    plan = solve(
        PlanRequest(
            gpu="A100-80GB", workloads=(w,), demand={"training": (32,)}, offers=offers, region_caps={("aws", "r1"): 1}
        )
    )
    assert {a.offer.region: a.instances_by_slot[0] for a in plan.allocations} == {"r1": 1, "r2": 3}


def test_interruption_overhead_can_make_spot_lose() -> None:
    offers = [off("a", "on_demand", 8, "20"), off("a", "spot", 8, "15")]
    w = Workload("training", D(1), 8, lost_hours_per_interruption=D(4))
    cheap = solve(PlanRequest(gpu="A100-80GB", workloads=(w,), demand={"training": (8,)}, offers=offers))
    assert cheap.allocations[0].offer.market is Market.SPOT
    # 10% interruptions an hour × 4 h lost = +40% on spot: 21 > 20, so on demand wins
    risky = solve(
        PlanRequest(
            gpu="A100-80GB",
            workloads=(w,),
            demand={"training": (8,)},
            offers=offers,
            interruptions_per_hour={"aws": D("0.1")},
        )
    )
    assert risky.allocations[0].offer.market is Market.ON_DEMAND
    assert risky.objective_usd == D(20)


def test_highs_gives_the_same_optimum_as_cbc() -> None:
    offers = [
        off("a", "on_demand", 8, "32"),
        off("a", "spot", 8, "10"),
        off("b", "on_demand", 1, "3.9"),
        off("a", "reserved_1y", 8, "21"),
    ]
    wl = (Workload("training", D("0.5"), 8, gang=True), Workload("inference", D("0.25")))
    demand = {"training": (16, 32, 8), "inference": (9, 3, 20)}
    cbc = solve(PlanRequest(gpu="A100-80GB", workloads=wl, demand=demand, offers=offers))
    highs = solve(PlanRequest(gpu="A100-80GB", workloads=wl, demand=demand, offers=offers, solver="highs"))
    assert highs.total_cost_usd == cbc.total_cost_usd
    assert highs.lower_bound_usd <= highs.total_cost_usd


offer_st = st.builds(
    off,
    zone=st.sampled_from(["a", "b", "c"]),
    market=st.sampled_from(["on_demand", "spot", "reserved_1y"]),
    gpus=st.sampled_from([1, 2, 8]),
    price=st.integers(min_value=1, max_value=400).map(lambda c: str(D(c) / 10)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offers=st.lists(offer_st, min_size=1, max_size=7),
    train=st.lists(st.integers(0, 24), min_size=3, max_size=3),
    infer=st.lists(st.integers(0, 12), min_size=3, max_size=3),
    s_train=st.sampled_from(["0", "0.5", "1"]),
    s_infer=st.sampled_from(["0", "0.3"]),
    spread=st.sampled_from([1, 2]),
    gang=st.booleans(),
)
def test_properties_over_slots(
    offers: list[Offer], train: list[int], infer: list[int], s_train: str, s_infer: str, spread: int, gang: bool
) -> None:
    offers += [off(z, "on_demand", 1, "50") for z in ("a", "b")] + [off("a", "on_demand", 8, "400")]
    wl = (Workload("training", D(s_train), None, gang=gang), Workload("inference", D(s_infer), spread_zones=spread))
    req = PlanRequest(
        gpu="A100-80GB", workloads=wl, demand={"training": tuple(train), "inference": tuple(infer)}, offers=offers
    )
    plan = solve(req)
    for t in range(3):
        for w, demand in (("training", train[t]), ("inference", infer[t])):
            assert gpus_at(plan, t, w) >= demand - D("0.01")  # reservations may be split within a slot
            spot = gpus_at(plan, t, w, Market.SPOT)
            assert spot <= D(s_train if w == "training" else s_infer) * demand
        for r in plan.reservations:
            assert sum(v[t] for v in r.gpus_used_by_slot.values()) <= r.instances * r.offer.gpus_per_instance
    held = sum((r.offer.hourly_usd * r.instances for r in plan.reservations), D(0))
    for t in range(3):
        assert plan.slot_cost_usd[t] == held + sum(
            (a.offer.hourly_usd * a.instances_by_slot[t] for a in plan.allocations), D(0)
        )
    assert plan.lower_bound_usd <= (plan.objective_usd or plan.total_cost_usd)
    if gang:
        places = {a.offer.location for a in plan.allocations if a.workload == "training"}
        places |= {r.offer.location for r in plan.reservations if "training" in r.gpus_used_by_slot}
        assert len(places) <= 1
