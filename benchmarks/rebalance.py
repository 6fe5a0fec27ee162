#!/usr/bin/env python3
"""Wall time of one rebalancing pass over a fleet of 10,000 instances against moto's EC2.

    python benchmarks/rebalance.py [--instances 10000]

The fleet (g5.xlarge, 1 GPU each, on demand and spot in four us-east-1 zones) runs the plan
already; between the plan and the pass one zone's spot price rises 5%, so the pass
re-prices, re-solves with the fleet as an option, weighs the saving against its thresholds
and keeps (a migration's launches cost what benchmarks/apply.py measures per launch).
Prints the time of each step and peak RSS.

    python benchmarks/rebalance.py --migrate

Every price of the zone that runs the most instances rises 10% instead: the pass adopts a new
plan and migrates as many instances as its disruption budget allows (25% of the workload's
running instances: 2,500 of 10,000), each launch and each termination journalled before its
call. Target: <= 30 s for the pass.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ[key] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
os.environ.pop("AWS_ENDPOINT_URL", None)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from gpuprov import planning, rebalance  # noqa: E402
from gpuprov.models import Cloud, Market, Offer, SnapshotInfo, Workload  # noqa: E402
from gpuprov.store.lease import Leases  # noqa: E402
from gpuprov.store.plans import PlanStore  # noqa: E402
from gpuprov.store.state import FleetStore, StateStore  # noqa: E402
from provisioner.drivers.aws import AwsDriver  # noqa: E402

ZONES = {
    "use1-az1": ("0.52", "1.006"),
    "use1-az2": ("0.55", "1.006"),
    "use1-az4": ("0.49", "1.006"),
    "use1-az6": ("0.58", "1.006"),
}  # spot, on-demand: g5.xlarge prices of the bundled catalog's shape


def offers() -> list[Offer]:
    out = []
    for zone, (spot, od) in ZONES.items():
        for market, price in ((Market.SPOT, spot), (Market.ON_DEMAND, od)):
            out.append(
                Offer(
                    cloud=Cloud.AWS,
                    region="us-east-1",
                    zone=zone,
                    instance_type="g5.xlarge",
                    gpu="A10G",
                    gpus_per_instance=1,
                    gpu_memory_gib=24,
                    vcpus=4,
                    memory_gib=Decimal(16),
                    market=market,
                    hourly_usd=Decimal(price),
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--migrate", action="store_true", help="raise the busiest zone 10%%: the pass migrates")
    args = parser.parse_args()
    feed = offers()
    now = datetime(2026, 6, 1, 12, tzinfo=UTC)
    snaps = [SnapshotInfo(1, "bench", Cloud.AWS, now, len(feed), True)]
    workload = Workload("inference", Decimal("0.3"))
    spec = planning.flags_spec(["A10G"], args.instances, workload, None, None, None, "cbc", 0.001, 60.0)
    context = planning.flags_context()
    solved = planning.run(planning.request_from_spec(spec, feed))
    doc = planning.document(planning.plan_id(spec, snaps, context), solved, snaps, args.instances, spec, context, now)
    with tempfile.TemporaryDirectory() as tmp, mock_aws():
        url = f"sqlite:///{tmp}/bench.db"
        plans = PlanStore(url)
        plans.save(doc)
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        driver = AwsDriver(["us-east-1"], image=ami)
        names = {z["ZoneId"]: z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
        t0 = time.perf_counter()
        for a in doc.placements():
            left = a.instances
            tags = [
                {"Key": k, "Value": v}
                for k, v in {
                    "gpuprov-owner": "bench",
                    "gpuprov-plan": doc.plan_id,
                    "gpuprov-token": f"seed-{a.zone}",
                    "gpuprov-workload": a.workload,
                    "gpuprov-market": a.market,
                }.items()
            ]
            while left:
                n = min(1000, left)
                ec2.run_instances(
                    ImageId=ami,
                    InstanceType="g5.xlarge",
                    MinCount=n,
                    MaxCount=n,
                    Placement={"AvailabilityZone": names[a.zone or ""]},
                    TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
                )
                left -= n
        t1 = time.perf_counter()
        if args.migrate:
            by_zone: dict[str, int] = {}
            for a in doc.placements():
                by_zone[a.zone or ""] = by_zone.get(a.zone or "", 0) + a.instances
            busiest = max(sorted(by_zone), key=lambda z: by_zone[z])
            feed = [replace(o, hourly_usd=o.hourly_usd * Decimal("1.10")) if o.zone == busiest else o for o in feed]
        else:
            feed = [
                replace(o, hourly_usd=o.hourly_usd * Decimal("1.05"))
                if (o.zone, o.market) == ("use1-az4", Market.SPOT)
                else o
                for o in feed
            ]
        world = rebalance.World(
            drivers={Cloud.AWS: driver},
            offers=lambda _n: feed,
            snapshots=lambda: snaps,
            refresh=None,
            plans=plans,
            state=StateStore(url),
            fleets=FleetStore(url),
            leases=Leases(url),
        )
        clock = rebalance.SystemClock()
        settings = rebalance.Settings(owner="bench", holder="bench", max_launch=args.instances)
        t2 = time.perf_counter()
        rec = rebalance.run_pass(world, settings, clock, initial_plan=doc.plan_id)
        t3 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"fleet of {args.instances} instances seeded in moto:   {t1 - t0:8.2f} s")
    print(f"one rebalancing pass (describe x2, re-solve, diff):  {t3 - t2:8.2f} s  -> {rec.decision}: {rec.reason}")
    print(f"instances launched / terminated by the pass:         {rec.launched:>8} / {rec.terminated}")
    print(f"peak RSS:                                            {rss:8.0f} MiB")


if __name__ == "__main__":
    main()
