"""Savings Plans rates: DescribeSavingsPlansOfferingRates answered by botocore's Stubber (it
validates each response against the savingsplans service model, the documented format), the
discounts they give, the store, and their precedence over the config's ``savings_plans``.

Rates are made up as on-demand × (1 − a round discount), so the expected discounts are those
round numbers; on-demand prices are the bundled catalog's us-east-1 ones
(tests/fixtures/aws/PROVENANCE.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.commands import common
from gpuprov.models import Cloud, Market, Offer
from gpuprov.store.savings_plans import SavingsPlanRates
from pricing import savings_plans
from tests.commitments.test_aws_discover import FakeSession

R = "us-east-1"


def offer(itype: str, price: str) -> Offer:
    return Offer(Cloud.AWS, R, "use1-az1", itype, "A100-40GB", 8, 40, 96, Decimal(1), Market.ON_DEMAND, Decimal(price))


OFFERS = [
    offer("p4d.24xlarge", "21.957642"),
    offer("g5.xlarge", "1.006"),
    offer("g5.12xlarge", "5.672"),
    offer("p5.48xlarge", "55.04"),
]


def result(plan: str, seconds: int, itype: str, rate: str, payment: str = "No Upfront", **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "savingsPlanOffering": {
            "offeringId": "0f1e2d3c-4b5a-4968-8776-000000000001",
            "paymentOption": payment,
            "planType": plan,
            "durationSeconds": seconds,
            "currency": "USD",
            "planDescription": f"{seconds // 31_536_000} year {payment} {plan}",
        },
        "rate": rate,
        "unit": "Hrs",
        "productType": "EC2",
        "serviceCode": "AmazonEC2",
        "usageType": f"USE1-BoxUsage:{itype}",
        "operation": "RunInstances",
        "properties": [
            {"name": "region", "value": R},
            {"name": "instanceType", "value": itype},
            {"name": "instanceFamily", "value": itype.split(".")[0]},
            {"name": "productDescription", "value": "Linux/UNIX"},
            {"name": "tenancy", "value": "shared"},
        ],
    }
    base.update(kw)
    return base


REQUEST = {
    "savingsPlanPaymentOptions": ["No Upfront"],
    "savingsPlanTypes": ["Compute", "EC2Instance"],
    "products": ["EC2"],
    "serviceCodes": ["AmazonEC2"],
    "operations": ["RunInstances"],
    "filters": [
        {"name": "region", "values": [R]},
        {"name": "tenancy", "values": ["shared"]},
        {"name": "productDescription", "values": ["Linux/UNIX"]},
        {"name": "instanceType", "values": ["g5.12xlarge", "g5.xlarge", "p4d.24xlarge", "p5.48xlarge"]},
    ],
    "maxResults": 1000,
}


def test_fetch_pages_and_turns_rates_into_discounts() -> None:
    session = FakeSession()
    stub = session.add("savingsplans", R)
    stub.add_response(
        "describe_savings_plans_offering_rates",
        {
            "searchResults": [
                result("Compute", 31_536_000, "p4d.24xlarge", "15.80950224"),  # 28 % off 21.957642
                result("EC2Instance", 94_608_000, "p4d.24xlarge", "9.8809389"),  # 55 % off
                result("Compute", 31_536_000, "g5.xlarge", "0.8048"),  # 20 % off 1.006
            ],
            "nextToken": "cGFnZTI=",
        },
        REQUEST,
    )
    stub.add_response(
        "describe_savings_plans_offering_rates",
        {
            "searchResults": [
                result("Compute", 31_536_000, "g5.12xlarge", "4.254"),  # 25 % off 5.672
                result("Compute", 31_536_000, "p5.48xlarge", "60.0"),  # above on-demand: no discount
                result("Compute", 31_536_000, "p4d.24xlarge", "14.0", payment="All Upfront"),  # not No Upfront
                result(
                    "Compute",
                    31_536_000,
                    "p4d.24xlarge",
                    "1.0",
                    usageType="USE1-DedicatedUsage:p4d.24xlarge",
                    properties=[
                        {"name": "instanceType", "value": "p4d.24xlarge"},
                        {"name": "tenancy", "value": "dedicated"},
                    ],
                ),
            ]
        },
        {**REQUEST, "nextToken": "cGFnZTI="},
    )
    with stub:
        rates, notes = savings_plans.fetch(R, OFFERS, session=session)
    stub.assert_no_pending_responses()
    got = {(r.kind, r.instance_type): r.discount for r in rates}
    assert got == {
        ("compute_1y", "p4d.24xlarge"): Decimal("0.28"),
        ("ec2_instance_3y", "p4d.24xlarge"): Decimal("0.55"),
        ("compute_1y", "g5.xlarge"): Decimal("0.2"),
        ("compute_1y", "g5.12xlarge"): Decimal("0.25"),
    }
    assert notes == ["compute_1y p5.48xlarge in us-east-1: rate '60.0' is no discount"]
    # a family's discount is its smallest: g5 gets 20 %, not 25 %
    assert savings_plans.discounts(rates) == {
        "compute_1y": {"p4d": Decimal("0.28"), "g5": Decimal("0.2")},
        "ec2_instance_3y": {"p4d": Decimal("0.55")},
    }


def test_merge_lets_refreshed_rates_win_and_the_config_fill_the_rest() -> None:
    configured = {
        "compute_1y": {"*": Decimal("0.15"), "p4d": Decimal("0.2")},
        "ec2_instance_1y": {"p5": Decimal("0.3")},
    }
    refreshed = {
        "compute_1y": {"p4d": Decimal("0.28"), "g5": Decimal("0.2")},
        "ec2_instance_3y": {"p4d": Decimal("0.55")},
    }
    assert savings_plans.merge(configured, refreshed) == {
        "compute_1y": {"*": Decimal("0.15"), "p4d": Decimal("0.28"), "g5": Decimal("0.2")},
        "ec2_instance_1y": {"p5": Decimal("0.3")},
        "ec2_instance_3y": {"p4d": Decimal("0.55")},
    }
    assert configured["compute_1y"]["p4d"] == Decimal("0.2")  # the config's table is not changed


def test_plans_get_stored_rates_over_the_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("savings_plans: {compute_1y: {'*': 0.15, p4d: 0.2}}\n")
    monkeypatch.setenv("GPUPROV_CONFIG", str(cfg))
    assert common.savings_plan_discounts() == {"compute_1y": {"*": Decimal("0.15"), "p4d": Decimal("0.2")}}

    stored = [savings_plans.Rate("compute_1y", R, "p4d.24xlarge", Decimal("15.80950224"), Decimal("21.957642"))]
    monkeypatch.setattr(savings_plans, "fetch", lambda region, offers: (stored if region == R else [], []))
    run = CliRunner().invoke(app, ["commitments", "rates", "refresh", "--region", R])
    assert run.exit_code == 0, run.output
    assert "stored 1 Savings Plans rates for us-east-1" in run.stdout
    assert SavingsPlanRates().list() == [stored[0].row()]
    assert common.savings_plan_discounts() == {"compute_1y": {"*": Decimal("0.15"), "p4d": Decimal("0.28")}}

    shown = CliRunner().invoke(app, ["commitments", "rates", "list", "-o", "json"])
    assert shown.exit_code == 0, shown.output
    body = json.loads(shown.stdout)
    assert body["rates"][0]["discount"] == "0.28"
    assert body["discounts"] == {"compute_1y": {"*": "0.15", "p4d": "0.28"}}

    # another region's refresh keeps us-east-1's rates
    SavingsPlanRates().save("us-west-2", [], datetime(2026, 11, 1, tzinfo=UTC))
    assert SavingsPlanRates().list() == [stored[0].row()]
    assert set(SavingsPlanRates().fetched()) == {"us-east-1", "us-west-2"}
