"""AzureDriver against recorded ARM responses and a stateful fake, through the real azure-mgmt-compute."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import typing
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import responses
from azure.core.credentials import AccessToken
from azure.mgmt.compute import models as compute_models
from azure.mgmt.compute._utils.model_base import Model as SdkModel
from azure.mgmt.compute.models import _models as model_defs
from responses import matchers
from responses.registries import OrderedRegistry

from gpuprov.errors import CapacityError, ConfigError, CredentialsError, QuotaError, TransientError
from gpuprov.models import Cloud, Market
from provisioner.base import Driver, LaunchRequest
from provisioner.drivers.azure import AzureDriver
from tests.provisioner.contract import DriverContract
from tests.provisioner.fakes.azure_arm import FakeArm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "azure" / "compute"
SUB, RG, LOC = "00000000-0000-0000-0000-000000000000", "gpuprov-rg", "eastus"
ARM = f"https://management.azure.com/subscriptions/{SUB}"
VMS = f"{ARM}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines"
TOKEN = "3f2a9c0b7d1e4a5b6c7d8e9f"
NAME = f"gpuprov-{TOKEN}"
OP = "0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
ASYNC = f"{ARM}/providers/Microsoft.Compute/locations/{LOC}/operations/{OP}?p=ZmFrZQ&api-version=2026-04-01"
SUBNET = (
    f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/gpuprov-vnet/subnets/default"
)
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake gpuprov"
SECRET = "eyJ0eXAiOiJKV1Qi.fake-access-token.not-real"
POOL = ("azure", LOC, "Standard_NC24ads_A100_v4", "spot")


class FakeCredential:
    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(SECRET, int(time.time()) + 3600)


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def request(token: str = TOKEN, market: Market = Market.SPOT, **kw: Any) -> LaunchRequest:
    fields: dict[str, Any] = dict(
        cloud=Cloud.AZURE,
        region=LOC,
        zone=None,
        instance_type="Standard_NC24ads_A100_v4",
        market=market,
        token=token,
        owner="team-ml",
        plan_id="9b1f0c2d4e6a",
        workload="train",
    )
    fields.update(kw)
    return LaunchRequest(**fields)


def make_driver(**kw: Any) -> AzureDriver:
    fields: dict[str, Any] = dict(
        credential=FakeCredential(), ssh_public_key=SSH_KEY, subnet_id=SUBNET, polling_interval=0
    )
    fields.update(kw)
    return AzureDriver(SUB, RG, LOC, **fields)


@pytest.fixture
def replay() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(registry=OrderedRegistry) as rsps:
        yield rsps


def record(
    rsps: responses.RequestsMock,
    method: str,
    url: str,
    name: str | None,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **kw: Any,
) -> None:
    if name is None:
        rsps.add(method, url, status=status, headers=headers, **kw)
    else:
        rsps.add(method, url, json=fixture(name), status=status, headers=headers, **kw)


ASYNC_HEADERS = {"Azure-AsyncOperation": ASYNC, "Retry-After": "0"}


def begin_launch(rsps: responses.RequestsMock) -> None:
    record(rsps, "GET", f"{VMS}/{NAME}", "virtualMachines.get.404.json", status=404)
    record(rsps, "PUT", f"{VMS}/{NAME}", "virtualMachines.createOrUpdate.201.json", status=201, headers=ASYNC_HEADERS)


# -- recorded replays ------------------------------------------------------------------------------
def test_launch_spot_follows_the_async_operation_then_gets_the_vm(replay: responses.RequestsMock) -> None:
    begin_launch(replay)
    record(replay, "GET", ASYNC, "operations.get.inprogress.json")
    record(replay, "GET", ASYNC, "operations.get.succeeded.json")
    record(replay, "GET", f"{VMS}/{NAME}", "virtualMachines.get.json")

    started = time.monotonic()
    handle = make_driver().launch(request())
    assert time.monotonic() - started < 2  # polling_interval=0: no 30 s fallback sleeps

    assert (handle.instance_id, handle.cloud, handle.region, handle.zone) == (NAME, Cloud.AZURE, LOC, None)
    assert (handle.instance_type, handle.market, handle.state) == ("Standard_NC24ads_A100_v4", Market.SPOT, "running")
    assert (handle.owner, handle.plan_id, handle.token, handle.workload) == ("team-ml", "9b1f0c2d4e6a", TOKEN, "train")
    assert handle.launched_at == datetime(2026, 11, 2, 10, 15, 30, 401234, tzinfo=UTC)

    put = replay.calls[1].request
    assert "api-version=2026-04-01" in put.url
    assert put.headers["Authorization"] == f"Bearer {SECRET}"
    body = json.loads(put.body)
    assert body["location"] == LOC
    assert body["tags"] == {
        "gpuprov-owner": "team-ml",
        "gpuprov-plan": "9b1f0c2d4e6a",
        "gpuprov-token": TOKEN,
        "gpuprov-workload": "train",
        "gpuprov-market": "spot",
    }
    props = body["properties"]
    assert (props["priority"], props["evictionPolicy"], props["billingProfile"]) == ("Spot", "Delete", {"maxPrice": -1})
    assert props["hardwareProfile"] == {"vmSize": "Standard_NC24ads_A100_v4"}
    assert props["storageProfile"]["imageReference"] == {
        "publisher": "microsoft-dsvm",
        "offer": "ubuntu-hpc",
        "sku": "2204",
        "version": "latest",
    }
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    nic = props["networkProfile"]["networkInterfaceConfigurations"][0]
    assert props["networkProfile"]["networkApiVersion"] == "2020-11-01"
    assert nic["properties"]["deleteOption"] == "Delete"
    assert nic["properties"]["ipConfigurations"][0]["properties"]["subnet"] == {"id": SUBNET}
    linux = props["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True
    assert linux["ssh"]["publicKeys"] == [{"path": "/home/gpuprov/.ssh/authorized_keys", "keyData": SSH_KEY}]


def test_an_existing_vm_is_returned_without_a_put(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{VMS}/{NAME}", "virtualMachines.get.json")
    assert make_driver().launch(request()).instance_id == NAME
    assert len(replay.calls) == 1


def test_409_sku_not_available_is_a_capacity_error(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{VMS}/{NAME}", "virtualMachines.get.404.json", status=404)
    record(replay, "PUT", f"{VMS}/{NAME}", "virtualMachines.createOrUpdate.409-sku-not-available.json", status=409)
    with pytest.raises(CapacityError) as caught:
        make_driver().launch(request())
    assert type(caught.value) is CapacityError
    assert caught.value.pool == POOL
    assert "SkuNotAvailable" in caught.value.message


def test_an_operation_that_fails_allocation_is_a_capacity_error(replay: responses.RequestsMock) -> None:
    begin_launch(replay)
    record(replay, "GET", ASYNC, "operations.get.failed-allocation.json")
    with pytest.raises(CapacityError) as caught:
        make_driver().launch(request())
    assert caught.value.pool == POOL and "AllocationFailed" in caught.value.message


def test_409_operation_not_allowed_over_quota_is_a_quota_error(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{VMS}/{NAME}", "virtualMachines.get.404.json", status=404)
    record(replay, "PUT", f"{VMS}/{NAME}", "virtualMachines.createOrUpdate.409-quota.json", status=409)
    with pytest.raises(QuotaError) as caught:
        make_driver().launch(request())
    assert caught.value.pool == POOL


def test_403_is_a_credentials_error_that_does_not_show_the_token(replay: responses.RequestsMock) -> None:
    record(replay, "GET", f"{VMS}/{NAME}", "virtualMachines.get.404.json", status=404)
    record(replay, "PUT", f"{VMS}/{NAME}", "virtualMachines.createOrUpdate.403-authorization-failed.json", status=403)
    with pytest.raises(CredentialsError) as caught:
        make_driver().launch(request())
    shown = f"{caught.value.message} {caught.value.hint} {caught.value!r}"
    assert SECRET not in shown and "Bearer" not in shown
    assert "AuthorizationFailed" in caught.value.message


def test_throttling_after_the_sdk_retries_is_transient(replay: responses.RequestsMock) -> None:
    for _ in range(2):  # the first try and one retry
        replay.add(
            "GET",
            f"{VMS}/{NAME}",
            status=429,
            headers={"Retry-After": "0"},
            json={"error": {"code": "TooManyRequests", "message": "The request is being throttled."}},
        )
    driver = make_driver(client_kwargs={"retry_total": 1, "retry_backoff_factor": 0})
    with pytest.raises(TransientError):
        driver.launch(request())


def test_describe_follows_next_link_and_keeps_the_owners_live_vms(replay: responses.RequestsMock) -> None:
    record(
        replay,
        "GET",
        VMS,
        "virtualMachines.list.page1.json",
        match=[matchers.query_param_matcher({"api-version": "2026-04-01"})],
    )
    record(
        replay,
        "GET",
        VMS,
        "virtualMachines.list.page2.json",
        match=[
            matchers.query_param_matcher(
                {"api-version": "2026-04-01", "$skiptoken": "Z3B1cHJvdi01YzZkN2U4ZjlhMGIxYzJkM2U0ZjVhNmI"}
            )
        ],
    )

    handles = make_driver().describe("team-ml")

    assert [(h.instance_id, h.state, h.market, h.instance_type, h.workload) for h in handles] == [
        (NAME, "running", Market.SPOT, "Standard_NC24ads_A100_v4", "train"),
        ("gpuprov-5c6d7e8f9a0b1c2d3e4f5a6b", "pending", Market.ON_DEMAND, "Standard_NC4as_T4_v3", "infer"),
    ]  # page 2: a Deleting VM, another owner's VM and an untagged VM are all left out
    assert all(h.region == LOC and h.zone is None for h in handles)


def test_terminate_waits_for_the_delete_and_a_404_is_success() -> None:
    # Not strictly ordered: an LROPoller starts polling in a thread of its own as soon as it exists.
    with responses.RequestsMock() as replay:
        _record_terminate(replay)
        make_driver().terminate([NAME, "gpuprov-000000000000000000000000"])
        assert [c.request.method for c in replay.calls].count("DELETE") == 2


def _record_terminate(replay: responses.RequestsMock) -> None:
    record(
        replay,
        "DELETE",
        f"{VMS}/{NAME}",
        None,
        status=202,
        headers={**ASYNC_HEADERS, "Location": ASYNC + "&monitor=true"},
    )
    record(replay, "DELETE", f"{VMS}/gpuprov-000000000000000000000000", "virtualMachines.delete.404.json", status=404)
    record(replay, "GET", ASYNC, "operations.get.succeeded.json")


def _unknown_fields(data: Any, hint: Any, where: str) -> list[str]:
    """Wire keys in ``data`` that the SDK's model (per its type hints) does not define."""
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
        origin = typing.get_origin(hint)
    if origin is list:
        item_hint = typing.get_args(hint)[0]
        return [u for i, item in enumerate(data) for u in _unknown_fields(item, item_hint, f"{where}[{i}]")]
    if not (isinstance(hint, type) and issubclass(hint, SdkModel)):
        return []
    hint()  # the SDK fills the rest-field table on first construction
    hints = typing.get_type_hints(hint, globalns=vars(model_defs), localns={"_models": compute_models})
    by_rest = {field._rest_name: hints.get(attr) for attr, field in hint._attr_to_rest_field.items()}
    found = []
    for key, value in data.items():
        if key not in by_rest:
            found.append(f"{where}.{key}")
        else:
            found.extend(_unknown_fields(value, by_rest[key], f"{where}.{key}"))
    return found


