"""AWS commitment discovery through real boto3 clients answered by botocore's Stubber.

moto 5.2.5 does not implement DescribeReservedInstances nor DescribeCapacityReservations (nor any
Savings Plans call: the first test proves the EC2 ones), so the answers are queued with
``Stubber``, which validates every response against botocore's service model: that model is the
documented format. Prices: p4d.24xlarge us-east-1 on-demand 21.957642 and 1-year no-upfront
13.921094 (the catalog's, tests/fixtures/aws/PROVENANCE.md); the upfront figures are made up.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from commitments import aws
from commitments.records import Kind, known_in
from gpuprov.errors import CredentialsError
from gpuprov.models import Cloud, Market, Offer

NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)
START = datetime(2026, 6, 1, tzinfo=UTC)
END_1Y = datetime(2027, 6, 1, tzinfo=UTC)


def offer(itype: str, price: str, zone: str = "use1-az1", region: str = "us-east-1") -> Offer:
    return Offer(
        Cloud.AWS, region, zone, itype, "A100-40GB", 8, 40, 96, Decimal(1152), Market.ON_DEMAND, Decimal(price)
    )


OFFERS = [
    offer("p4d.24xlarge", "21.957642", "use1-az1"),
    offer("p4d.24xlarge", "21.957642", "use1-az4"),
    offer("g5.xlarge", "1.006", "use1-az4"),
    offer("p5.48xlarge", "55.04", "use1-az4"),
]


class FakeSession:
    """Hands discover the stubbed clients (botocore's real ones, made offline)."""

    def __init__(self) -> None:
        self.clients: dict[tuple[str, str], Any] = {}
        self.stubs: dict[tuple[str, str], Stubber] = {}

    def add(self, service: str, region: str) -> Stubber:
        client = boto3.session.Session(
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name=region
        ).client(service, region_name=region)
        self.clients[(service, region)] = client
        stub = Stubber(client)
        stub.activate()
        self.stubs[(service, region)] = stub
        return stub

    def client(self, service: str, region_name: str, config: Any = None) -> Any:
        return self.clients[(service, region_name)]


@pytest.fixture
def session() -> Iterator[FakeSession]:
    s = FakeSession()
    yield s
    for stub in s.stubs.values():
        stub.assert_no_pending_responses()
        stub.deactivate()


ACTIVE = {"Filters": [{"Name": "state", "Values": ["active"]}]}


def ri(rid: str, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "ReservedInstancesId": rid,
        "InstanceType": "p4d.24xlarge",
        "InstanceCount": 4,
        "Start": START,
        "End": END_1Y,
        "Duration": 31_536_000,
        "FixedPrice": 0.0,
        "UsagePrice": 0.0,
        "RecurringCharges": [{"Amount": 13.921094, "Frequency": "Hourly"}],
        "CurrencyCode": "USD",
        "InstanceTenancy": "default",
        "OfferingClass": "standard",
        "OfferingType": "No Upfront",
        "ProductDescription": "Linux/UNIX",
        "Scope": "Region",
        "State": "active",
    }
    base.update(kw)
    return base


def queue_region(stub: Stubber) -> None:
    stub.add_response(
        "describe_reserved_instances",
        {
            "ReservedInstances": [
                ri("11111111-aaaa-4bbb-8ccc-000000000001"),
                # partial upfront, zonal by name only: 60000 over 8760 h + 6.5/h
                ri(
                    "11111111-aaaa-4bbb-8ccc-000000000002",
                    InstanceCount=2,
                    FixedPrice=60000.0,
                    RecurringCharges=[{"Amount": 6.5, "Frequency": "Hourly"}],
                    OfferingType="Partial Upfront",
                    Scope="Availability Zone",
                    AvailabilityZone="us-east-1b",
                ),
                # all upfront, 3 years: 365000 over 26280 h
                ri(
                    "11111111-aaaa-4bbb-8ccc-000000000003",
                    InstanceType="g5.xlarge",
                    InstanceCount=1,
                    Duration=94_608_000,
                    End=datetime(2029, 6, 1, tzinfo=UTC),
                    FixedPrice=365000.0,
                    RecurringCharges=[],
                    OfferingType="All Upfront",
                ),
                # read back malformed: a negative count and a type with a space
                ri("11111111-aaaa-4bbb-8ccc-000000000004", InstanceCount=-2),
                ri("11111111-aaaa-4bbb-8ccc-000000000005", InstanceType="p4d 24xlarge;"),
            ]
        },
        ACTIVE,
    )
    stub.add_response(
        "describe_availability_zones",
        {
            "AvailabilityZones": [
                {"ZoneName": "us-east-1a", "ZoneId": "use1-az6", "RegionName": "us-east-1", "State": "available"},
                {"ZoneName": "us-east-1b", "ZoneId": "use1-az1", "RegionName": "us-east-1", "State": "available"},
            ]
        },
        {},
    )
    stub.add_response(
        "describe_capacity_reservations",
        {
            "CapacityReservations": [
                {
                    "CapacityReservationId": "cr-0123456789abcdef0",
                    "InstanceType": "p5.48xlarge",
                    "InstancePlatform": "Linux/UNIX",
                    "AvailabilityZone": "us-east-1d",
                    "AvailabilityZoneId": "use1-az4",
                    "Tenancy": "default",
                    "TotalInstanceCount": 2,
                    "AvailableInstanceCount": 1,
                    "State": "active",
                    "StartDate": START,
                    "EndDateType": "unlimited",
                    "CreateDate": START,
                },
                {
                    "CapacityReservationId": "cr-0fedcba9876543210",
                    "InstanceType": "x2iedn.32xlarge",
                    "InstancePlatform": "Linux/UNIX",
                    "AvailabilityZone": "us-east-1d",
                    "AvailabilityZoneId": "use1-az4",
                    "TotalInstanceCount": 1,
                    "State": "active",
                    "StartDate": START,
                    "EndDate": END_1Y,
                    "EndDateType": "limited",
                },
            ]
        },
        ACTIVE,
    )


def sp(pid: str, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "savingsPlanId": pid,
        "savingsPlanArn": f"arn:aws:savingsplans::123456789012:savingsplan/{pid}",
        "offeringId": "aaaaaaaa-0000-4000-8000-000000000001",
        "description": "1 year No Upfront Compute Savings Plan",
        "start": "2026-06-01T00:00:00.000Z",
        "end": "2027-06-01T00:00:00.000Z",
        "state": "active",
        "savingsPlanType": "Compute",
        "paymentOption": "No Upfront",
        "productTypes": ["EC2", "Fargate", "Lambda"],
        "currency": "USD",
        "commitment": "10.0",
        "upfrontPaymentAmount": "0.0",
        "recurringPaymentAmount": "10.0",
        "termDurationInSeconds": 31_536_000,
    }
    base.update(kw)
    return base


def queue_savings_plans(stub: Stubber) -> None:
    stub.add_response(
        "describe_savings_plans",
        {
            "savingsPlans": [
                sp("5a5a5a5a-0000-4000-8000-000000000001"),
                sp(
                    "5a5a5a5a-0000-4000-8000-000000000002",
                    savingsPlanType="SageMaker",
                    productTypes=["SageMaker"],
                ),
            ],
            "nextToken": "page2",
        },
        {"states": ["active"]},
    )
    stub.add_response(
        "describe_savings_plans",
        {
            "savingsPlans": [
                sp(
                    "5a5a5a5a-0000-4000-8000-000000000003",
                    savingsPlanType="EC2Instance",
                    ec2InstanceFamily="p5",
                    region="us-east-1",
                    commitment="25.5",
                    termDurationInSeconds=94_608_000,
                    end="2029-06-01T00:00:00.000Z",
                ),
            ]
        },
        {"states": ["active"], "nextToken": "page2"},
    )


def test_moto_implements_neither_ec2_call() -> None:
    """Why Stubber: moto 5 answers these two calls with 'not yet implemented'."""
    from moto import mock_aws

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        for call in (ec2.describe_reserved_instances, ec2.describe_capacity_reservations):
            with pytest.raises(Exception) as raised:
                call()
            assert "not yet implemented" in str(raised.value).lower() or isinstance(raised.value, NotImplementedError)


def test_discover_reads_each_kind_with_effective_prices(session: FakeSession) -> None:
    queue_region(session.add("ec2", "us-east-1"))
    queue_savings_plans(session.add("savingsplans", "us-east-1"))
    places = {("aws", o.region, o.instance_type) for o in OFFERS}
    records, notes = aws.discover(["us-east-1"], OFFERS, NOW, session=session, known=known_in(sorted(places)))
    by_id = {r.id: r for r in records}

    ri1 = by_id["aws:reserved_instance:11111111-aaaa-4bbb-8ccc-000000000001"]
    assert (ri1.kind, ri1.instance_type, ri1.region, ri1.zone, ri1.count, ri1.term) == (
        Kind.RESERVED_INSTANCE,
        "p4d.24xlarge",
        "us-east-1",
        None,
        4,
        "1y",
    )
    assert ri1.hourly_usd == Decimal("13.921094")
    assert (ri1.starts, ri1.ends, ri1.source) == (START, END_1Y, "aws")

    ri2 = by_id["aws:reserved_instance:11111111-aaaa-4bbb-8ccc-000000000002"]
    assert ri2.zone == "use1-az1"  # us-east-1b mapped to its AZ id
    assert abs(ri2.hourly_usd - Decimal("13.3493150685")) < Decimal("1e-9")  # 6.84931506849 + 6.5

    ri3 = by_id["aws:reserved_instance:11111111-aaaa-4bbb-8ccc-000000000003"]
    assert ri3.term == "3y"
    assert abs(ri3.hourly_usd - Decimal("13.8888888889")) < Decimal("1e-9")  # 365000 / 26280

    cr = by_id["aws:capacity_reservation:cr-0123456789abcdef0"]
    assert (cr.kind, cr.zone, cr.count, cr.hourly_usd) == (Kind.CAPACITY_RESERVATION, "use1-az4", 2, Decimal("55.04"))
    assert cr.ends == datetime(2027, 11, 10, 12, tzinfo=UTC)  # open-ended: a year after discovery

    compute = by_id["aws:savings_plan:5a5a5a5a-0000-4000-8000-000000000001"]
    assert (compute.kind, compute.family, compute.region, compute.usd_per_hour, compute.term) == (
        Kind.SAVINGS_PLAN,
        None,
        None,
        Decimal("10.0"),
        "1y",
    )
    assert compute.compute_savings_plan
    ec2sp = by_id["aws:savings_plan:5a5a5a5a-0000-4000-8000-000000000003"]
    assert (ec2sp.family, ec2sp.region, ec2sp.usd_per_hour, ec2sp.term) == ("p5", "us-east-1", Decimal("25.5"), "3y")

    assert len(records) == 6
    joined = "\n".join(notes)
    assert len(notes) == 4, joined
    assert "11111111-aaaa-4bbb-8ccc-000000000004: count must be at least 1, got -2" in joined
    assert "11111111-aaaa-4bbb-8ccc-000000000005: instance_type must be" in joined  # the value not echoed
    assert "p4d 24xlarge;" not in joined
    assert "cr-0fedcba9876543210: no on-demand price of x2iedn.32xlarge in us-east-1" in joined
    assert "5a5a5a5a-0000-4000-8000-000000000002: a SageMaker Savings Plan covers no EC2 usage" in joined
    assert all("\n" not in n and "Traceback" not in n for n in notes)


def test_regions_come_from_describe_regions_and_a_failing_region_is_a_note(session: FakeSession) -> None:
    home = session.add("ec2", "us-east-1")
    home.add_response("describe_regions", {"Regions": [{"RegionName": "us-east-1"}, {"RegionName": "us-west-2"}]}, {})
    queue_region(home)
    west = session.add("ec2", "us-west-2")
    west.add_client_error("describe_reserved_instances", "OptInRequired", "not subscribed", 401, expected_params=ACTIVE)
    queue_savings_plans(session.add("savingsplans", "us-east-1"))
    records, notes = aws.discover([], OFFERS, NOW, session=session)
    assert len([r for r in records if r.kind is Kind.RESERVED_INSTANCE]) == 3
    assert any(n.startswith("aws us-west-2: AWS DescribeReservedInstances failed: OptInRequired") for n in notes)


def test_refused_credentials_fail_the_cloud_in_one_line(session: FakeSession) -> None:
    stub = session.add("ec2", "us-east-1")
    stub.add_client_error("describe_reserved_instances", "AuthFailure", "AWS was not able to validate", 401)
    with pytest.raises(CredentialsError, match="AWS refused DescribeReservedInstances: AuthFailure"):
        aws.discover(["us-east-1"], OFFERS, NOW, session=session)
