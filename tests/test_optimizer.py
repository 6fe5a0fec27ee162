"""The MILP on small hand-built offer sets whose optimum is known, plus properties on random ones."""

from __future__ import annotations

from decimal import Decimal as D

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.errors import InfeasibleError
from gpuprov.models import Cloud, Market, Offer, Plan, Workload
from gpuprov.optimizer import baselines
from gpuprov.optimizer.problem import PlanRequest
from gpuprov.optimizer.reduce import prepare
from gpuprov.optimizer.solve import solve


def off(
    zone: str | None, market: str, gpus: int, price: str, itype: str = "p", region: str = "r1", cloud: Cloud = Cloud.AWS
) -> Offer:
    return Offer(
        cloud=cloud,
        region=region,
        zone=zone,
        instance_type=itype,
        gpu="A100-80GB",
        gpus_per_instance=gpus,
        gpu_memory_gib=80,
        vcpus=8 * gpus,
        memory_gib=D(100),
        market=Market(market),
        hourly_usd=D(price),
    )


def one(
    demand: int, offers: list[Offer], spot: str = "0.5", node: int | None = None, gang: bool = False, **kw: object
) -> Plan:
    w = Workload("cluster", D(spot), node, gang)
    return solve(PlanRequest(gpu="A100-80GB", workloads=(w,), demand={"cluster": (demand,)}, offers=offers, **kw))  # type: ignore[arg-type]


def counts(plan: Plan) -> dict[tuple[str, str, int], int]:
    out = {
        (a.offer.location, a.offer.market.value, a.offer.gpus_per_instance): a.instances_by_slot[0]
        for a in plan.allocations
    }
    out.update(
        {(r.offer.location, r.offer.market.value, r.offer.gpus_per_instance): r.instances for r in plan.reservations}
    )
    return out


def test_spot_ceiling_splits_half_and_half() -> None:
    plan = one(16, [off("a", "on_demand", 8, "30"), off("a", "spot", 8, "10")])
    assert counts(plan) == {("a", "on_demand", 8): 1, ("a", "spot", 8): 1}
    assert plan.total_cost_usd == D(40)
    assert any("spot ceiling" in b for b in plan.binding)


def test_no_spot_when_fraction_is_zero() -> None:
    plan = one(16, [off("a", "on_demand", 8, "30"), off("a", "spot", 8, "10")], spot="0")
    assert counts(plan) == {("a", "on_demand", 8): 2}


def test_gang_chooses_the_cheapest_single_zone() -> None:
    # Without a gang, zone a's spot and zone b's on-demand mix for 10+25 = 35 a node pair;
    # with a gang both halves sit in one zone: a costs 10+32, b costs 20+25.
    offers = [
        off("a", "on_demand", 8, "32"),
        off("a", "spot", 8, "10"),
        off("b", "on_demand", 8, "25"),
        off("b", "spot", 8, "20"),
    ]
    free = one(16, offers)
    assert free.total_cost_usd == D(35)
    gang = one(16, offers, node=8, gang=True)
    assert gang.total_cost_usd == D(42)
    assert {a.offer.location for a in gang.allocations} == {"a"}


def test_reserved_beats_on_demand_and_counts_at_its_hourly_rate() -> None:
    offers = [off("a", "on_demand", 8, "32"), off(None, "reserved_1y", 8, "20"), off("a", "spot", 8, "100")]
    plan = one(16, offers, spot="0")
    assert counts(plan) == {("a", "reserved_1y", 8): 2}
    assert plan.total_cost_usd == D(40)


def test_regional_reservation_joins_a_zone_gang() -> None:
    offers = [off("a", "on_demand", 8, "32"), off("b", "on_demand", 8, "31"), off(None, "reserved_1y", 8, "20")]
    plan = one(16, offers, spot="0", node=8, gang=True)
    assert plan.total_cost_usd == D(40)
    assert plan.reservations[0].offer.zone in {"a", "b"}


def test_node_size_excludes_other_sizes() -> None:
    offers = [off("a", "on_demand", 1, "2"), off("a", "on_demand", 8, "32")]
    assert counts(one(8, offers, spot="0")) == {("a", "on_demand", 1): 8}
    assert counts(one(8, offers, spot="0", node=8)) == {("a", "on_demand", 8): 1}


