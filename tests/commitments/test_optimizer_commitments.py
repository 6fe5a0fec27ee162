"""Held commitments and Savings Plans in the MILP, against answers computed independently:
a held reservation that expires mid-horizon, a Compute Savings Plan level chosen against a
varying week, and commitments not worth buying at 50% utilisation (but bought at 75%).

The independent computations are written from the billing rules (problem.py, "Commitments"),
not from the model: covered on-demand instance-hours are free up to what is held in that hour,
a Savings Plan level L costs L every hour and covers usage worth up to L at its rates."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal as D

from gpuprov import plandoc as pd
from gpuprov import planning
from gpuprov.models import Cloud, Market, Offer
from gpuprov.optimizer.problem import SavingsPlanOption
from gpuprov.optimizer.solve import solve

START = datetime(2026, 6, 1, 0, 0, tzinfo=UTC)  # a Monday
DAY = planning.Context(policy=None, timezone="UTC", slot_origin="day", windows=(), max_price_age_hours=D(24))
WEEK = planning.Context(policy=None, timezone="UTC", slot_origin="week", windows=(), max_price_age_hours=D(24))


def p4d(zone: str | None, market: Market, price: str, region: str = "us-east-1") -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region=region,
        zone=zone,
        instance_type="p4d.24xlarge",
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=D(1152),
        market=market,
        hourly_usd=D(price),
    )


def small(market: Market, price: str, itype: str = "g6.xlarge", region: str = "us-east-1") -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region=region,
        zone=f"{region}a",
        instance_type=itype,
        gpu="L4",
        gpus_per_instance=1,
        gpu_memory_gib=24,
        vcpus=4,
        memory_gib=D(16),
        market=market,
        hourly_usd=D(price),
    )


def spec(demand: tuple[int, ...], *, node: int | None, gang: bool, held=(), sp=None) -> pd.RequestSpec:  # type: ignore[no-untyped-def]
    return pd.RequestSpec(
        gpu_names=("A100-40GB", "L4"),
        workloads=(pd.WorkloadSpec("cluster", max_spot_fraction=D(0), node_gpus=node, gang=gang),),
        demand={"cluster": demand},
        held=tuple(held),
        savings_plan_discounts=sp or {},
    )


def held_ri(count: int, ends: datetime, cid: str = "ri-1", zone: str | None = None) -> pd.HeldSpec:
    return pd.HeldSpec(
        id=cid,
        cloud="aws",
        kind="reserved_instance",
        starts=datetime(2026, 1, 1, tzinfo=UTC),
        ends=ends,
        hourly_usd=D("13.92"),
        instance_type="p4d.24xlarge",
        region="us-east-1",
        zone=zone,
        count=count,
        term="1y",
    )


def test_a_held_reservation_that_expires_mid_horizon_counts_until_its_end() -> None:
    offers = [
        p4d("use1-az1", Market.ON_DEMAND, "30"),
        p4d("use1-az2", Market.ON_DEMAND, "31"),
        p4d(None, Market.RESERVED_1Y, "20"),
    ]
    ends = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)  # 10 of the day's 24 hours
    s = spec((64,) * 24, node=8, gang=True, held=[held_ri(4, ends)])
    request = planning.request_for(s, offers, DAY, START)
    assert request.held[0].active == tuple(t < 10 for t in range(24))
    plan = solve(request)

    # independently: k new reservations (any k), the rest on demand at $30 in the cheaper zone;
    # the held 4 cover on-demand instances in the 10 hours they are active
    held_cost = D("13.92") * 4 * 10  # $13.92 per instance-hour, 4 instances, 10 hours

    def cost(k: int) -> D:
        od = 8 - k
        covered = min(4, od)
        return D(20) * k * 24 + D(30) * od * 24 - D(30) * covered * 10 + held_cost

    best = min(cost(k) for k in range(9))
    assert plan.total_cost_usd == best
    assert plan.held_cost_usd == held_cost
    assert plan.held_used["ri-1"] == tuple(D(4) if t < 10 else D(0) for t in range(24))

    # without the held ones the best plan reserves all 8 (k = 8); with them, 4 (k = 4)
    without = solve(planning.request_for(spec((64,) * 24, node=8, gang=True), offers, DAY, START))
    assert without.total_cost_usd == D(20) * 8 * 24
    assert sum(r.instances for r in plan.reservations) == min(range(9), key=cost) == 4
    assert plan.total_cost_usd - held_cost < without.total_cost_usd  # what is held lowers the margin


def test_a_held_zonal_reservation_pulls_the_gang_into_its_zone() -> None:
    offers = [p4d("use1-az1", Market.ON_DEMAND, "30"), p4d("use1-az2", Market.ON_DEMAND, "31")]
    far = datetime(2027, 6, 1, tzinfo=UTC)
    s = spec((32,), node=8, gang=True, held=[held_ri(2, far, zone="use1-az2")])
    plan = solve(planning.request_for(s, offers, planning.flags_context(), START))
    # 4 instances in az2 (2 covered: $62 + held) beat 4 in az1 ($120 + held)
    assert {a.offer.zone for a in plan.allocations} == {"use1-az2"}
    assert plan.total_cost_usd == D(31) * 2 + D("13.92") * 2


def sp_cost(demand: list[int], price: D, share: D, covered: D) -> D:
    """A week billed with a Savings Plan that covers ``covered`` instances' worth every hour."""
    rate = price * (1 - share)
    return sum((rate * covered + price * max(D(0), d - covered) for d in demand), D(0))


