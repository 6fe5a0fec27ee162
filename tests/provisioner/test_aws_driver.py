"""The AWS driver against moto (EC2 lifecycle), with capacity and throttling injected through
botocore's event hooks (moto cannot produce them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError
from moto import mock_aws

from gpuprov.errors import CapacityError, CredentialsError, ProvisioningError, QuotaError, TransientError
from gpuprov.models import Cloud, Market
from provisioner.base import Driver, LaunchRequest
from provisioner.drivers.aws import AwsDriver
from tests.provisioner.contract import DriverContract
from tests.provisioner.fakes.ec2_placement import PlacementGroups, serve


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def ami() -> str:
    return str(boto3.client("ec2", region_name="us-east-1").describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


def make_driver(**kw: Any) -> AwsDriver:
    return AwsDriver(["us-east-1"], image=ami(), sleep=lambda _s: None, **kw)


def req(
    token: str,
    market: Market = Market.ON_DEMAND,
    owner: str = "fleet-a",
    zone: str = "use1-az1",
    itype: str = "p4d.24xlarge",
) -> LaunchRequest:
    return LaunchRequest(
        cloud=Cloud.AWS,
        region="us-east-1",
        zone=zone,
        instance_type=itype,
        market=market,
        token=token,
        owner=owner,
        plan_id="plan1",
        workload="training",
    )


def test_launch_tags_zone_and_spot(aws: None) -> None:
    d = make_driver()
    h = d.launch(req("tok1", Market.SPOT))
    assert h.instance_id.startswith("us-east-1/i-") and h.zone == "use1-az1"
    assert (h.owner, h.plan_id, h.token, h.workload, h.market) == ("fleet-a", "plan1", "tok1", "training", Market.SPOT)
    raw = boto3.client("ec2", region_name="us-east-1").describe_instances(InstanceIds=[h.instance_id.split("/")[1]])[
        "Reservations"
    ][0]["Instances"][0]
    assert raw["InstanceLifecycle"] == "spot"
    zone_name = {
        z["ZoneId"]: z["ZoneName"]
        for z in boto3.client("ec2", region_name="us-east-1").describe_availability_zones()["AvailabilityZones"]
    }["use1-az1"]
    assert raw["Placement"]["AvailabilityZone"] == zone_name
    assert {t["Key"] for t in raw["Tags"]} >= {"gpuprov-owner", "gpuprov-plan", "gpuprov-token", "gpuprov-workload"}


def test_same_token_twice_launches_once(aws: None) -> None:
    d = make_driver()
    a, b = d.launch(req("tok1")), d.launch(req("tok1"))
    assert a.instance_id == b.instance_id
    assert len(d.describe("fleet-a")) == 1


def test_describe_is_per_owner_and_terminate_is_idempotent(aws: None) -> None:
    d = make_driver()
    mine = d.launch(req("t1"))
    d.launch(req("t2", owner="fleet-b"))
    assert [h.instance_id for h in d.describe("fleet-a")] == [mine.instance_id]
    d.terminate([mine.instance_id])
    d.terminate([mine.instance_id, "us-east-1/i-0123456789abcdef0"])
    assert d.describe("fleet-a") == []
    again = d.launch(req("t1"))  # a terminated instance does not hold its token
    assert again.instance_id != mine.instance_id


@pytest.fixture
def moto_groups(monkeypatch: pytest.MonkeyPatch) -> Iterator[PlacementGroups]:
    """moto's server on loopback with the recorded placement-group answers in front."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    groups = PlacementGroups()
    with serve(groups) as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        yield groups


def test_placement_group_for_a_gang_is_created_once_then_found_by_name(moto_groups: PlacementGroups) -> None:
    """moto has no placement groups: the recorded EC2 answers (tests/fixtures/aws/placement_groups)
    go through botocore's real parser; moto launches the instances."""
    groups = moto_groups
    d = make_driver()
    name = "gpuprov-fleet-a-training-use1-az1"
    gang = dataclasses.replace(req("g1"), placement_group=name)
    d.launch(gang)
    d.launch(dataclasses.replace(gang, token="g2"))  # the same driver knows the group now
    assert groups.calls == [("DescribePlacementGroups", name), ("CreatePlacementGroup", name)]
    assert groups.groups[("us-east-1", name)]["strategy"] == "cluster"
    assert groups.groups[("us-east-1", name)]["owner"] == name
    assert groups.launched_in == [name, name]
    # another process (a new driver) finds it by name and creates nothing
    make_driver().launch(dataclasses.replace(gang, token="g3"))
    assert groups.calls[2:] == [("DescribePlacementGroups", name)]
    assert groups.launched_in == [name, name, name]
    assert len(make_driver().describe("fleet-a")) == 3