def test_mixed_sizes_cover_an_odd_demand() -> None:
    # 10 GPUs: one 8-GPU node (24) + two 1-GPU (2×4) = 32 beats two 8-GPU nodes (48) or ten 1-GPU (40).
    offers = [off("a", "on_demand", 8, "24"), off("a", "on_demand", 1, "4")]
    plan = one(10, offers, spot="0")
    assert counts(plan) == {("a", "on_demand", 8): 1, ("a", "on_demand", 1): 2}
    assert plan.total_cost_usd == D(32)
    assert plan.lower_bound_usd <= plan.total_cost_usd


def test_dominated_offers_are_dropped_and_counted() -> None:
    offers = [
        off("a", "on_demand", 8, "32", "x"),
        off("a", "on_demand", 8, "40", "y"),
        off("a", "on_demand", 8, "33", "z"),
    ]
    request = PlanRequest(
        gpu="A100-80GB", workloads=(Workload("cluster", D(0)),), demand={"cluster": (8,)}, offers=offers
    )
    prepared = prepare(request)
    assert [o.instance_type for o in prepared.offers] == ["x"] and prepared.dropped == 2
    assert solve(request).offers_dropped == 2


def test_only_spot_allowed_under_a_ceiling_is_infeasible() -> None:
    with pytest.raises(InfeasibleError, match="only spot offers"):
        one(8, [off("a", "spot", 8, "10")], spot="0.5")


def test_gang_larger_than_any_capped_zone_is_infeasible() -> None:
    offers = [off("a", "on_demand", 8, "32"), off("b", "on_demand", 8, "32")]
    caps = {o.key: 4 for o in offers}
    with pytest.raises(InfeasibleError, match=r"training gang of 64 .* offers 32 under the caps"):
        one(64, offers, spot="0", node=8, gang=True, offer_caps=caps)
    # without the gang the two zones together suffice
    assert one(64, offers, spot="0", node=8, offer_caps=caps).total_cost_usd == D(256)


def test_all_on_demand_baseline_is_the_cheapest_single_location() -> None:
    offers = [
        off("a", "on_demand", 8, "32"),
        off("b", "on_demand", 8, "30"),
        off("b", "on_demand", 1, "4"),
        off("a", "spot", 8, "1"),
    ]
    request = PlanRequest(
        gpu="A100-80GB", workloads=(Workload("cluster", D("0.5")),), demand={"cluster": (10,)}, offers=offers
    )
    got = baselines.all_on_demand(request, offers)
    assert (got.cost, got.where) == (D(38), "b")  # 30 + 2×4; a: 2×32
    assert baselines.min_cover_cost(10_000, [(8, D(24)), (1, D(4))]) == D(30_000)
    assert baselines.min_cover_cost(13, [(8, D(24)), (1, D(4))]) == D(44)


offer_st = st.builds(
    off,
    zone=st.sampled_from(["a", "b", "c"]),
    market=st.sampled_from(["on_demand", "spot", "reserved_1y"]),
    gpus=st.sampled_from([1, 2, 4, 8]),
    price=st.integers(min_value=1, max_value=400).map(lambda c: str(D(c) / 10)),
    itype=st.sampled_from(["p", "q"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offers=st.lists(offer_st, min_size=1, max_size=8),
    demand=st.integers(min_value=1, max_value=40),
    spot=st.sampled_from(["0", "0.3", "0.5", "1"]),
    gang=st.booleans(),
)
def test_properties_demand_met_ceiling_kept_cost_adds_up(
    offers: list[Offer], demand: int, spot: str, gang: bool
) -> None:
    offers.append(off("a", "on_demand", 1, "50"))  # always feasible
    plan = one(demand, offers, spot=spot, gang=gang)
    gpus = sum(a.offer.gpus_per_instance * a.instances_by_slot[0] for a in plan.allocations)
    reserved = sum(r.offer.gpus_per_instance * r.instances for r in plan.reservations)
    assert gpus + reserved >= demand
    spot_gpus = sum(
        a.offer.gpus_per_instance * a.instances_by_slot[0] for a in plan.allocations if a.offer.market is Market.SPOT
    )
    assert spot_gpus <= D(spot) * demand
    cost = sum((a.offer.hourly_usd * a.instances_by_slot[0] for a in plan.allocations), D(0)) + sum(
        (r.offer.hourly_usd * r.instances for r in plan.reservations), D(0)
    )
    assert plan.total_cost_usd == cost
    assert plan.lower_bound_usd <= plan.total_cost_usd
    if gang:
        assert len({a.offer.location for a in plan.allocations} | {r.offer.location for r in plan.reservations}) <= 1


@settings(max_examples=60, deadline=None)
@given(
    demand=st.integers(min_value=0, max_value=400),
    options=st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8, 16]), st.integers(1, 60)), min_size=1, max_size=4),
)
def test_min_cover_cost_matches_a_full_search(demand: int, options: list[tuple[int, int]]) -> None:
    priced = [(g, D(p)) for g, p in options]
    full = [D(0)] * (demand + 1)
    for d in range(1, demand + 1):
        full[d] = min(p + full[max(0, d - g)] for g, p in priced)
    assert baselines.min_cover_cost(demand, priced) == full[demand]


