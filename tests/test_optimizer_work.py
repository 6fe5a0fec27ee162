"""Demand in work units: the optimizer covers tokens a second with instances of several GPU types at
their throughput (a per-workload, per-offer coefficient in the cover and spot rows). Checked
against a brute force written from the problem statement: per slot, every count of every offer,
an instance of g GPUs doing ⌊g/t⌋ replicas of its type's best tensor-parallel size t."""

from __future__ import annotations

import math
from dataclasses import replace
from decimal import Decimal as D

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.errors import InfeasibleError
from gpuprov.models import Cloud, Market, Offer, ReplicaRate, Workload
from gpuprov.optimizer import decompose
from gpuprov.optimizer.problem import PlanRequest, eligible, work
from gpuprov.optimizer.solve import solve

NO_INTERRUPTIONS = {"aws": D(0)}


def off(zone: str, market: str, gpu: str, gpus: int, price: str) -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region="r1",
        zone=zone,
        instance_type=f"{gpu.lower()}x{gpus}",
        gpu=gpu,
        gpus_per_instance=gpus,
        gpu_memory_gib=80,
        vcpus=8,
        memory_gib=D(64),
        market=Market(market),
        hourly_usd=D(price),
    )


RATES = (
    ReplicaRate("H100", 1, D("900")),
    ReplicaRate("H100", 2, D("3000")),  # 1,500 a GPU at TP 2: an 8-GPU node does 4 × 3,000
    ReplicaRate("L40S", 4, D("1900")),  # a 1-GPU L40S holds no replica
)
OFFERS = [
    off("z1", "on_demand", "H100", 8, "80"),
    off("z1", "on_demand", "H100", 1, "11"),
    off("z1", "spot", "H100", 1, "4"),
    off("z1", "on_demand", "L40S", 4, "14"),
    off("z2", "on_demand", "L40S", 4, "13"),
    off("z2", "spot", "L40S", 4, "6"),
    off("z2", "on_demand", "L40S", 1, "2"),
    off("z1", "on_demand", "A100-80GB", 8, "30"),  # no rate for A100: never used
]


def workload(**kw: object) -> Workload:
    base = Workload(name="inference", max_spot_fraction=D("0.3"), unit="tokens_per_s", replicas=RATES)
    return replace(base, **kw)  # type: ignore[arg-type]


