"""Gangs apply on AWS, GCP and Azure: the placement is created (or found by name) first, then every
node of the gang is launched in it, with no failure.

* AWS: ``gpuprov plan --gpus 32 --type a100-40gb --node-gpus 8 --clouds aws --save`` then
  ``gpuprov apply ID --yes --allow-stale``, as a user runs them (subprocesses), against moto's
  server on loopback with the recorded placement-group answers in front
  (tests/fixtures/aws/placement_groups: moto has none);
* GCP: the apply service against the stateful Compute fake (``FakeGce``: a compact
  ``resourcePolicies`` entry must exist before an instance names it, as GCE checks);
* Azure: the same against the ARM fake (``FakeArm``: a VM's ``proximityPlacementGroup`` must
  exist, as ARM checks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import responses

from gpuprov import fleet
from gpuprov.models import Cloud
from gpuprov.store.state import StateStore
from tests.plans import alloc, handmade
from tests.provisioner.fakes.azure_arm import FakeArm
from tests.provisioner.fakes.ec2_placement import PlacementGroups, serve
from tests.provisioner.fakes.gce import FakeGce

BIN = Path(sys.executable).parent / "gpuprov"
NOW = datetime(2026, 6, 2, 12, tzinfo=UTC)


def _gang(cloud: str, itype: str, region: str, zone: str | None, nodes: int = 4) -> Any:
    return handmade(
        [alloc(cloud, "on_demand", [nodes] * 24, workload="training", itype=itype, region=region, zone=zone, gpus=8)]
    )


def _journal(owner: str) -> list[tuple[str, str, str | None]]:
    """(op, state, error) of every journalled call of the fleet."""
    import sqlite3

    from gpuprov.store.db import database_url, sqlite_path

    path = sqlite_path(database_url())
    assert path is not None
    with sqlite3.connect(path) as con:
        return list(con.execute("SELECT op, state, error FROM gpuprov_journal WHERE owner = ?", (owner,)))


def test_a_gcp_gang_launches_in_its_compact_placement_policy() -> None:
    from google.auth.credentials import AnonymousCredentials

    from provisioner.drivers.gcp import GcpDriver, GcpPolling

    gce = FakeGce("gpuprov-test")
    fast = GcpPolling(initial=0.001, maximum=0.005, multiplier=1.0, timeout=5.0, retry_deadline=2.0)
    driver = GcpDriver("gpuprov-test", ["us-central1-a"], credentials=AnonymousCredentials(), poll=fast)
    doc = _gang("gcp", "a2-highgpu-8g", "us-central1", "us-central1-a")
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        gce.install(rsps)
        done = fleet.reconcile(
            doc, lambda _d: 0, {Cloud.GCP: driver}, StateStore(), "team", lambda: NOW, fleet.Guards()
        )
        again = fleet.reconcile(
            doc, lambda _d: 0, {Cloud.GCP: driver}, StateStore(), "team", lambda: NOW, fleet.Guards()
        )
    assert done.calls is not None and len(done.calls.launched) == 4 and len(done.after) == 4
    assert again.diff.empty  # idempotent
    assert len(gce.policy_inserts) == 1
    [(region, name)] = gce.policies
    assert region == "us-central1" and gce.policy_inserts[0]["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}
    link = f"projects/gpuprov-test/regions/us-central1/resourcePolicies/{name}"
    assert [b.get("resourcePolicies") for b in gce.inserted] == [[link]] * 4
    assert _journal("team") == [("launch", "done", None)] * 4


def test_an_azure_gang_launches_in_its_proximity_placement_group() -> None:
    import time

    from azure.core.credentials import AccessToken

    from provisioner.drivers.azure import AzureDriver

    class Credential:
        def get_token(self, *_s: str, **_k: Any) -> AccessToken:
            return AccessToken("fake", int(time.time()) + 3600)

    arm = FakeArm()
    subnet = (
        f"/subscriptions/{arm.subscription}/resourceGroups/{arm.resource_group}/providers/"
        "Microsoft.Network/virtualNetworks/v/subnets/default"
    )
    driver = AzureDriver(
        arm.subscription,
        arm.resource_group,
        "eastus",
        credential=Credential(),
        ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFake gpuprov",
        subnet_id=subnet,
        polling_interval=0,
    )
    doc = _gang("azure", "Standard_ND96asr_v4", "eastus", None)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        arm.install(rsps)
        done = fleet.reconcile(
            doc, lambda _d: 0, {Cloud.AZURE: driver}, StateStore(), "team", lambda: NOW, fleet.Guards()
        )
    assert done.calls is not None and len(done.calls.launched) == 4 and len(done.after) == 4
    assert len(arm.ppg_puts) == 1 and arm.ppg_puts[0]["properties"] == {"proximityPlacementGroupType": "Standard"}
    [ppg] = arm.ppgs.values()
    assert [p["properties"]["proximityPlacementGroup"]["id"] for p in arm.puts] == [ppg["id"]] * 4
    assert _journal("team") == [("launch", "done", None)] * 4


@pytest.fixture
def moto(tmp_path: Path) -> Iterator[tuple[PlacementGroups, str, dict[str, str]]]:
    groups = PlacementGroups()
    with serve(groups) as url:
        ec2 = boto3.client(
            "ec2", region_name="us-east-1", endpoint_url=url, aws_access_key_id="t", aws_secret_access_key="t"
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUPROV_"))},
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "GPUPROV_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
            "GPUPROV_CONFIG": str(tmp_path / "none.yaml"),
            "GPUPROV_AWS_IMAGE": ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"],
            "COLUMNS": "160",
        }
        yield groups, url, env


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=600)


def test_the_aws_gang_of_issue_22_applies_on_moto(moto: tuple[PlacementGroups, str, dict[str, str]]) -> None:
    groups, url, env = moto
    planned = _cli(
        ["plan", "--gpus", "32", "--type", "a100-40gb", "--node-gpus", "8", "--clouds", "aws", "--save", "-o", "json"],
        env,
    )
    assert planned.returncode == 0, planned.stderr
    doc = json.loads(planned.stdout)
    nodes = sum(a["instances_by_slot"][0] for a in doc["allocations"]) + sum(
        r["instances"] for r in doc["reservations"]
    )
    applied = _cli(["apply", doc["plan_id"], "--yes", "--allow-stale", "--buy-later", "-o", "json"], env)
    assert applied.returncode == 0, applied.stderr
    assert "Traceback" not in applied.stderr
    assert json.loads(applied.stdout)["launch"] == nodes == 4
    (region,) = {a["region"] for a in [*doc["allocations"], *doc["reservations"]]}  # a gang is one zone
    creates = [c for c in groups.calls if c[0] == "CreatePlacementGroup"]
    assert len(creates) == 1
    name = creates[0][1]
    assert name.startswith("gpuprov-default-") and groups.groups[(region, name)]["strategy"] == "cluster"
    assert groups.launched_in == [name] * nodes  # every node of the gang in its group
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=url, aws_access_key_id="t", aws_secret_access_key="t")
    running = ec2.describe_instances(Filters=[{"Name": "tag:gpuprov-owner", "Values": ["default"]}])["Reservations"]
    assert sum(len(r["Instances"]) for r in running) == nodes
    again = _cli(["apply", doc["plan_id"], "--yes", "--allow-stale", "--buy-later", "-o", "json"], env)
    assert again.returncode == 0 and json.loads(again.stdout)["launch"] == 0, again.stderr
    assert [c for c in groups.calls if c[0] == "CreatePlacementGroup"] == creates  # found, not made again