def test_recordings_use_only_field_names_the_sdk_models_define() -> None:
    for path in sorted(FIXTURES.glob("virtualMachines.*.json")):
        data = json.loads(path.read_text())
        if "error" in data:
            assert _unknown_fields(data, compute_models.CloudError, path.name) == []
            assert data["error"]["code"]
        elif "value" in data:
            assert _unknown_fields(data["value"], list[compute_models.VirtualMachine], path.name) == []
        else:
            assert _unknown_fields(data, compute_models.VirtualMachine, path.name) == []
    assert _unknown_fields(
        {"properties": {"hardwareProfile": {"vmSiz": "x"}}}, compute_models.VirtualMachine, "probe"
    ) == ["probe.properties.hardwareProfile.vmSiz"]


# -- against the stateful fake ---------------------------------------------------------------------
@pytest.fixture
def arm() -> Iterator[FakeArm]:
    fake = FakeArm(SUB, RG, LOC)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        fake.install(rsps)
        yield fake


def test_the_fake_answers_with_fields_the_sdk_models_define(arm: FakeArm) -> None:
    make_driver().launch(request())
    assert _unknown_fields(arm.vms[NAME], compute_models.VirtualMachine, "fake") == []


def test_on_demand_vms_are_regular_priority_without_a_max_price(arm: FakeArm) -> None:
    handle = make_driver().launch(request(market=Market.ON_DEMAND))
    props = arm.puts[0]["properties"]
    assert props["priority"] == "Regular" and "evictionPolicy" not in props and "billingProfile" not in props
    assert handle.market is Market.ON_DEMAND