def by_hand(o: Offer) -> D:
    """An instance's tokens a second, counted from RATES apart from problem.work."""
    best = D(0)
    for r in RATES:
        if r.gpu == o.gpu and r.tensor_parallel <= o.gpus_per_instance:
            best = max(best, (o.gpus_per_instance // r.tensor_parallel) * r.work_per_s)
    return best


def brute(offers: list[Offer], w: Workload, demand: list[int]) -> D | None:
    """Per slot, every count of every usable offer (a branch stops once it costs more than the
    best complete one found: the same optimum, sooner)."""
    usable = sorted((o for o in offers if by_hand(o) > 0), key=lambda o: o.hourly_usd / by_hand(o))
    total = D(0)
    for d in demand:
        best = _best_slot(usable, w, d, 0, [], D(0), None)
        if best is None:
            return None
        total += best
    return total


def _feasible(usable: list[Offer], w: Workload, d: int, xs: list[int]) -> bool:
    got = sum(n * by_hand(o) for n, o in zip(xs, usable, strict=True))
    spot = sum(n * by_hand(o) for n, o in zip(xs, usable, strict=True) if o.market is Market.SPOT)
    if got < d or spot > math.floor(w.max_spot_fraction * d):
        return False
    if w.spread_zones >= 2:  # at most ⌈⌈D/k⌉ / least⌉·least in a zone, k zones used
        least = min(by_hand(o) for o in usable)
        cap = math.ceil(math.ceil(d / w.spread_zones) / least) * least
        here: dict[str, D] = {}
        for n, o in zip(xs, usable, strict=True):
            here[o.location] = here.get(o.location, D(0)) + n * by_hand(o)
        if any(v > cap for v in here.values()) or sum(1 for v in here.values() if v > 0) < w.spread_zones:
            return False
    return True


def _best_slot(usable: list[Offer], w: Workload, d: int, i: int, xs: list[int], cost: D, best: D | None) -> D | None:
    if best is not None and cost >= best:
        return best
    if i == len(usable):
        return cost if _feasible(usable, w, d, xs) else best
    o = usable[i]
    for n in range(math.ceil(d / by_hand(o)) + 1):
        best = _best_slot(usable, w, d, i + 1, [*xs, n], cost + n * o.hourly_usd, best)
    return best


def request(w: Workload, demand: list[int], offers: list[Offer] = OFFERS) -> PlanRequest:
    return PlanRequest(
        gpu="H100/L40S/A100-80GB",
        workloads=(w,),
        demand={w.name: tuple(demand)},
        offers=offers,
        interruptions_per_hour=NO_INTERRUPTIONS,
        gap=0.0,
    )


def test_the_work_coefficient_is_replicas_inside_one_instance() -> None:
    w = workload()
    assert [work(o, w) for o in OFFERS] == [by_hand(o) for o in OFFERS]
    assert work(OFFERS[0], w) == D(12000) and work(OFFERS[1], w) == D(900) and work(OFFERS[6], w) == 0
    assert not eligible(OFFERS[6], w) and not eligible(OFFERS[7], w)  # no replica fits; no rate
    gpu_demand = Workload(name="cluster")
    assert work(OFFERS[0], gpu_demand) == D(8) and eligible(OFFERS[7], gpu_demand)


@pytest.mark.parametrize("demand", [[5000, 1200], [13000, 900], [2000, 2000, 7600]])
def test_the_plan_is_the_brute_force_optimum(demand: list[int]) -> None:
    w = workload()
    plan = solve(request(w, demand))
    assert plan.total_cost_usd == brute(OFFERS, w, demand)
    for t, d in enumerate(demand):  # the work asked is covered, spot within the ceiling on work
        got = sum(by_hand(a.offer) * a.instances_by_slot[t] for a in plan.allocations)
        spot = sum(by_hand(a.offer) * a.instances_by_slot[t] for a in plan.allocations if a.offer.market is Market.SPOT)
        assert got >= d and spot <= D("0.3") * d


def test_spread_counts_work_per_location() -> None:
    w = workload(spread_zones=2, max_spot_fraction=D("0.5"))
    offers = [*OFFERS, off("z2", "on_demand", "H100", 1, "12"), off("z2", "on_demand", "H100", 8, "85")]
    demand = [6000, 2500]  # at most ⌈⌈D/2⌉ / 900⌉·900 tokens/s in either zone
    plan = solve(request(w, demand, offers))
    assert plan.total_cost_usd == brute(offers, w, demand)
    assert len({a.offer.location for a in plan.allocations if a.instances_by_slot[0]}) == 2


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=9000), min_size=1, max_size=3))
def test_random_demands_agree_with_the_brute_force(demand: list[int]) -> None:
    w = workload()
    expected = brute(OFFERS, w, demand)
    if expected is None:
        with pytest.raises(InfeasibleError):
            solve(request(w, demand))
        return
    assert solve(request(w, demand)).total_cost_usd == expected


def test_reserved_capacity_serves_work_in_whole_instances() -> None:
    w = workload(max_spot_fraction=D(0))
    reserved = off("z1", "reserved_1y", "L40S", 4, "7")
    plan = solve(request(w, [3800, 3800], [*OFFERS, reserved]))
    [r] = plan.reservations
    assert r.instances == 2 and r.gpus_used_by_slot == {"inference": (8, 8)}  # 2 × 1,900 on 4 GPUs each
    assert plan.total_cost_usd == D(7) * 2 * 2


def test_a_gang_sits_on_one_type_in_one_zone() -> None:
    w = workload(gang=True, max_spot_fraction=D(0))
    plan = solve(request(w, [12000, 3000]))
    assert len({(a.offer.location, a.offer.gpu) for a in plan.allocations}) == 1


def test_work_requests_are_never_solved_by_parts() -> None:
    w = workload()
    req = replace(request(w, [100 * (t + 1) for t in range(30)]), method="decompose")
    assert not decompose.applicable(req)
    plan = solve(req)  # the whole model, not the parts (whose bounds count GPUs)
    assert not any("by parts" in n for n in plan.notes)


def test_no_rate_for_any_offer_is_infeasible_by_name() -> None:
    w = workload(replicas=(ReplicaRate("B200", 1, D(100)),))
    with pytest.raises(InfeasibleError, match="no offer"):
        solve(request(w, [1000]))
