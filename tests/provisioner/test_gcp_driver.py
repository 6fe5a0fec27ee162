"""GcpDriver against recorded Compute Engine responses and a stateful fake, through the real SDK."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import responses
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1  # imported at collection: the first test should not pay ~3 s for it
from google.oauth2.credentials import Credentials
from google.protobuf import json_format
from responses import matchers
from responses.registries import OrderedRegistry

from gpuprov.errors import CapacityError, CredentialsError, QuotaError, TransientError
from gpuprov.models import Cloud, Market
from provisioner.base import TOKEN_TAG, Driver, LaunchRequest
from provisioner.drivers.gcp import GcpDriver, GcpPolling, label_value
from tests.provisioner.contract import DriverContract
from tests.provisioner.fakes.gce import FakeGce

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gcp" / "compute"
PROJECT, ZONE = "gpuprov-test", "us-central1-a"
API = f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}"
TOKEN = "3f2a9c0b7d1e4a5b6c7d8e9f"
NAME = f"gpuprov-{TOKEN}"
INSERT_OP = "operation-1793614530123-6425f3e1b2c3d-8a4b1c2d-5e6f7a8b"
DELETE_OP = "operation-1793618130456-6426a1b7c3d9e-1f2e3d4c-9a8b7c6d"
FAST = GcpPolling(initial=0.001, maximum=0.005, multiplier=1.0, timeout=5.0, retry_deadline=2.0)
POOL = ("gcp", ZONE, "a2-highgpu-1g", "spot")


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def request(token: str = TOKEN, market: Market = Market.SPOT, **kw: Any) -> LaunchRequest:
    fields: dict[str, Any] = dict(
        cloud=Cloud.GCP,
        region="us-central1",
        zone=ZONE,
        instance_type="a2-highgpu-1g",
        market=market,
        token=token,
        owner="team-ml",
        plan_id="9b1f0c2d4e6a",
        workload="train",
    )
    fields.update(kw)
    return LaunchRequest(**fields)


def make_driver(credentials: Any = None, zones: tuple[str, ...] = (ZONE,)) -> GcpDriver:
    return GcpDriver(PROJECT, zones, credentials=credentials or AnonymousCredentials(), poll=FAST)


@pytest.fixture
def replay() -> Iterator[responses.RequestsMock]:
    """Strict replay: every recorded response is served once, in order, and all must be used."""
    with responses.RequestsMock(registry=OrderedRegistry) as rsps:
        yield rsps


def record(rsps: responses.RequestsMock, method: str, url: str, name: str, status: int = 200, **kw: Any) -> None:
    rsps.add(method, url, json=fixture(name), status=status, **kw)


def query(call: Any) -> dict[str, list[str]]:
    return parse_qs(urlsplit(call.request.url).query)


# -- recorded replays ------------------------------------------------------------------------------
def test_launch_spot_inserts_then_polls_the_zone_operation_until_done(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.404.json", status=404)
    record(replay, "POST", f"{API}/instances", "instances.insert.spot.json")
    record(replay, "GET", f"{API}/operations/{INSERT_OP}", "zoneOperations.get.insert.running.json")
    record(replay, "GET", f"{API}/operations/{INSERT_OP}", "zoneOperations.get.insert.done.json")
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.spot.json")

    handle = make_driver().launch(request())

    assert handle.instance_id == f"{ZONE}/{NAME}"
    assert (handle.cloud, handle.region, handle.zone, handle.instance_type) == (
        Cloud.GCP,
        "us-central1",
        ZONE,
        "a2-highgpu-1g",
    )
    assert (handle.market, handle.state, handle.owner, handle.plan_id, handle.token, handle.workload) == (
        Market.SPOT,
        "running",
        "team-ml",
        "9b1f0c2d4e6a",
        TOKEN,
        "train",
    )
    assert handle.launched_at == datetime(2026, 11, 2, 10, 15, 30, 401000, tzinfo=UTC)

    insert = replay.calls[1]
    assert uuid.UUID(query(insert)["requestId"][0])
    body = json.loads(insert.request.body)
    assert body["name"] == NAME
    assert body["machineType"] == f"zones/{ZONE}/machineTypes/a2-highgpu-1g"
    assert body["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    assert body["labels"] == {
        "gpuprov-owner": "team-ml",
        "gpuprov-plan": "9b1f0c2d4e6a",
        TOKEN_TAG: TOKEN,
        "gpuprov-workload": "train",
        "gpuprov-market": "spot",
    }
    assert body["disks"][0]["boot"] and body["disks"][0]["autoDelete"]
    assert body["disks"][0]["initializeParams"]["sourceImage"].endswith("/images/family/ubuntu-2204-lts")
    assert body["networkInterfaces"] == [{"network": "global/networks/default"}]
    assert "metadata" not in body or not body["metadata"].get("items")  # every tag was a valid label


def test_an_existing_instance_is_returned_without_an_insert(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.spot.json")
    handle = make_driver().launch(request())
    assert handle.instance_id == f"{ZONE}/{NAME}"
    assert len(replay.calls) == 1


@pytest.mark.parametrize(
    "recording",
    [
        "zoneOperations.get.insert.zone-resource-pool-exhausted.json",
        "zoneOperations.get.insert.zone-resource-pool-exhausted-with-details.json",
    ],
)
def test_a_stockout_operation_is_a_capacity_error_for_the_pool(replay: responses.RequestsMock, recording: str) -> None:
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.404.json", status=404)
    record(replay, "POST", f"{API}/instances", "instances.insert.spot.json")
    record(replay, "GET", f"{API}/operations/{INSERT_OP}", recording)
    with pytest.raises(CapacityError) as caught:
        make_driver().launch(request())
    assert type(caught.value) is CapacityError
    assert caught.value.pool == POOL
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in caught.value.message


def test_a_quota_exceeded_operation_is_a_quota_error(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.404.json", status=404)
    record(replay, "POST", f"{API}/instances", "instances.insert.spot.json")
    record(replay, "GET", f"{API}/operations/{INSERT_OP}", "zoneOperations.get.insert.quota-exceeded.json")
    with pytest.raises(QuotaError) as caught:
        make_driver().launch(request())
    assert caught.value.pool == POOL


def test_a_403_quota_exceeded_insert_is_a_quota_error(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.404.json", status=404)
    record(replay, "POST", f"{API}/instances", "instances.insert.403-quota-exceeded.json", status=403)
    with pytest.raises(QuotaError) as caught:
        make_driver().launch(request())
    assert caught.value.pool == POOL
    assert "quotaExceeded" in caught.value.message


def test_a_401_is_a_credentials_error_that_does_not_show_the_token(replay: responses.RequestsMock) -> None:
    secret = "ya29.a0-not-a-real-token-1234567890"
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.insert.401.json", status=401)
    with pytest.raises(CredentialsError) as caught:
        make_driver(credentials=Credentials(token=secret)).launch(request())
    assert replay.calls[0].request.headers["Authorization"] == f"Bearer {secret}"  # it was really sent
    shown = f"{caught.value.message} {caught.value.hint} {caught.value!r}"
    assert secret not in shown and "Bearer" not in shown


def test_a_409_already_exists_returns_the_instance_a_concurrent_launch_made(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.404.json", status=404)
    record(replay, "POST", f"{API}/instances", "instances.insert.409-already-exists.json", status=409)
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.spot.json")
    handle = make_driver().launch(request())
    assert handle.instance_id == f"{ZONE}/{NAME}" and handle.token == TOKEN


def test_a_retried_insert_sends_the_same_request_id(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.404.json", status=404)
    record(replay, "POST", f"{API}/instances", "instances.insert.503-backend-error.json", status=503)
    record(replay, "POST", f"{API}/instances", "instances.insert.spot.json")
    record(replay, "GET", f"{API}/operations/{INSERT_OP}", "zoneOperations.get.insert.done.json")
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.spot.json")
    make_driver().launch(request())
    first, second = (query(replay.calls[i])["requestId"] for i in (1, 2))
    assert first == second


def test_503s_past_the_retry_deadline_are_a_transient_error() -> None:
    rsps = responses.RequestsMock()  # the one registration answers every retry: 503, 503, ...
    rsps.add("GET", f"{API}/instances/{NAME}", json=fixture("instances.insert.503-backend-error.json"), status=503)
    driver = GcpDriver(
        PROJECT,
        [ZONE],
        credentials=AnonymousCredentials(),
        poll=GcpPolling(initial=0.001, maximum=0.001, multiplier=1.0, timeout=1.0, retry_deadline=0.05),
    )
    with rsps:
        with pytest.raises(TransientError):
            driver.launch(request())
        assert len(rsps.calls) >= 2  # retried, by google-api-core's Retry, until its deadline


def test_an_operation_still_running_at_the_timeout_is_transient() -> None:
    with responses.RequestsMock() as rsps:  # the last registration of a URL repeats
        record(rsps, "GET", f"{API}/instances/{NAME}", "instances.get.404.json", status=404)
        record(rsps, "POST", f"{API}/instances", "instances.insert.spot.json")
        record(rsps, "GET", f"{API}/operations/{INSERT_OP}", "zoneOperations.get.insert.running.json")
        driver = GcpDriver(
            PROJECT,
            [ZONE],
            credentials=AnonymousCredentials(),
            poll=GcpPolling(initial=0.01, maximum=0.01, multiplier=1.0, timeout=0.05),
        )
        with pytest.raises(TransientError, match="did not finish in time"):
            driver.launch(request())


def test_describe_follows_pages_and_leaves_out_terminated_instances(replay: responses.RequestsMock) -> None:
    wanted = 'labels.gpuprov-owner = "team-ml"'
    record(
        replay,
        "GET",
        f"{API}/instances",
        "instances.list.page1.json",
        match=[matchers.query_param_matcher({"filter": wanted})],
    )
    page2 = fixture("instances.list.page1.json")["nextPageToken"]
    record(
        replay,
        "GET",
        f"{API}/instances",
        "instances.list.page2.json",
        match=[matchers.query_param_matcher({"filter": wanted, "pageToken": page2})],
    )

    handles = make_driver().describe("team-ml")

    assert [(h.instance_id, h.state, h.market, h.instance_type) for h in handles] == [
        (f"{ZONE}/gpuprov-3f2a9c0b7d1e4a5b6c7d8e9f", "running", Market.SPOT, "a2-highgpu-1g"),
        (f"{ZONE}/gpuprov-5c6d7e8f9a0b1c2d3e4f5a6b", "pending", Market.ON_DEMAND, "g2-standard-8"),
        (f"{ZONE}/gpuprov-7e8f9a0b1c2d3e4f5a6b7c8d", "running", Market.RESERVED_1Y, "a2-highgpu-8g"),
    ]
    assert handles[2].launched_at == datetime(2026, 10, 30, 16, 0, tzinfo=UTC)
    assert all(h.workload in {"train", "infer"} and h.owner == "team-ml" for h in handles)


def test_terminate_waits_for_the_delete_and_a_404_is_success(replay: responses.RequestsMock) -> None:
    record(replay, "DELETE", f"{API}/instances/{NAME}", "instances.delete.json")
    record(
        replay, "DELETE", f"{API}/instances/gpuprov-000000000000000000000000", "instances.delete.404.json", status=404
    )
    record(replay, "GET", f"{API}/operations/{DELETE_OP}", "zoneOperations.get.delete.done.json")
    make_driver().terminate([f"{ZONE}/{NAME}", f"{ZONE}/gpuprov-000000000000000000000000"])
    assert uuid.UUID(query(replay.calls[0])["requestId"][0])


def test_recordings_parse_strictly_as_the_sdk_messages() -> None:
    """Field names in every recording are real: strict protobuf parsing rejects unknown ones."""
    kinds = {
        "compute#operation": compute_v1.Operation,
        "compute#instance": compute_v1.Instance,
        "compute#instanceList": compute_v1.InstanceList,
    }
    checked = 0
    for path in sorted(FIXTURES.glob("*.json")):
        data = json.loads(path.read_text())
        if "kind" not in data:
            assert set(data) == {"error"} and {"code", "message", "errors"} <= set(data["error"])
            continue
        json_format.Parse(path.read_text(), kinds[data["kind"]].pb()(), ignore_unknown_fields=False)
        checked += 1
    assert checked >= 8


# -- against the stateful fake ---------------------------------------------------------------------
@pytest.fixture
def gce() -> Iterator[FakeGce]:
    fake = FakeGce(PROJECT)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        fake.install(rsps)
        yield fake


def test_on_demand_vms_are_standard_with_host_maintenance_terminate(gce: FakeGce) -> None:
    make_driver().launch(request(market=Market.ON_DEMAND, token="1" * 24))
    assert gce.inserted[0]["scheduling"] == {
        "provisioningModel": "STANDARD",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": True,
    }


def test_tag_values_that_are_not_label_values_round_trip_through_metadata(gce: FakeGce) -> None:
    driver = make_driver()
    launched = driver.launch(request(owner="Team ML/ops", workload="Train.Big", token="2" * 24))
    labels = gce.inserted[0]["labels"]
    assert labels["gpuprov-owner"] == label_value("Team ML/ops") != "Team ML/ops"
    assert label_value("Team ML/ops") == label_value("Team ML/ops")  # deterministic
    assert (launched.owner, launched.workload) == ("Team ML/ops", "Train.Big")
    assert [h.instance_id for h in driver.describe("Team ML/ops")] == [launched.instance_id]
    assert driver.describe("team-ml-ops") == []


def test_describe_without_zones_uses_the_aggregated_list(gce: FakeGce) -> None:
    driver = make_driver()
    launched = [driver.launch(request(token=f"{i:024x}")) for i in range(3)]
    everywhere = make_driver(zones=())
    assert [h.instance_id for h in everywhere.describe("team-ml")] == sorted(h.instance_id for h in launched)


def test_a_stopped_instance_is_replaced_by_a_new_one(gce: FakeGce) -> None:
    driver = make_driver()
    first = driver.launch(request(token="3" * 24))
    gce.instances[(ZONE, "gpuprov-" + "3" * 24)]["status"] = "TERMINATED"
    assert driver.describe("team-ml") == []
    again = driver.launch(request(token="3" * 24))
    assert again.instance_id == first.instance_id and again.state == "running"
    assert gce.creations["gpuprov-" + "3" * 24] == 2


def test_a_failed_insert_leaves_the_token_free_for_the_next_launch(gce: FakeGce) -> None:
    driver = make_driver()
    gce.fail_next_insert("ZONE_RESOURCE_POOL_EXHAUSTED")
    with pytest.raises(CapacityError):
        driver.launch(request(token="4" * 24))
    assert driver.launch(request(token="4" * 24)).state == "running"


def test_a_zone_outside_the_configured_ones_is_refused() -> None:
    from gpuprov.errors import ConfigError

    with pytest.raises(ConfigError):
        make_driver().launch(request(zone="europe-west4-a"))


class TestGcpContract(DriverContract):
    request_cloud, request_region, request_zone = Cloud.GCP, "us-central1", ZONE
    request_instance_type = "a2-highgpu-1g"
    unknown_instance_id = f"{ZONE}/gpuprov-000000000000000000000000"

    @pytest.fixture
    def driver(self, gce: FakeGce) -> Driver:
        self.fake = gce
        return make_driver()

    def count_in_cloud(self, driver: Driver, token: str) -> int:
        return self.fake.count(token)

    def creations_in_cloud(self, token: str) -> int | None:
        return self.fake.creations[f"gpuprov-{token}"]


# -- import cost -----------------------------------------------------------------------------------
def test_importing_the_driver_loads_no_google_sdk() -> None:
    code = (
        "import sys, json\nimport provisioner.drivers.gcp\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('google.cloud', 'google.api_core', "
        "'google.auth', 'google.protobuf')))))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


def test_n1_hosts_get_their_gpus_attached(gce: FakeGce) -> None:
    from dataclasses import replace

    n1 = replace(request(market=Market.SPOT, token="4" * 24), instance_type="n1-standard-8", gpu="T4", gpus=1)
    make_driver().launch(n1)
    assert gce.inserted[0]["guestAccelerators"] == [
        {"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 1}
    ]
    make_driver().launch(request(market=Market.SPOT, token="5" * 24))  # an a2 type: GPUs built in
    assert "guestAccelerators" not in gce.inserted[1]


# -- compact placement for gangs -----------------------------------------------------------------
@pytest.fixture
def gce_and_mock() -> Iterator[tuple[FakeGce, responses.RequestsMock]]:
    fake = FakeGce(PROJECT)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        fake.install(rsps)
        yield fake, rsps


def test_a_gang_gets_a_compact_placement_policy_created_once_then_reused(
    gce_and_mock: tuple[FakeGce, responses.RequestsMock],
) -> None:
    gce, _rsps = gce_and_mock
    group = "gpuprov-team-ml-train-us-central1-a"
    driver = make_driver()
    for i in range(2):
        driver.launch(request(token=f"{i}" * 24, market=Market.ON_DEMAND, placement_group=group))
    assert gce.policy_inserts == [
        {
            "name": group,
            "description": "gpuprov: compact placement of one training gang",
            "groupPlacementPolicy": {"collocation": "COLLOCATED"},
        }
    ]
    assert gce.policy_calls == [("GET", group), ("POST", group)]  # looked up first, made once
    link = f"projects/{PROJECT}/regions/us-central1/resourcePolicies/{group}"
    assert [b.get("resourcePolicies") for b in gce.inserted] == [[link], [link]]
    # another driver (another run): the policy exists, so it is only looked up
    make_driver().launch(request(token="2" * 24, market=Market.ON_DEMAND, placement_group=group))
    assert gce.policy_calls[2:] == [("GET", group)]


def test_placement_group_names_become_valid_policy_names() -> None:
    from provisioner.drivers.gcp import policy_name

    assert policy_name("gpuprov-team-ml-train-us-central1-a") == "gpuprov-team-ml-train-us-central1-a"
    odd = policy_name("gpuprov-Team_ML-train-us-central1-a")
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", odd) and odd != policy_name("gpuprov-team-ml-x")


def test_bootstrap_is_the_startup_script_metadata_item(replay: responses.RequestsMock) -> None:
    from gpuprov.bootstrap import Bootstrap

    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.404.json", status=404)
    record(replay, "POST", f"{API}/instances", "instances.insert.spot.json")
    record(replay, "GET", f"{API}/operations/{INSERT_OP}", "zoneOperations.get.insert.done.json")
    record(replay, "GET", f"{API}/instances/{NAME}", "instances.get.spot.json")
    script = "#!/bin/bash\necho '${not terraform}' %{x}\n"
    driver = GcpDriver(
        PROJECT,
        (ZONE,),
        credentials=AnonymousCredentials(),
        poll=FAST,
        bootstrap=Bootstrap({"gcp": script}, kubelet=True),
    )
    driver.launch(request())
    body = json.loads(replay.calls[1].request.body)
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert list(items) == ["startup-script"]  # every tag was a valid label: no gpuprov-tags item
    assert items["startup-script"] == (
        "#!/bin/bash\nexport KUBELET_EXTRA_ARGS='--node-labels=gpuprov.io/workload=train,gpuprov.io/market=spot,"
        "gpuprov.io/plan=9b1f0c2d4e6a --register-with-taints=nvidia.com/gpu=true:NoSchedule'\n"
        "echo '${not terraform}' %{x}\n"
    )
    # labels carry the same facts under the one key mapping (gpuprov.bootstrap.tag_key)
    assert (body["labels"]["gpuprov-workload"], body["labels"]["gpuprov-market"]) == ("train", "spot")