def test_a_placement_group_of_another_strategy_is_refused_by_name(moto_groups: PlacementGroups) -> None:
    moto_groups.groups[("us-east-1", "pg")] = {"name": "pg", "strategy": "spread", "owner": "x", "group_id": "pg-1"}
    d = make_driver()
    with pytest.raises(ProvisioningError, match="strategy spread"):
        d.launch(dataclasses.replace(req("s1"), placement_group="pg"))
    assert d.describe("fleet-a") == [] and moto_groups.launched_in == []


def _error(code: str, status: int = 500) -> Any:
    def handler(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        return (
            AWSResponse("https://x", status, {}, None),
            {
                "Error": {"Code": code, "Message": f"{code} for this test"},
                "ResponseMetadata": {"HTTPStatusCode": status},
            },
        )

    return handler


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("InsufficientInstanceCapacity", CapacityError),
        ("Unsupported", CapacityError),
        ("VcpuLimitExceeded", QuotaError),
        ("MaxSpotInstanceCountExceeded", QuotaError),
        ("UnauthorizedOperation", CredentialsError),
    ],
)
def test_errors_are_translated_with_the_pool(aws: None, code: str, error: type[Exception]) -> None:
    d = make_driver()
    d.launcher("us-east-1").meta.events.register("before-call.ec2.RunInstances", _error(code, 400))
    with pytest.raises(error) as err:
        d.launch(req("x", Market.SPOT))
    if isinstance(err.value, CapacityError):
        assert err.value.pool == ("aws", "use1-az1", "p4d.24xlarge", "spot")


def test_throttling_is_retried_then_succeeds_once(aws: None) -> None:
    d = make_driver(max_attempts=4)
    calls = {"n": 0}
    throttle = _error("RequestLimitExceeded", 503)

    def throttle_twice(**kw: Any) -> Any:
        calls["n"] += 1
        return throttle(**kw) if calls["n"] <= 2 else None  # None: on to moto

    d.launcher("us-east-1").meta.events.register("before-call.ec2.RunInstances", throttle_twice)
    d.launch(req("r1"))
    assert calls["n"] == 3
    assert len(d.describe("fleet-a")) == 1


def test_throttling_forever_is_a_transient_error(aws: None) -> None:
    d = make_driver(max_attempts=3)
    d.launcher("us-east-1").meta.events.register("before-call.ec2.RunInstances", _error("RequestLimitExceeded", 503))
    with pytest.raises(TransientError):
        d.launch(req("r2"))
    assert d.describe("fleet-a") == []


def test_a_failed_call_that_started_the_instance_is_not_repeated(aws: None) -> None:
    # The request reaches EC2 (moto starts the instance) but the client sees a 503, as after a
    # timeout: the retry must find the instance by its token instead of starting another.
    d = make_driver(max_attempts=4)
    seen = {"n": 0}

    def time_out_after_the_fact(**_: Any) -> None:
        seen["n"] += 1
        if seen["n"] == 1:
            raise ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com")

    d.launcher("us-east-1").meta.events.register("after-call.ec2.RunInstances", time_out_after_the_fact)
    d.launch(req("dup"))
    assert seen["n"] == 1
    assert len(d.describe("fleet-a")) == 1


def test_no_image_is_a_clear_error(aws: None) -> None:
    from gpuprov.errors import ProvisioningError

    with pytest.raises(ProvisioningError, match="no AWS image"):
        AwsDriver(["us-east-1"]).launch(req("x"))


class TestAwsContract(DriverContract):
    request_cloud, request_region, request_zone = Cloud.AWS, "us-east-1", "use1-az1"
    request_instance_type = "p4d.24xlarge"
    unknown_instance_id = "us-east-1/i-0123456789abcdef0"

    @pytest.fixture
    def driver(self, aws: None) -> Iterator[Driver]:
        yield make_driver()


