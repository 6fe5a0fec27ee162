"""Kill ``gpuprov apply`` (SIGKILL, in a subprocess, against a moto EC2 server on loopback) after k
launches for every k; run it again; the fleet must then be exactly the plan: no duplicate, no orphan."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuprov.plandoc import PlanDocument, from_json

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("moto_server did not start")
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def env(moto_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("crash")
    base = {
        **os.environ,
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite'}",
        "GPUPROV_CONFIG": str(tmp / "none.yaml"),
    }
    base.pop("GPUPROV_FAULT", None)
    base.pop("GPUPROV_FAKE_CLOUD", None)
    ec2 = _ec2(moto_server)
    base["GPUPROV_AWS_IMAGE"] = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return base


def _ec2(url: str) -> Any:
    return boto3.client(
        "ec2", region_name="us-east-1", endpoint_url=url, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


def gpuprov(env: dict[str, str], *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    run_env = dict(env)
    if fault:
        run_env["GPUPROV_FAULT"] = fault
    return subprocess.run([str(BIN / "gpuprov"), *args], env=run_env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def plan(env: dict[str, str]) -> PlanDocument:
    r = gpuprov(
        env,
        "plan",
        "--gpus",
        "40",
        "--type",
        "a100",
        "--clouds",
        "aws",
        "--region",
        "us-east-1",
        "--save",
        "-o",
        "json",
    )
    assert r.returncode == 0, r.stderr
    return from_json(r.stdout)


def live(url: str, owner: str) -> list[dict[str, Any]]:
    pages = (
        _ec2(url)
        .get_paginator("describe_instances")
        .paginate(
            Filters=[
                {"Name": "tag:gpuprov-owner", "Values": [owner]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
    )
    return [i for p in pages for r in p["Reservations"] for i in r["Instances"]]


def total_of(plan: PlanDocument) -> int:
    return sum(a.instances_by_slot[0] for a in plan.placements())


def test_the_plan_needs_several_launches(plan: PlanDocument) -> None:
    assert total_of(plan) >= 3


def _fleet_matches_the_plan(url: str, owner: str, plan: PlanDocument) -> None:
    instances = live(url, owner)
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in instances]
    tokens = Counter(t["gpuprov-token"] for t in tags)
    assert all(n == 1 for n in tokens.values()), tokens  # no duplicate
    want = Counter()
    for a in plan.placements():
        want[(a.instance_type, a.market, a.workload)] += a.instances_by_slot[0]
    got = Counter(
        (i["InstanceType"], t["gpuprov-market"], t["gpuprov-workload"]) for i, t in zip(instances, tags, strict=True)
    )
    assert got == want  # exact counts, no orphan


@pytest.mark.parametrize("where", ["after-launch", "before-launch"])
def test_killed_after_k_launches_then_rerun_leaves_exactly_the_plan(
    env: dict[str, str], plan: PlanDocument, moto_server: str, where: str
) -> None:
    total = total_of(plan)
    for k in range(1, total + 1):
        owner = f"{where}-{k}"
        killed = gpuprov(
            env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", owner, fault=f"{where}:{k}"
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        # launches run concurrently (16 in flight). after-launch:k kills once k have finished, with
        # up to 15 others in flight that may have reached the cloud; before-launch:k kills as the
        # k-th is about to start, when at most k-1 calls were made (some perhaps not yet answered)
        running = len(live(moto_server, owner))
        if where == "after-launch":
            assert k <= running <= min(total, k + 15), (k, running)
        else:
            assert 0 <= running <= k - 1, (k, running)
        again = gpuprov(
            env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", owner, "-o", "json"
        )
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["launch"] == total - running
        _fleet_matches_the_plan(moto_server, owner, plan)
        third = gpuprov(
            env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", owner, "-o", "json"
        )
        assert json.loads(third.stdout)["launch"] == 0 and json.loads(third.stdout)["terminate"] == 0


def test_destroy_through_the_cli_is_idempotent(env: dict[str, str], plan: PlanDocument, moto_server: str) -> None:
    owner = "destroy-me"
    assert (
        gpuprov(env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", owner).returncode == 0
    )
    assert live(moto_server, owner)
    r = gpuprov(env, "destroy", "--yes", "--owner", owner)
    assert r.returncode == 0, r.stderr
    assert live(moto_server, owner) == []
    assert gpuprov(env, "destroy", "--yes", "--owner", owner).returncode == 0
