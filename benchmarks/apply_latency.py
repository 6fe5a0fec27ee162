#!/usr/bin/env python3
"""Apply against a cloud that answers like a cloud: every call takes --latency seconds, and more
than --rate calls a second are throttled (the launcher must back off and retry).

    python benchmarks/apply_latency.py --instances 200 --latency 0.2 [--rate 10] [--concurrency 16]

Runs gpuprov's own apply engine (diff, journal in a SQLite database, lease-free) against the
latency-simulating fake driver, first concurrently, then one launch at a time (on at most
--sequential-sample instances, extrapolated linearly when fewer than --instances: the sequential
cost of a launch does not depend on how many came before). Prints as its last line:
``apply: N instances in X s (sequential: Y s)``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuprov.models import Cloud
from gpuprov.store.state import StateStore
from provisioner.apply import diff, execute
from provisioner.drivers.fake import FakeDriver
from tests.plans import alloc, handmade


def run(n: int, latency: float, rate: float | None, concurrency: int, db: str) -> float:
    plan = handmade(
        [alloc("aws", "on_demand", [n], itype="p4d.24xlarge", gpus=8, zone="use1-az1")], horizon=1, origin="constant"
    )
    driver = FakeDriver(Cloud.AWS, latency=latency, rate=rate)
    state = StateStore(db)
    state.ensure_schema()
    start = time.perf_counter()
    d = diff(plan, 0, driver.describe("bench"), "bench")
    execute(d, {Cloud.AWS: driver}, state, "bench", lambda: datetime.now(UTC), max_launch=n, concurrency=concurrency)
    elapsed = time.perf_counter() - start
    assert len(driver.describe("bench")) == n, "the fleet is not the plan"
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--instances", type=int, default=200)
    p.add_argument("--latency", type=float, default=0.2)
    p.add_argument("--rate", type=float, default=None, help="calls per second before throttling")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--sequential-sample", type=int, default=200)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fast = run(a.instances, a.latency, a.rate, a.concurrency, f"sqlite:///{tmp}/c.db")
        k = min(a.instances, a.sequential_sample)
        slow = run(k, a.latency, a.rate, 1, f"sqlite:///{tmp}/s.db") * a.instances / k
    note = "" if k == a.instances else f", extrapolated from {k}"
    print(f"latency {a.latency} s per call, rate {a.rate or 'unlimited'} calls/s, {a.concurrency} in flight")
    print(f"apply: {a.instances} instances in {fast:.1f} s (sequential: {slow:.1f} s{note})")


if __name__ == "__main__":
    main()