def test_a_vm_left_failed_by_an_allocation_failure_is_recreated_by_the_next_launch(arm: FakeArm) -> None:
    driver = make_driver()
    arm.fail_next_create("AllocationFailed")
    with pytest.raises(CapacityError):
        driver.launch(request())
    assert [h.state for h in driver.describe("team-ml")] == ["failed"]
    assert driver.launch(request()).state == "running"
    assert len(arm.puts) == 2


def test_launch_needs_a_subnet_and_a_key_and_the_drivers_location(arm: FakeArm) -> None:
    with pytest.raises(ConfigError):
        make_driver(subnet_id=None).launch(request())
    with pytest.raises(ConfigError):
        make_driver(ssh_public_key=None).launch(request())
    with pytest.raises(ConfigError):
        make_driver().launch(request(region="westus2"))
    assert arm.puts == []


def test_an_image_urn_on_the_request_becomes_an_image_reference(arm: FakeArm) -> None:
    make_driver().launch(request(image="Canonical:ubuntu-24_04-lts:server:latest"))
    assert arm.puts[0]["properties"]["storageProfile"]["imageReference"] == {
        "publisher": "Canonical",
        "offer": "ubuntu-24_04-lts",
        "sku": "server",
        "version": "latest",
    }


class TestAzureContract(DriverContract):
    request_cloud, request_region, request_zone = Cloud.AZURE, LOC, None
    request_instance_type = "Standard_NC24ads_A100_v4"
    unknown_instance_id = "gpuprov-000000000000000000000000"

    @pytest.fixture
    def driver(self, arm: FakeArm) -> Driver:
        self.fake = arm
        return make_driver()

    def count_in_cloud(self, driver: Driver, token: str) -> int:
        return self.fake.count(token)

    def creations_in_cloud(self, token: str) -> int | None:
        return self.fake.creations[f"gpuprov-{token}"]


