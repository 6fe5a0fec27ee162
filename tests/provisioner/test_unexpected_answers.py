"""Any SDK answer a driver does not expect is one line of gpuprov's error tree, exit 4.

Twenty surprises, injected where each driver meets its SDK: answers of a shape the driver does
not read (an empty ``Instances`` list, a missing key, a field of the wrong type) and exceptions
the driver does not know (a parser's, a deserializer's, ``NotImplementedError`` as moto's server
raises for what it lacks, a plain ``RuntimeError``). AWS runs on moto with the surprise at
botocore's ``before-call`` hook of the operation; GCP and Azure get their SDK clients replaced
by stand-ins that answer or raise what the real ones would not. Each surprise is raised by a
driver verb as a ``GpuprovError`` with exit code 4 and a one-line message, and through the CLI
(``status`` for ``describe``, ``destroy --yes`` for ``terminate``, ``apply --yes`` for
``launch``) it is exactly one ``error:`` line and exit 4, nothing else on stderr.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.errors import GpuprovError
from gpuprov.models import Cloud, InstanceHandle, Market
from gpuprov.plandoc import to_json
from provisioner.base import LaunchRequest
from provisioner.drivers.aws import AwsDriver
from provisioner.drivers.azure import AzureDriver
from provisioner.drivers.gcp import GcpDriver, GcpPolling
from tests.plans import alloc, handmade

Install = Callable[[Any], None]


# -- AWS: moto for everything, the surprise at one operation's before-call -----------------------
def _aws_answer(operation: str, answer: dict[str, Any] | Exception, launcher: bool = False) -> Install:
    def install(driver: AwsDriver) -> None:
        def hook(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            if isinstance(answer, Exception):
                raise answer
            return AWSResponse("https://ec2.us-east-1.amazonaws.com", 200, {}, None), answer

        client = driver.launcher("us-east-1") if launcher else driver.client("us-east-1")
        client.meta.events.register(f"before-call.ec2.{operation}", hook)

    return install


def _parser_error() -> Exception:
    from botocore.parsers import ResponseParserError

    return ResponseParserError("Unable to parse response (not well-formed), invalid XML received: b'<<'")


# -- GCP: the compute clients replaced by stand-ins ---------------------------------------------
class _Instances:
    """An InstancesClient stand-in: each method answers or raises what it is given."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers

    def _answer(self, name: str) -> Any:
        found = self.answers.get(name)
        if isinstance(found, BaseException):
            raise found
        if found is None:
            from google.api_core import exceptions as gexc

            raise gexc.NotFound("not found")
        return found

    def get(self, **_: Any) -> Any:
        return self._answer("get")

    def insert(self, **_: Any) -> Any:
        return self._answer("insert")

    def delete(self, **_: Any) -> Any:
        return self._answer("delete")

    def list(self, **_: Any) -> Any:
        return self._answer("list")

    def aggregated_list(self, **_: Any) -> Any:
        return self._answer("aggregated_list")


class _Lro:
    def __init__(self, error: BaseException) -> None:
        self.error_raised = error
        self.error = None

    def result(self, **_: Any) -> Any:
        raise self.error_raised


def _gcp(policies: Any = None, **answers: Any) -> Install:
    def install(driver: GcpDriver) -> None:
        driver._instances = _Instances(**answers)
        if policies is not None:
            driver._policies = policies

    return install


def _parse_error() -> Exception:
    from google.protobuf import json_format

    return json_format.ParseError("Failed to parse items field: expected a list")


class _Policies:
    def get(self, **_: Any) -> Any:
        raise TypeError("get() got an unexpected keyword argument 'resource_policy'")


# -- Azure: the management client replaced by a stand-in ----------------------------------------
class _Poller:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def result(self, **_: Any) -> Any:
        raise self.error


def _azure(vms: dict[str, Any], ppgs: dict[str, Any] | None = None) -> Install:
    def answer(value: Any) -> Callable[..., Any]:
        def call(*_a: Any, **_k: Any) -> Any:
            if isinstance(value, BaseException):
                raise value
            return value

        return call

    def install(driver: AzureDriver) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        not_found = ResourceNotFoundError("not found")
        machines = SimpleNamespace(
            list=answer(vms.get("list", [])),
            get=answer(vms.get("get", not_found)),
            begin_create_or_update=answer(vms.get("create", _Poller(RuntimeError("no")))),
            begin_delete=answer(vms.get("delete", _Poller(RuntimeError("no")))),
        )
        groups = SimpleNamespace(get=answer((ppgs or {}).get("get", not_found)), create_or_update=answer(None))
        driver._compute = SimpleNamespace(virtual_machines=machines, proximity_placement_groups=groups)

    return install


