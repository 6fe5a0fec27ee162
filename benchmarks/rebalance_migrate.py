#!/usr/bin/env python3
"""One rebalancing pass that migrates 2,500 of 10,000 instances on the fake cloud.

    python benchmarks/rebalance_migrate.py [--instances 10000] [--latency 0]

The fleet (g5.xlarge, 1 GPU each, on demand and spot in four us-east-1 zones) runs its plan on
``provisioner/drivers/fake.py`` (in memory; ``--latency`` seconds per call); the journal, the
mirror and the pass records are a real SQLite database in a temporary directory. Then every price
of the zone that runs the most instances rises 50% (more than a launch costs over the
one-hour plan: a quarter hour of boot): the pass re-prices, re-solves with the fleet as
an option, adopts the new plan and migrates as many instances as its disruption budget allows
(25% of the workload's running instances), each launch and each termination journalled before its
call (durable: a run killed at any point is settled by the next). Prints the pass's wall time and
what it launched and terminated. Target: <= 30 s for 2,500 of 10,000.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.rebalance import offers
from gpuprov import planning, rebalance
from gpuprov.models import Cloud, Market, SnapshotInfo, Workload
from gpuprov.store.lease import Leases
from gpuprov.store.plans import PlanStore
from gpuprov.store.state import FleetStore, StateStore
from provisioner.base import LaunchRequest
from provisioner.drivers.fake import FakeDriver


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per fake cloud call")
    args = parser.parse_args()
    feed = offers()
    now = datetime(2026, 6, 1, 12, tzinfo=UTC)
    snaps = [SnapshotInfo(1, "bench", Cloud.AWS, now, len(feed), True)]
    workload = Workload("inference", Decimal("0.3"))
    spec = planning.flags_spec(["A10G"], args.instances, workload, None, None, None, "cbc", 0.001, 60.0)
    context = planning.flags_context()
    solved = planning.run(planning.request_from_spec(spec, feed))
    doc = planning.document(planning.plan_id(spec, snaps, context), solved, snaps, args.instances, spec, context, now)
    driver = FakeDriver(Cloud.AWS, latency=args.latency)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        plans = PlanStore(url)
        plans.save(doc)
        t0 = time.perf_counter()
        for a in doc.placements():
            for k in range(a.instances):
                driver.launch(
                    LaunchRequest(
                        cloud=Cloud.AWS,
                        region=a.region,
                        zone=a.zone,
                        instance_type=a.instance_type,
                        market=Market(a.market),
                        token=f"seed-{a.zone}-{a.market}-{k}",
                        owner="bench",
                        plan_id=doc.plan_id,
                        workload=a.workload,
                    )
                )
        t1 = time.perf_counter()
        by_zone: dict[str, int] = {}
        for a in doc.placements():
            by_zone[a.zone or ""] = by_zone.get(a.zone or "", 0) + a.instances
        busiest = max(sorted(by_zone), key=lambda z: by_zone[z])
        feed = [replace(o, hourly_usd=o.hourly_usd * Decimal("1.50")) if o.zone == busiest else o for o in feed]
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
        settings = rebalance.Settings(owner="bench", holder="bench", max_launch=args.instances)
        t2 = time.perf_counter()
        rec = rebalance.run_pass(world, settings, rebalance.SystemClock(), initial_plan=doc.plan_id)
        t3 = time.perf_counter()
        rows = len(StateStore(url).journal("bench"))
    print(f"fleet of {args.instances} instances seeded on the fake cloud: {t1 - t0:8.2f} s")
    print(f"one rebalancing pass:                          {t3 - t2:8.2f} s  -> {rec.decision}: {rec.reason}")
    print(f"launched / terminated by the pass:             {rec.launched:>8} / {rec.terminated}")
    print(f"journal rows written (each durable before its call): {rows}")


if __name__ == "__main__":
    main()