def test_a_compute_savings_plan_level_is_chosen_against_a_varying_week() -> None:
    rng = random.Random(7)
    # a diurnal week: 20-40 L4s in working hours, 4-12 at night and on the weekend
    demand = []
    for t in range(168):
        day, hour = divmod(t, 24)
        busy = day < 5 and 8 <= hour < 20
        demand.append(rng.randint(20, 40) if busy else rng.randint(4, 12))
    price, share = D("0.80"), D("0.28")
    offers = [small(Market.ON_DEMAND, "0.80"), small(Market.ON_DEMAND, "0.95", itype="g6.2xlarge")]
    s = spec(tuple(demand), node=None, gang=False, sp={"compute_1y": {"g6": share}})
    s = replace(s, gap=0.0)  # proven optimal, not within the default 0.1%
    request = planning.request_for(s, offers, WEEK, START)
    assert [o.name for o in request.savings_plan_options] == ["compute_1y"]
    plan = solve(request)

    # the bill is piecewise linear and convex in the covered level: its minimum is at 0 or at
    # one of the week's demands; every candidate is tried
    candidates = {D(0), *(D(d) for d in demand)}
    best = min(candidates, key=lambda u: (sp_cost(demand, price, share, u), u))
    best_cost = sp_cost(demand, price, share, best)
    ((opt, level),) = plan.savings_plans
    assert opt.name == "compute_1y"
    rate = price * (1 - share)
    # the level is bought to the cent, rounded up: within a cent an hour of the exact optimum
    assert abs(level - rate * best) <= D("0.01")
    assert abs(plan.total_cost_usd - best_cost) <= D("0.01") * 168
    # and it is not a level where every hour is covered (the week varies): 0 < u < peak
    assert 0 < best < max(demand)


def test_commitments_not_worth_buying_at_half_use_are_not_bought_and_are_at_three_quarters() -> None:
    od = small(Market.ON_DEMAND, "10")
    resv = replace(od, market=Market.RESERVED_1Y, hourly_usd=D(6), zone=None)
    for busy, bought in ((12, False), (18, True)):
        demand = tuple(8 if t < busy else 0 for t in range(24))
        s = spec(demand, node=None, gang=False, sp={"compute_1y": {"*": D("0.40")}})
        plan = solve(planning.request_for(s, [od, resv], DAY, START))
        # break-even of both the reservation ($6 of $10) and the Savings Plan (40% off) is 60%
        expect_bought = busy / 24 > D("0.6")
        assert expect_bought is bought
        assert bool(plan.reservations or plan.savings_plans) is bought
        if bought:
            assert plan.total_cost_usd == D(6) * 8 * 24  # either way $6 a GPU-hour, every hour
        else:
            assert plan.total_cost_usd == D(10) * 8 * busy


def test_savings_plans_cover_on_demand_only_and_a_family_plan_only_its_family_and_region() -> None:
    a = small(Market.ON_DEMAND, "1.00")
    b = small(Market.ON_DEMAND, "1.00", itype="g5.xlarge")
    c = small(Market.ON_DEMAND, "1.00", region="us-west-2")
    spot = small(Market.SPOT, "0.30")
    opt = SavingsPlanOption(
        name="ec2_instance_1y:g6:us-east-1",
        term_hours=8760,
        discounts={"g6.xlarge": D("0.3")},
        family="g6",
        region="us-east-1",
    )
    h = opt.held(1, D(1))
    assert h.covers(a) and not h.covers(b) and not h.covers(c) and not h.covers(spot)


def test_held_commitments_are_paid_in_the_plan_total_and_not_in_its_margin() -> None:
    offers = [p4d("use1-az1", Market.ON_DEMAND, "30")]
    far = datetime(2027, 6, 1, tzinfo=UTC)
    s = spec((128,), node=8, gang=True, held=[held_ri(6, far)])
    req = planning.request_for(s, offers, planning.flags_context(), START)
    solved = planning.run(req)
    doc = planning.document("t1", solved, [], 128, s, planning.flags_context(), START)
    (h,) = doc.commitments.held
    assert h.horizon_usd == D("13.92") * 6 and h.utilization == 1 and h.unused_horizon_usd == 0
    assert doc.costs.total_cost_usd == D(30) * 10 + D("13.92") * 6
    assert doc.costs.marginal_cost_usd == doc.costs.total_cost_usd - h.horizon_usd
    # the request carries the held 6, and with all 10 nodes needed on demand nothing new is bought
    # (markets are all allowed, but no reserved offer is in this catalog)
    assert [h.count for h in req.held] == [6] and not doc.commitments.recommended