@settings(max_examples=60, deadline=None)
@given(
    demand=st.integers(min_value=0, max_value=120),
    slack=st.integers(0, 20),
    options=st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8, 16]), st.integers(1, 60)), min_size=1, max_size=4),
)
def test_capped_cover_matches_a_full_search(demand: int, slack: int, options: list[tuple[int, int]]) -> None:
    priced = [(g, D(p)) for g, p in options]
    cap = demand + slack
    exact: list[D | None] = [D(0)] + [None] * cap  # least cost of exactly c GPUs
    for c in range(1, cap + 1):
        cands = [p + v for g, p in priced if g <= c and (v := exact[c - g]) is not None]
        exact[c] = min(cands) if cands else None
    found = [(v, c) for c in range(demand, cap + 1) if (v := exact[c]) is not None]
    want = min(found) if found else None
    assert baselines.cover(demand, priced, cap) == (want if demand > 0 else (D(0), 0))


def test_baselines_keep_the_spot_ceiling_gang_and_spread() -> None:
    offers = [
        off("a", "on_demand", 8, "32"),
        off("a", "spot", 8, "8"),
        off("a", "reserved_1y", 8, "20"),
        off("b", "on_demand", 8, "30"),
        off("b", "spot", 8, "2"),
    ]
    gang = Workload("training", D("0.5"), 8, gang=True)
    # reserved base (8 GPUs, the quietest slot) + spot up to half of demand + on demand above, all in one zone
    req = PlanRequest(gpu="A100-80GB", workloads=(gang,), demand={"training": (8, 32)}, offers=offers)
    rps = baselines.reserved_plus_spot(req, offers)
    # zone a: slot 0 = 20; slot 1 = 20 + 2 spot (16 GPUs = ceiling) + 1 on demand = 20 + 16 + 32 = 68
    # zone b has no reservation: the rule cannot be followed there
    assert rps.cost == D(20) + D(68)
    # a spread workload cannot sit on one offer
    spread = Workload("inference", D(0), 8, spread_zones=2)
    req = PlanRequest(gpu="A100-80GB", workloads=(spread,), demand={"inference": (16,)}, offers=offers)
    single = baselines.best_single_offer(req, offers)
    assert single.cost is None and single.reason and "spread" in single.reason
    aod = baselines.all_on_demand(req, offers)
    assert aod.cost == D(62) and aod.where is not None and "a" in aod.where and "b" in aod.where  # 8 in a, 8 in b
    # no reserved market: the rule is not available, and says why
    flex = [o for o in offers if not o.market.is_reserved]
    assert baselines.reserved_plus_spot(req, flex).reason == "no reserved offer in the request's markets"


def test_cbc_bound_takes_the_best_proven_line() -> None:
    from gpuprov.optimizer.cbc import cbc_bound

    root_only = (
        "Continuous objective value is 87.9234 - 0.00 seconds\n"
        "Cuts at root node changed objective from 142.416 to -1.79769e+308\n"
        "Result - Optimal solution found\n\nObjective value:                142.41600000\n"
    )
    assert cbc_bound(root_only, 0.001) == pytest.approx(142.416 * 0.999)
    assert cbc_bound(root_only, 0.0) == pytest.approx(142.416)
    searched = (
        "Continuous objective value is 10\nCbc0010I After 100 nodes, 3 on tree, 12.5 best solution, "
        "best possible 12.4 (0.1 seconds)\nResult - Stopped on time limit\nObjective value: 12.5\n"
        "Lower bound: 12.45\n"
    )
    assert cbc_bound(searched, 0.001) == pytest.approx(12.45)
    assert cbc_bound("nothing useful") is None
