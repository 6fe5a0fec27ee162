"""Every command that talks to a cloud, as a user runs it (a subprocess), with the network failing.

All three clouds are configured (an ``aws`` section and keys, a GCP project with an
``authorized_user`` credentials file, an Azure subscription with a client secret) and every
HTTP(S) request goes through a proxy on loopback that is refused, hung (accepts, never answers)
or answers garbage: the SDKs' real calls (EC2, the OAuth token endpoints of Google and Microsoft,
the price feeds) fail there, and nothing leaves the machine. Each command must end within its
budget with exit 4, exactly one ``error:`` line and no traceback, the fleet's lease released,
nothing half-written (no snapshot, journal row, commitment or feed stored). Then the clouds
that answer are acted on: AWS through moto on loopback, the others still failing.

The network policy is set short in the config (``network: {connect_timeout: 1, read_timeout:
2}``) so the suite takes seconds, and each command gets ``--deadline 20`` so that a loaded
machine (slow imports) cannot make a case overrun: whatever happens, it ends by its deadline.
``benchmarks/network_faults.py`` measures the same cases with the defaults.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.faults import endpoint

BIN = Path(sys.executable).parent / "gpuprov"
DEADLINE_S = 20  # each case runs with --deadline 20 (on an idle machine they take 2-6 s)
BUDGET_S = DEADLINE_S + 6.0  # the deadline counts from the process's start; exit follows (slower on a loaded machine)
CONFIG = """\
owner: netfaults
aws: {regions: [us-east-1]}
gcp: {project: gpuprov-test, zones: [us-central1-a]}
azure: {subscription_id: 00000000-0000-0000-0000-000000000000, resource_group: gpuprov-rg, regions: [eastus]}
network: {connect_timeout: 1, read_timeout: 2, connect_retries: 1}
"""
COMMANDS: dict[str, list[str]] = {
    "status": ["status"],
    "destroy": ["destroy", "--yes"],
    "apply": ["apply", "{plan}", "--yes", "--allow-stale", "--buy-later"],
    "rebalance": ["rebalance", "--once", "--yes", "--plan", "{plan}"],
    "commitments-discover": ["commitments", "discover"],
    "pricing-refresh": ["pricing", "refresh"],
    "spot-advisor-refresh": ["pricing", "spot-advisor", "refresh"],
}
STORES = ("gpuprov_journal", "gpuprov_instance", "gpuprov_commitment")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A database with a saved plan over the three clouds, a config, credentials files."""
    tmp = tmp_path_factory.mktemp("netfaults")
    (tmp / "config.yaml").write_text(CONFIG)
    creds = {"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}
    (tmp / "gcp.json").write_text(json.dumps(creds))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUPROV_", "AZURE_", "GOOGLE_"))},
        "GPUPROV_CONFIG": str(tmp / "config.yaml"),
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite'}",
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "GOOGLE_APPLICATION_CREDENTIALS": str(tmp / "gcp.json"),
        "AZURE_CLIENT_ID": "00000000-0000-0000-0000-000000000001",
        "AZURE_TENANT_ID": "00000000-0000-0000-0000-000000000002",
        "AZURE_CLIENT_SECRET": "not-a-secret",
        "COLUMNS": "160",
    }
    r = subprocess.run(
        [str(BIN), "plan", "--gpus", "24", "--type", "a100", "--node-gpus", "8", "--save", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["plan_id"]
    return {"tmp": tmp, "env": env, "plan": plan, "db": tmp / "db.sqlite"}


def _rows(db: Path, table: str) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def _held_leases(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT name, expires_at FROM gpuprov_lease").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()
    now = datetime.now(UTC)
    held = []
    for name, expires in rows:
        when = datetime.fromisoformat(str(expires))
        if (when if when.tzinfo else when.replace(tzinfo=UTC)) > now:
            held.append(str(name))
    return held


def _snapshots(db: Path) -> int:
    return _rows(db, "gpuprov_snapshot")


def _proxied(env: dict[str, str], url: str) -> dict[str, str]:
    return {**env, "HTTPS_PROXY": url, "HTTP_PROXY": url, "https_proxy": url, "http_proxy": url, "NO_PROXY": ""}


def _run(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    try:
        r = subprocess.run(
            [str(BIN), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUDGET_S * 4,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{args}: no answer within {BUDGET_S * 4:.0f} s")
    return r, time.monotonic() - start


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr[-2000:]
    assert all(line.startswith(("error:", "hint:", "warning:")) for line in r.stderr.splitlines() if line), r.stderr
    return errors[0]


@pytest.mark.parametrize("fault", ["refused", "hung", "garbage"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_cloud_unreachable_is_one_line_exit_4_within_budget(
    world: dict[str, Any], command: str, fault: str
) -> None:
    db = world["db"]
    before = {t: _rows(db, t) for t in STORES} | {"snapshots": _snapshots(db), "feed": _rows(db, "gpuprov_meta")}
    args = [a.format(plan=world["plan"]) for a in COMMANDS[command]] + ["--deadline", str(DEADLINE_S)]
    with endpoint(fault) as url:
        r, elapsed = _run(args, _proxied(world["env"], url))
    error = _one_line(r)
    assert r.returncode == 4, (command, fault, r.stdout[-1000:], r.stderr[-1000:])
    assert elapsed < BUDGET_S, (command, fault, elapsed)
    words = ("cannot reach", "did not answer in time", "does not understand", "stopped at its deadline")
    assert any(w in error for w in words), error
    assert "not-a-secret" not in r.stdout + r.stderr
    assert _held_leases(db) == [], (command, fault)
    after = {t: _rows(db, t) for t in STORES} | {"snapshots": _snapshots(db), "feed": _rows(db, "gpuprov_meta")}
    if command != "rebalance":  # a pass is recorded, failed, in gpuprov_pass; nothing else
        assert after == before, (command, fault)
    else:
        assert {k: v for k, v in after.items() if k != "feed"} == {k: v for k, v in before.items() if k != "feed"}


@pytest.mark.parametrize("command", ["status", "apply", "pricing-refresh"])
def test_the_deadline_stops_a_command_on_a_hung_network(world: dict[str, Any], command: str) -> None:
    """The default network policy (a 20 s read timeout) against a hung proxy: ``--deadline 3``
    ends the command in about 3 s, in one line, the lease released."""
    tmp: Path = world["tmp"]
    (tmp / "slow.yaml").write_text("".join(line for line in CONFIG.splitlines(True) if not line.startswith("network:")))
    env = {**world["env"], "GPUPROV_CONFIG": str(tmp / "slow.yaml")}
    args = [a.format(plan=world["plan"]) for a in COMMANDS[command]] + ["--deadline", "3"]
    with endpoint("hung") as url:
        r, elapsed = _run(args, _proxied(env, url))
    error = _one_line(r)
    assert r.returncode == 4, r.stderr
    assert elapsed < 3 + 3.0, elapsed  # counted from the process's start, so however slow the imports
    assert "deadline" in error or "did not answer in time" in error, error
    assert _held_leases(world["db"]) == []


def test_a_malformed_endpoint_url_is_one_line(world: dict[str, Any]) -> None:
    r, _ = _run(["status"], {**world["env"], "AWS_ENDPOINT_URL": "http://[::1", "HTTPS_PROXY": "http://127.0.0.1:9"})
    error = _one_line(r)
    assert r.returncode in (2, 4) and "aws" in error.lower(), r.stderr


@pytest.fixture
def moto_fleet(world: dict[str, Any]) -> Iterator[tuple[str, dict[str, str]]]:
    """moto's EC2 on loopback with two instances of the fleet running (tagged as gpuprov tags them)."""
    import boto3

    from tests.provisioner.fakes.ec2_placement import PlacementGroups, serve

    with serve(PlacementGroups()) as url:
        ec2 = boto3.client(
            "ec2", region_name="us-east-1", endpoint_url=url, aws_access_key_id="t", aws_secret_access_key="t"
        )
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        tags = [
            {"Key": "gpuprov-owner", "Value": "netfaults"},
            {"Key": "gpuprov-plan", "Value": world["plan"]},
            {"Key": "gpuprov-workload", "Value": "training"},
            {"Key": "gpuprov-market", "Value": "on_demand"},
        ]
        for i in range(2):
            ec2.run_instances(
                ImageId=image,
                InstanceType="p4d.24xlarge",
                MinCount=1,
                MaxCount=1,
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": [*tags, {"Key": "gpuprov-token", "Value": f"tok{i}"}]}
                ],
            )
        yield url, {**world["env"], "AWS_ENDPOINT_URL": url}


def _live(url: str) -> int:
    import boto3

    ec2 = boto3.client(
        "ec2", region_name="us-east-1", endpoint_url=url, aws_access_key_id="t", aws_secret_access_key="t"
    )
    pages = ec2.describe_instances(
        Filters=[
            {"Name": "tag:gpuprov-owner", "Values": ["netfaults"]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    return sum(len(r["Instances"]) for r in pages["Reservations"])


@pytest.mark.parametrize("fault", ["refused", "hung"])
def test_the_clouds_that_answer_are_acted_on(moto_fleet: tuple[str, dict[str, str]], fault: str) -> None:
    """AWS answers (moto, not proxied); GCP and Azure do not: status shows AWS's instances and
    names the others, destroy ends AWS's and names the others; both exit 4."""
    url, env = moto_fleet
    with endpoint(fault) as bad:
        proxied = {**_proxied(env, bad), "NO_PROXY": "127.0.0.1,localhost"}
        r, elapsed = _run(["status", "-o", "json", "--deadline", "60"], proxied)
        error = _one_line(r)
        assert r.returncode == 4 and elapsed < 66
        body = json.loads(r.stdout)
        assert sorted(body["unasked"]) == ["azure", "gcp"] and "gcp" in error and "azure" in error
        assert body["instances"] == 2 and {g["cloud"] for g in body["groups"]} == {"aws"}
        r, elapsed = _run(["destroy", "--yes", "--deadline", "60"], proxied)
        error = _one_line(r)
        assert r.returncode == 4 and elapsed < 66
        assert "terminated 2 instances of fleet netfaults; 0 remain where the clouds answered" in r.stdout
        assert "gcp" in error and "azure" in error
    assert _live(url) == 0
