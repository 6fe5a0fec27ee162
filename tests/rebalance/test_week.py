"""A simulated week against moto: prices move, spot instances are reclaimed, the schedule turns
twice a day. The rebalancer must meet demand every hour, keep to its disruption budget, not
thrash, and end within 5% of the hindsight-optimal cost."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from gpuprov import planning, rebalance
from gpuprov.models import Cloud
from gpuprov.plandoc import PlanDocument
from gpuprov.store.lease import Leases
from gpuprov.store.plans import PlanStore
from gpuprov.store.state import FleetStore, StateStore
from policies import constraints, loader
from provisioner.drivers.aws import AwsDriver
from tests.rebalance.sim import T0, FakeClock, PriceFeed

HOURS = 168
OWNER = "sim-fleet"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def initial_plan(feed: PriceFeed, clock: FakeClock) -> PlanDocument:
    pol = constraints.apply(loader.load("day-night"), constraints.Overrides(gpus=32, gpu="a100-40gb"))
    pol = constraints.apply(pol, constraints.Overrides(markets=("on_demand", "spot")))
    spec = planning.policy_spec(pol, ["A100-40GB"], "cbc", 0.001, 60.0)
    context = planning.policy_context(pol)
    solved = planning.run(planning.request_from_spec(spec, feed.offers))
    snaps = feed.snapshot(clock.now())
    return planning.document(planning.plan_id(spec, snaps, context), solved, snaps, 32, spec, context, clock.now())


def hindsight_hour(feed: PriceFeed, doc: PlanDocument, slot: int) -> Decimal:
    """The cheapest way to hold this hour's demand at this hour's prices, knowing everything."""
    spec = replace(doc.request, demand={w: (v[slot],) for w, v in doc.request.demand.items()})
    return planning.run(planning.request_from_spec(spec, feed.offers)).plan.total_cost_usd


def test_a_week_of_rebalancing(aws: None, _isolated_db: str) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    regions = ["us-east-1", "us-east-2", "us-west-2"]
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    driver = AwsDriver(regions, image=ami, sleep=lambda _s: None)
    for region in regions:  # moto does not implement placement groups: accept them
        driver.client(region).meta.events.register(
            "before-call.ec2.DescribePlacementGroups",  # none yet: the driver creates it
            lambda **_: (AWSResponse("https://x", 200, {}, None), {"PlacementGroups": []}),
        )
        driver.client(region).meta.events.register(
            "before-call.ec2.CreatePlacementGroup",
            lambda **_: (AWSResponse("https://x", 200, {}, None), {"PlacementGroup": {}}),
        )
    feed, clock = PriceFeed(), FakeClock()
    plans = PlanStore(_isolated_db)
    first = initial_plan(feed, clock)
    plans.save(first)
    world = rebalance.World(
        drivers={Cloud.AWS: driver},
        offers=lambda _names: list(feed.offers),
        snapshots=lambda: feed.snapshot(clock.now()),
        refresh=None,
        plans=plans,
        state=StateStore(_isolated_db),
        fleets=FleetStore(_isolated_db),
        leases=Leases(_isolated_db),
    )
    settings = rebalance.Settings(
        owner=OWNER,
        holder="sim",
        disruption_share=Decimal("0.25"),
        hysteresis=timedelta(hours=2),
        lead=timedelta(minutes=0),
    )
    fleet_cost, best_cost = Decimal(0), Decimal(0)
    terminated_at: dict[tuple[str, str], list[int]] = defaultdict(list)
    reversals, adoptions, gang_moves = [], [], []
    interrupted = 0
    for hour in range(HOURS):
        clock.at = T0 + timedelta(hours=hour)
        feed.at_hour(hour)
        if hour % 24 == 2:  # nightly, the cloud reclaims a spot instance (if we run one)
            spot = [h for h in driver.describe(OWNER) if h.market.value == "spot"]
            if spot:
                ec2_region = boto3.client("ec2", region_name=spot[0].region)
                ec2_region.terminate_instances(InstanceIds=[spot[0].instance_id.split("/")[1]])
                interrupted += 1
        before = {h.instance_id: h for h in driver.describe(OWNER)}
        rec = rebalance.run_pass(world, settings, clock, initial_plan=first.plan_id)
        after = driver.describe(OWNER)
        ended = [h for i, h in before.items() if i not in {a.instance_id for a in after}]
        started = [h for h in after if h.instance_id not in before]
        if rec.decision == "adopt":
            adoptions.append(hour)
        # disruption: replaced instances per workload never exceed the budget
        by_w: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for h in started:
            by_w[h.workload][0] += 1
        for h in ended:
            by_w[h.workload][1] += 1
        running = defaultdict(int)
        for h in before.values():
            running[h.workload] += 1
        for w, (up, down) in by_w.items():
            if w == "training":  # a gang moves whole: every node it had ends, in one zone
                if min(up, down):
                    gang_moves.append(hour)
                continue
            assert min(up, down) <= max(1, math.ceil(Decimal("0.25") * running[w])), (hour, w, up, down)
        # thrash: no pool we emptied is filled again within the hysteresis window
        for h in started:
            key = (h.zone or h.region, h.market.value)
            if any(hour - t < 2 for t in terminated_at[key]):
                reversals.append((hour, key))
        for h in ended:
            terminated_at[(h.zone or h.region, h.market.value)].append(hour)
        # demand met this hour, training in one zone
        doc = plans.get(rec.plan_after or first.plan_id)
        slot = planning.slot_at(doc, clock.now())
        held: dict[str, int] = defaultdict(int)
        for h in after:
            held[h.workload] += 8
        for w, demand in doc.demand.items():
            assert held[w] >= demand[slot], (hour, w, held[w], demand[slot])
        assert len({h.zone for h in after if h.workload == "training"}) <= 1
        fleet_cost += sum((feed.price(h.zone or "", h.instance_type, h.market.value) for h in after), Decimal(0))
        best_cost += hindsight_hour(feed, doc, slot)
    print(
        f"\nweek: fleet ${fleet_cost:.2f}, hindsight ${best_cost:.2f} "
        f"({(fleet_cost / best_cost - 1):.2%} above), adoptions at hours {adoptions}, "
        f"gang moves {gang_moves}, spot reclaimed {interrupted}"
    )
    assert interrupted >= 3
    assert len(gang_moves) <= len(adoptions)
    assert reversals == []
    assert 1 <= len(adoptions) <= 8, adoptions
    assert all(b - a >= 2 for a, b in itertools.pairwise(adoptions))
    assert fleet_cost <= best_cost * Decimal("1.05"), (fleet_cost, best_cost, feed.log, adoptions)
    history = FleetStore(_isolated_db).history(OWNER, limit=500)
    assert len(history) == HOURS and {r.decision for r in history} <= {"keep", "adopt"}
