"""Fleet safety against a moto EC2 server on loopback, through the installed CLI (subprocesses):
the cloud is the source of truth, tags are data, and one actor changes a fleet at a time."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpuprov.plandoc import PlanDocument, from_json
from tests.provisioner.test_apply_crash import BIN, _ec2, live, moto_server  # noqa: F401  (fixture)


def make_env(moto_server: str, tmp: Path, name: str) -> dict[str, str]:  # noqa: F811
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / f'{name}.sqlite'}",
        "GPUPROV_CONFIG": str(tmp / "none.yaml"),
    }
    for key in ("GPUPROV_FAULT", "GPUPROV_FAKE_CLOUD", "GPUPROV_DEBUG"):
        env.pop(key, None)
    env["GPUPROV_AWS_IMAGE"] = _ec2(moto_server).describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "gpuprov"), *args], env=env, capture_output=True, text=True, timeout=300)


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(BIN / "gpuprov"), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def saved_plan(env: dict[str, str], gpus: int = 40) -> PlanDocument:
    r = run(
        env,
        "plan",
        "--gpus",
        str(gpus),
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


def wanted(plan: PlanDocument) -> Counter[tuple[str, str, str]]:
    out: Counter[tuple[str, str, str]] = Counter()
    for a in plan.placements():
        out[(a.instance_type, a.market, a.workload)] += a.instances_by_slot[0]
    return out


def tags_of(instances: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{t["Key"]: t["Value"] for t in i.get("Tags", [])} for i in instances]


def test_a_fresh_database_finds_and_destroys_a_running_fleet(moto_server: str, tmp_path: Path) -> None:  # noqa: F811
    first = make_env(moto_server, tmp_path, "first")
    plan = saved_plan(first)
    r = run(first, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", "lost-db")
    assert r.returncode == 0, r.stderr
    running = len(live(moto_server, "lost-db"))
    assert running == sum(wanted(plan).values()) > 0
    fresh = make_env(moto_server, tmp_path, "fresh")  # another machine, or the database was lost
    r = run(fresh, "status", "--owner", "lost-db", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["instances"] == running
    r = run(fresh, "destroy", "--yes", "--owner", "lost-db")
    assert r.returncode == 0, r.stderr
    assert f"terminated {running} instances" in r.stdout and "0 remain" in r.stdout
    assert live(moto_server, "lost-db") == []


def test_malformed_tags_do_not_stop_status_or_destroy(moto_server: str, tmp_path: Path) -> None:  # noqa: F811
    env = make_env(moto_server, tmp_path, "tags")
    plan = saved_plan(env)
    assert (
        run(env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", "odd-tags").returncode == 0
    )
    ids = [i["InstanceId"] for i in live(moto_server, "odd-tags")]
    assert len(ids) >= 2
    ec2 = _ec2(moto_server)
    ec2.create_tags(Resources=[ids[0]], Tags=[{"Key": "gpuprov-market", "Value": "bogus"}])
    ec2.create_tags(
        Resources=[ids[1]],
        Tags=[{"Key": "gpuprov-workload", "Value": "[/]"}, {"Key": "gpuprov-plan", "Value": '${file("/etc/passwd")}'}],
    )
    r = run(env, "status", "--owner", "odd-tags")
    assert r.returncode == 0, r.stderr
    assert "unreadable tags: gpuprov-market" in r.stdout and "unreadable tags: gpuprov-plan" in r.stdout
    r = run(env, "status", "--owner", "odd-tags", "-o", "json")
    assert json.loads(r.stdout)["instances"] == len(ids)
    r = run(env, "destroy", "--yes", "--owner", "odd-tags")
    assert r.returncode == 0, r.stderr
    assert live(moto_server, "odd-tags") == []


def test_two_concurrent_applies_end_with_exactly_the_plan(moto_server: str, tmp_path: Path) -> None:  # noqa: F811
    env = make_env(moto_server, tmp_path, "race")
    plan = saved_plan(env)
    procs = [
        start(env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", "twice", "--wait", "240")
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    instances = live(moto_server, "twice")
    tags = tags_of(instances)
    tokens = Counter(t["gpuprov-token"] for t in tags)
    assert all(n == 1 for n in tokens.values()), tokens
    got = Counter(
        (i["InstanceType"], t["gpuprov-market"], t["gpuprov-workload"]) for i, t in zip(instances, tags, strict=True)
    )
    assert got == wanted(plan)


def test_a_second_actor_without_wait_is_told_who_holds_the_fleet(moto_server: str, tmp_path: Path) -> None:  # noqa: F811
    env = make_env(moto_server, tmp_path, "busy")
    plan = saved_plan(env, 480)  # dozens of launches: the first actor is still at work
    first = start(
        env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", "busy", "--max-launch", "1000"
    )
    _wait_for_instances(moto_server, "busy", first)
    second = run(env, "destroy", "--yes", "--owner", "busy")
    first.communicate(timeout=300)
    if first.returncode == 0 and second.returncode == 0:
        pytest.skip("the first apply finished before the second actor looked")
    assert second.returncode == 5, second.stderr
    assert "error: fleet busy is being changed by gpuprov apply" in second.stderr


def test_destroy_racing_apply_ends_with_nothing_running(moto_server: str, tmp_path: Path) -> None:  # noqa: F811
    env = make_env(moto_server, tmp_path, "destroy-race")
    plan = saved_plan(env)
    applying = start(env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", "racing")
    _wait_for_instances(moto_server, "racing", applying)
    destroying = start(env, "destroy", "--yes", "--owner", "racing", "--wait", "240")
    _, a_err = applying.communicate(timeout=300)
    _, d_err = destroying.communicate(timeout=300)
    assert applying.returncode == 0, a_err
    assert destroying.returncode == 0, d_err
    assert live(moto_server, "racing") == []


def test_owner_with_wildcards_is_refused_and_touches_no_fleet(moto_server: str, tmp_path: Path) -> None:  # noqa: F811
    env = make_env(moto_server, tmp_path, "glob")
    plan = saved_plan(env)
    for owner in ("prod-a", "prod-b"):
        assert (
            run(env, "apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "--owner", owner).returncode == 0
        )
    before = {o: len(live(moto_server, o)) for o in ("prod-a", "prod-b")}
    for owner in ("prod-*", "prod-?", "PROD-A", "prod-a\n", "x" * 41):
        r = run(env, "destroy", "--yes", "--owner", owner)
        assert r.returncode == 2, (owner, r.stderr)
        assert r.stderr.startswith("error: --owner:") and "not a valid fleet name" in r.stderr
    assert {o: len(live(moto_server, o)) for o in ("prod-a", "prod-b")} == before
    assert all(before.values())


def _wait_for_instances(url: str, owner: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if live(url, owner):
            return
        time.sleep(0.05)
