#!/usr/bin/env python3
"""Wall time to apply and destroy 1,000 instances, and to describe 10,000 owned instances,
against moto's EC2 (in process), through the real AWS driver, journal and apply engine.

    python benchmarks/apply.py [--instances 1000] [--describe 10000]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ[key] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
os.environ.pop("AWS_ENDPOINT_URL", None)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from gpuprov.models import Cloud  # noqa: E402
from gpuprov.store.state import StateStore  # noqa: E402
from provisioner.apply import Diff, diff, execute  # noqa: E402
from provisioner.drivers.aws import AwsDriver  # noqa: E402


def plan_doc(n: int) -> dict[str, object]:
    zones = ["use1-az1", "use1-az2", "use1-az4", "use1-az5"]
    per = [n // len(zones) + (1 if i < n % len(zones) else 0) for i in range(len(zones))]
    return {
        "plan_id": "bench",
        "horizon_hours": 1,
        "workloads": {"inference": {"gang": False}},
        "allocations": [
            {
                "cloud": "aws",
                "region": "us-east-1",
                "zone": z,
                "instance_type": "g5.xlarge",
                "market": "spot" if i % 2 else "on_demand",
                "workload": "inference",
                "gpus_per_instance": 1,
                "unit_hourly_usd": 1.0,
                "instances": c,
                "instances_by_slot": [c],
            }
            for i, (z, c) in enumerate(zip(zones, per, strict=True))
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--describe", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, mock_aws():
        state = StateStore(f"sqlite:///{tmp}/bench.db")
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        driver = AwsDriver(["us-east-1"], image=ami)
        drivers = {Cloud.AWS: driver}
        now = lambda: datetime.now(UTC)
        doc = plan_doc(args.instances)

        t0 = time.perf_counter()
        d = diff(doc, 0, driver.describe("bench"), "bench")
        execute(d, drivers, state, "bench", now, max_launch=args.instances)
        t1 = time.perf_counter()
        again = diff(doc, 0, driver.describe("bench"), "bench")
        t2 = time.perf_counter()
        execute(Diff("destroy", 0, terminate=driver.describe("bench")), drivers, state, "bench", now, max_launch=0)
        t3 = time.perf_counter()
        assert again.empty and driver.describe("bench") == []

        tags = [
            {
                "ResourceType": "instance",
                "Tags": [{"Key": "gpuprov-owner", "Value": "big"}, {"Key": "gpuprov-token", "Value": "x"}],
            }
        ]
        left = args.describe
        while left:
            n = min(500, left)
            ec2.run_instances(ImageId=ami, InstanceType="g5.xlarge", MinCount=n, MaxCount=n, TagSpecifications=tags)
            left -= n
        t4 = time.perf_counter()
        seen = driver.describe("big")
        t5 = time.perf_counter()
        assert len(seen) == args.describe
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"apply {args.instances} instances (journal, tags, token look-ups): {t1 - t0:8.2f} s "
        f"({args.instances / (t1 - t0):.0f} launches/s)"
    )
    print(f"second apply (describe + diff, nothing to do):          {t2 - t1:8.2f} s")
    print(f"destroy {args.instances} instances:                          {t3 - t2:8.2f} s")
    print(f"describe {args.describe} owned instances:                    {t5 - t4:8.2f} s")
    print(f"peak RSS:                                               {rss:8.0f} MiB")


if __name__ == "__main__":
    main()