def test_an_efa_gang_launches_with_an_efa_interface_in_the_subnet_and_groups(aws: None) -> None:
    """moto 5 accepts InterfaceType efa and placement group names on run_instances (it implements
    no placement groups: they are answered at botocore's before-call here; the recorded wire
    answers are the test above's); the request shape is what the test asserts, as botocore
    serialised it."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZoneId="use1-az1")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName="efa", Description="efa", VpcId=vpc)["GroupId"]
    d = make_driver(subnets={"use1-az1": subnet}, security_groups=[sg])
    sent: list[dict[str, Any]] = []
    d.launcher("us-east-1").meta.events.register(
        "before-parameter-build.ec2.RunInstances", lambda params, **_: sent.append(params)
    )
    d.client("us-east-1").meta.events.register(
        "before-call.ec2.CreatePlacementGroup",
        lambda **_: (AWSResponse("https://x", 200, {}, None), {"PlacementGroup": {}}),
    )
    d.client("us-east-1").meta.events.register(
        "before-call.ec2.DescribePlacementGroups",
        lambda **_: (AWSResponse("https://x", 200, {}, None), {"PlacementGroups": []}),
    )
    base = dict(cloud=Cloud.AWS, region="us-east-1", zone="use1-az1", owner="fleet-a", plan_id="p", workload="training")
    gang = d.launch(
        LaunchRequest(
            **base, instance_type="p4d.24xlarge", market=Market.ON_DEMAND, token="efa1", placement_group="pg-train"
        )
    )
    assert sent[0]["NetworkInterfaces"] == [
        {"DeviceIndex": 0, "SubnetId": subnet, "DeleteOnTermination": True, "Groups": [sg], "InterfaceType": "efa"}
    ]
    assert sent[0]["Placement"]["GroupName"] == "pg-train" and "SecurityGroupIds" not in sent[0]
    assert gang.state in ("pending", "running")
    # no gang (no placement group), or a type without EFA: a plain interface
    d.launch(LaunchRequest(**base, instance_type="p4d.24xlarge", market=Market.ON_DEMAND, token="plain1"))
    d.launch(
        LaunchRequest(**base, instance_type="g5.xlarge", market=Market.ON_DEMAND, token="noefa1", placement_group="pg")
    )
    assert [s["NetworkInterfaces"][0].get("InterfaceType") for s in sent[1:]] == [None, None]


def test_bootstrap_user_data_with_the_kubelet_line_is_the_instances_user_data(aws: None) -> None:
    import base64
    import shlex

    from gpuprov.bootstrap import Bootstrap

    script = '#!/bin/bash\nset -eu\n/etc/eks/bootstrap.sh prod --kubelet-extra-args "$KUBELET_EXTRA_ARGS"\n'
    driver = make_driver(bootstrap=Bootstrap({"aws": script}, kubelet=True))
    handle = driver.launch(req("tok-boot", market=Market.SPOT))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    iid = handle.instance_id.split("/", 1)[1]
    sent = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
    text = base64.b64decode(sent).decode()
    first, kubelet, rest = text.split("\n", 2)
    assert first == "#!/bin/bash" and rest == script.split("\n", 1)[1]
    assert shlex.split(kubelet) == [
        "export",
        "KUBELET_EXTRA_ARGS=--node-labels=gpuprov.io/workload=training,gpuprov.io/market=spot,gpuprov.io/plan=plan1"
        " --register-with-taints=nvidia.com/gpu=true:NoSchedule",
    ]
    # the same facts are the instance's tags, under the one key mapping
    tags = {
        t["Key"]: t["Value"]
        for t in ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["Tags"]
    }
    assert (tags["gpuprov-workload"], tags["gpuprov-market"], tags["gpuprov-plan"]) == ("training", "spot", "plan1")


def test_no_bootstrap_sends_no_user_data(aws: None) -> None:
    handle = make_driver().launch(req("tok-plain"))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    attr = ec2.describe_instance_attribute(InstanceId=handle.instance_id.split("/", 1)[1], Attribute="userData")
    assert not attr.get("UserData", {}).get("Value")


def test_a_workload_that_is_no_label_value_launches_nothing(aws: None) -> None:
    from gpuprov.bootstrap import Bootstrap
    from gpuprov.errors import ConfigError

    driver = make_driver(bootstrap=Bootstrap({"aws": "#!/bin/sh\n"}, kubelet=True))
    bad = LaunchRequest(
        cloud=Cloud.AWS,
        region="us-east-1",
        zone="use1-az1",
        instance_type="p4d.24xlarge",
        market=Market.ON_DEMAND,
        token="tok-bad",
        owner="fleet-a",
        plan_id="plan1",
        workload="x';rm -rf /;'",
    )
    with pytest.raises(ConfigError, match="not a valid Kubernetes label value"):
        driver.launch(bad)
    assert driver.describe("fleet-a") == []