def _deserialization_error() -> Exception:
    from azure.core.exceptions import DeserializationError

    return DeserializationError("Unable to deserialize to object: type, AttributeError: 'str' has no 'get'")


def _vm_as(value: Any) -> Any:
    return SimpleNamespace(as_dict=lambda: value)


# (id, cloud, verb, install): twenty surprises
CASES: list[tuple[str, Cloud, str, Install]] = [
    ("aws-run-instances-empty", Cloud.AWS, "launch", _aws_answer("RunInstances", {"Instances": []}, launcher=True)),
    ("aws-run-instances-no-key", Cloud.AWS, "launch", _aws_answer("RunInstances", {}, launcher=True)),
    (
        "aws-describe-instance-without-fields",
        Cloud.AWS,
        "describe",
        _aws_answer("DescribeInstances", {"Reservations": [{"Instances": [{"InstanceId": "i-1"}]}]}),
    ),
    (
        "aws-describe-reservations-a-string",
        Cloud.AWS,
        "describe",
        _aws_answer("DescribeInstances", {"Reservations": "x"}),
    ),
    (
        "aws-zones-without-ids",
        Cloud.AWS,
        "launch",
        _aws_answer("DescribeAvailabilityZones", {"AvailabilityZones": [{"ZoneName": "us-east-1a"}]}),
    ),
    (
        "aws-terminate-not-implemented",
        Cloud.AWS,
        "terminate",
        _aws_answer(
            "TerminateInstances", NotImplementedError("The terminate_instances action has not been implemented")
        ),
    ),
    ("aws-placement-groups-unparsable", Cloud.AWS, "gang", _aws_answer("DescribePlacementGroups", _parser_error())),
    ("gcp-list-parse-error", Cloud.GCP, "describe", _gcp(list=_parse_error())),
    ("gcp-list-not-instances", Cloud.GCP, "describe", _gcp(list=[SimpleNamespace(status="RUNNING")])),
    ("gcp-get-without-status", Cloud.GCP, "launch", _gcp(get=SimpleNamespace(name="x"))),
    ("gcp-insert-result-value-error", Cloud.GCP, "launch", _gcp(insert=_Lro(ValueError("bad operation")))),
    ("gcp-delete-unicode", Cloud.GCP, "terminate", _gcp(delete=UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"))),
    ("gcp-policy-type-error", Cloud.GCP, "gang", _gcp(policies=_Policies())),
    (
        "gcp-labels-none",
        Cloud.GCP,
        "describe",
        _gcp(list=[SimpleNamespace(status="RUNNING", labels=None, metadata=None)]),
    ),
    ("azure-list-deserialization", Cloud.AZURE, "describe", _azure({"list": _deserialization_error()})),
    ("azure-list-a-list", Cloud.AZURE, "describe", _azure({"list": [_vm_as(["not", "a", "vm"])]})),
    ("azure-get-json-error", Cloud.AZURE, "launch", _azure({"get": json.JSONDecodeError("Expecting value", "<<", 0)})),
    ("azure-create-key-error", Cloud.AZURE, "launch", _azure({"create": _Poller(KeyError("properties"))})),
    ("azure-delete-runtime", Cloud.AZURE, "terminate", _azure({"delete": RuntimeError("pipeline closed")})),
    ("azure-ppg-index-error", Cloud.AZURE, "gang", _azure({}, {"get": IndexError("list index out of range")})),
]

PLACES = {
    Cloud.AWS: ("us-east-1", "use1-az1", "p4d.24xlarge"),
    Cloud.GCP: ("us-central1", "us-central1-a", "a2-highgpu-8g"),
    Cloud.AZURE: ("eastus", None, "Standard_ND96asr_v4"),
}
IDS = {Cloud.AWS: "us-east-1/i-0123456789abcdef0", Cloud.GCP: "us-central1-a/gpuprov-x", Cloud.AZURE: "gpuprov-x"}
SSH = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake gpuprov"
SUBNET = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/default"


def test_there_are_twenty_surprises_across_the_three_drivers() -> None:
    assert len(CASES) == 20 and len({c[0] for c in CASES}) == 20
    assert {c[1] for c in CASES} == set(Cloud)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def _driver(cloud: Cloud) -> Any:
    if cloud is Cloud.AWS:
        image = boto3.client("ec2", region_name="us-east-1").describe_images(Owners=["amazon"])["Images"][0]
        return AwsDriver(["us-east-1"], image=image["ImageId"], sleep=lambda _s: None)
    if cloud is Cloud.GCP:
        from google.auth.credentials import AnonymousCredentials

        fast = GcpPolling(initial=0.001, maximum=0.005, multiplier=1.0, timeout=5.0, retry_deadline=2.0)
        return GcpDriver("gpuprov-test", ["us-central1-a"], credentials=AnonymousCredentials(), poll=fast)
    return AzureDriver("s", "rg", "eastus", credential=object(), ssh_public_key=SSH, subnet_id=SUBNET)


def _request(cloud: Cloud, gang: bool) -> LaunchRequest:
    region, zone, itype = PLACES[cloud]
    return LaunchRequest(
        cloud=cloud,
        region=region,
        zone=zone,
        instance_type=itype,
        market=Market.ON_DEMAND,
        token="a1b2c3d4e5f6a1b2c3d4e5f6",
        owner="surprised",
        plan_id="p1",
        workload="training",
        placement_group="gpuprov-surprised-training-zone" if gang else None,
    )


def _verb(driver: Any, cloud: Cloud, verb: str) -> Any:
    if verb == "describe":
        return driver.describe("surprised")
    if verb == "terminate":
        return driver.terminate([IDS[cloud]])
    return driver.launch(_request(cloud, gang=verb == "gang"))


@pytest.mark.parametrize(("name", "cloud", "verb", "install"), CASES, ids=[c[0] for c in CASES])
def test_a_surprise_is_one_line_exit_4(
    name: str, cloud: Cloud, verb: str, install: Install, aws_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = _driver(cloud)
    install(driver)
    with pytest.raises(GpuprovError) as err:
        _verb(driver, cloud, verb)
    assert err.value.exit_code == 4, (name, type(err.value), err.value.message)
    assert "\n" not in err.value.message and "Traceback" not in err.value.message
    assert cloud.value in err.value.message.lower(), err.value.message

    # the same surprise through the CLI: one error line, exit 4
    cli_driver = _driver(cloud)
    install(cli_driver)
    _through_cli(cloud, verb, cli_driver, tmp_path, monkeypatch)


def _through_cli(cloud: Cloud, verb: str, driver: Any, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov.commands import drivers as driver_factory
    from provisioner.drivers.fake import FakeDriver

    monkeypatch.setenv("GPUPROV_CONFIG", str(tmp / "none.yaml"))
    monkeypatch.setattr(driver_factory, "configured", lambda _cfg: {cloud})
    others = {c: FakeDriver(c) for c in Cloud}
    if verb == "terminate":  # the fleet runs one instance there, for destroy to end
        region, zone, itype = PLACES[cloud]
        handle = InstanceHandle(
            cloud=cloud,
            instance_id=IDS[cloud],
            region=region,
            zone=zone,
            instance_type=itype,
            market=Market.ON_DEMAND,
            state="running",
            owner="surprised",
            plan_id="p1",
            token="t1",
            workload="training",
        )
        monkeypatch.setattr(driver, "describe", lambda owner: [handle] if owner == "surprised" else [])
    monkeypatch.setattr(
        driver_factory, "make", lambda wanted, *_a: {c: driver if c is cloud else others[c] for c in wanted}
    )
    if verb == "describe":
        args = ["status", "--owner", "surprised"]
    elif verb == "terminate":
        args = ["destroy", "--yes", "--owner", "surprised"]
    else:
        monkeypatch.setattr(driver, "describe", lambda _owner: [])
        region, zone, itype = PLACES[cloud]
        workload = "training" if verb == "gang" else "inference"
        doc = handmade(
            [
                alloc(
                    cloud.value, "on_demand", [1] * 24, itype=itype, region=region, zone=zone, workload=workload, gpus=8
                )
            ]
        )
        plan = tmp / "plan.json"
        plan.write_text(to_json(doc))
        args = ["apply", str(plan), "--yes", "--allow-stale", "--owner", "surprised", "--slot", "0"]
    r = CliRunner().invoke(app, args)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.exit_code == 4, (args, r.stdout[-500:], r.stderr[-1000:], r.exception)
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(line.startswith(("error:", "hint:", "warning:")) for line in r.stderr.splitlines() if line), r.stderr