# -- import cost -----------------------------------------------------------------------------------
def test_importing_the_driver_loads_no_azure_sdk() -> None:
    code = (
        "import sys, json\nimport provisioner.drivers.azure\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'azure')))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


def test_bootstrap_is_base64_custom_data(replay: responses.RequestsMock) -> None:
    import base64

    from gpuprov.bootstrap import Bootstrap

    begin_launch(replay)
    record(replay, "GET", ASYNC, "operations.get.succeeded.json")
    record(replay, "GET", f"{VMS}/{NAME}", "virtualMachines.get.json")
    script = "#cloud-config\nruncmd: [[touch, /tmp/ok]]\n"
    make_driver(bootstrap=Bootstrap({"azure": script})).launch(request(market=Market.ON_DEMAND))
    body = json.loads(replay.calls[1].request.body)
    assert base64.b64decode(body["properties"]["osProfile"]["customData"]).decode() == script


def test_no_bootstrap_sends_no_custom_data(replay: responses.RequestsMock) -> None:
    begin_launch(replay)
    record(replay, "GET", ASYNC, "operations.get.succeeded.json")
    record(replay, "GET", f"{VMS}/{NAME}", "virtualMachines.get.json")
    make_driver().launch(request())
    assert "customData" not in json.loads(replay.calls[1].request.body)["properties"]["osProfile"]
