"""``gpuprov bill report`` and ``commitments list`` as a user runs them: a fleet applied without the
rebalancer (its plan named with --plan), a bill written here, bad flags."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.store.plans import PlanStore
from gpuprov.store.state import StateStore
from tests.billing.month import HEADER
from tests.plans import alloc, handmade

T0 = datetime(2026, 6, 1, tzinfo=UTC)
OD = Decimal("32.7726")
ARN = "arn:aws:ec2:us-east-1:123456789012:reserved-instances/ri-1"


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def row(hour: int, **kw: str) -> dict[str, str]:
    start = T0 + timedelta(hours=hour)
    return {
        "BilledCost": str(OD),
        "EffectiveCost": str(OD),
        "ListCost": str(OD),
        "BillingAccountId": "123456789012",
        "BillingCurrency": "USD",
        "BillingPeriodStart": "2026-06-01T00:00:00Z",
        "BillingPeriodEnd": "2026-07-01T00:00:00Z",
        "ChargeCategory": "Usage",
        "ChargePeriodStart": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ChargePeriodEnd": (start + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ConsumedQuantity": "1",
        "ConsumedUnit": "Hours",
        "PricingCategory": "Standard",
        "ProviderName": "AWS",
        "RegionId": "us-east-1",
        "ResourceId": "i-0aaa",
        "ServiceCategory": "Compute",
        "SkuMeter": "BoxUsage:p4d.24xlarge",
        "Tags": json.dumps({"gpuprov-owner": "team-a", "gpuprov-workload": "inference", "gpuprov-market": "on_demand"}),
        **kw,
    }


def write(path: Path, rows: list[dict[str, str]]) -> str:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, HEADER, restval="")
        w.writeheader()
        w.writerows(rows)
    return str(path)


@pytest.fixture
def applied(tmp_path: Path) -> str:
    """Plan p1 (one p4d on demand for inference) saved, its instance i-0aaa journalled as launched."""
    doc = handmade([alloc("aws", "on_demand", [1] * 24, itype="p4d.24xlarge", gpus=8, unit=str(OD))])
    PlanStore().save(doc)
    state = StateStore()
    pool = ("aws", "us-east-1", "use1-az1", "p4d.24xlarge", "on_demand", "inference")
    for iid in ("us-east-1/i-0aaa", "us-east-1/i-0bbb"):
        entry = state.begin("team-a", doc.plan_id, "launch", iid[-4:], pool, T0)
        state.finish(entry, T0, instance_id=iid)
    return doc.plan_id


def test_a_fleet_without_history_reports_against_the_plan_named(tmp_path: Path, applied: str) -> None:
    rows = [row(h) for h in range(24)]
    rows[5] = row(5, BilledCost="36.00", EffectiveCost="36.00")  # one dearer hour
    rows += [row(7, ResourceId="i-0zzz")]  # launched by hand with the fleet's tags
    assert run("bill", "import", write(tmp_path / "bill.csv", rows))[0] == 0
    code, out, err = run("bill", "report", "--owner", "team-a", "--plan", applied, "--by", "plan", "-o", "json")
    assert code == 0, err
    body = json.loads(out)
    assert body["totals"]["planned_usd"] == f"{OD * 24:.2f}"
    assert body["totals"]["causes"] == {
        "price_change": f"{Decimal('36.00') - OD:.2f}",
        "off_plan_instances": f"{OD:.2f}",
    }
    assert [s["resource_id"] for s in body["unknown_to_fleet"]] == ["i-0zzz"]
    assert [s["instance_id"] for s in body["missing_from_bill"]] == ["us-east-1/i-0bbb"]
    assert any("no rebalancer history" in n for n in body["notes"])
    code, out, err = run("bill", "report", "--owner", "team-a", "--plan", applied)
    assert code == 0 and "planned instances" not in out and "off-plan instances" in out and "i-0zzz" in out
    assert "warning: fleet team-a has no rebalancer history" in err


def test_the_chart(tmp_path: Path, applied: str) -> None:
    pytest.importorskip("matplotlib")
    run("bill", "import", write(tmp_path / "bill.csv", [row(h) for h in range(24)]))
    png = tmp_path / "bill.png"
    code, _out, err = run("bill", "report", "--owner", "team-a", "--plan", applied, "--chart", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--by", "week"], "--by 'week': choose from day, plan, workload, market"),
        (["--from", "yesterday"], "--from: not a date or ISO 8601 time"),
        (["--from", "2026-06-02", "--to", "2026-06-01"], "the report range is empty"),
        (["--owner", "Team A"], "is not a valid fleet name"),
        (["--plan", "nope"], "no saved plan 'nope'"),
        (["--chart", "bill.svg"], "--chart writes a PNG"),
        (["-o", "yaml"], "unknown output format"),
    ],
)
def test_bad_flags_are_one_line(tmp_path: Path, applied: str, args: list[str], expected: str) -> None:
    run("bill", "import", write(tmp_path / "bill.csv", [row(0)]))
    code, _out, err = run("bill", "report", "--owner", "team-a", *args)
    assert code == 2 and expected in err.splitlines()[0], err


def test_no_bill_yet() -> None:
    code, _out, err = run("bill", "report", "--owner", "team-a")
    assert code == 2 and "no bill imported yet" in err


def test_commitments_list_shows_the_bills_utilization(tmp_path: Path) -> None:
    held = tmp_path / "held.yaml"
    held.write_text(
        "commitments:\n  - {id: ri-1, cloud: aws, kind: reserved_instance, instance_type: p4d.24xlarge,\n"
        '     region: us-east-1, count: 1, term: 1y, hourly_usd: 20, starts: "2026-06-01"}\n'
        "  - {id: ri-2, cloud: aws, kind: reserved_instance, instance_type: p4d.24xlarge,\n"
        '     region: us-east-1, count: 1, term: 1y, hourly_usd: 20, starts: "2026-06-01"}\n'
    )
    assert run("commitments", "import", str(held))[0] == 0
    used = {"PricingCategory": "Committed", "CommitmentDiscountId": ARN, "CommitmentDiscountStatus": "Used"}
    rows = [row(h, BilledCost="0", EffectiveCost="20", **used) for h in range(3)]
    rows.append(
        row(
            3,
            BilledCost="0",
            EffectiveCost="20",
            ResourceId=ARN,
            Tags="{}",
            **{**used, "CommitmentDiscountStatus": "Unused"},
        )
    )
    run("bill", "import", write(tmp_path / "bill.csv", rows))
    code, out, err = run("commitments", "list", "-o", "json")
    assert code == 0, err
    by = {r["id"]: r["billed"] for r in json.loads(out)}
    assert by["ri-2"] is None  # the bill does not show it
    assert by["ri-1"]["utilization"] == "0.7500" and by["ri-1"]["unused_usd"] == "20"  # 3 used hours of 4
    assert by["ri-1"]["commitment_discount_id"] == ARN
    code, out, _ = run("commitments", "list")
    assert code == 0 and "billed use" in out and "75%" in out
    # the planner counts on both held p4d reservations; the bill says ri-1 was used 75%
    code, out, err = run("plan", "--gpus", "16", "--type", "a100-40gb", "--clouds", "aws", "--region", "us-east-1")
    assert code == 0, err
    assert "warning: held commitment ri-1: the bill shows it 75% used from 2026-06-01 to 2026-06-01" in err
    assert "held commitment ri-2:" not in err  # no bill shows it: nothing said


def test_the_report_on_sqlite_and_postgresql(tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_DATABASE_URL", db_url)
    doc = handmade([alloc("aws", "on_demand", [1] * 24, itype="p4d.24xlarge", gpus=8, unit=str(OD))])
    PlanStore(db_url).save(doc)
    rows = [row(h) for h in range(24)] + [row(3, ResourceId="i-0zzz")]
    assert run("bill", "import", write(tmp_path / "bill.csv", rows))[0] == 0
    code, out, err = run("bill", "report", "--owner", "team-a", "--plan", doc.plan_id, "-o", "json")
    assert code == 0, err
    body = json.loads(out)
    assert body["totals"]["causes"] == {"off_plan_instances": f"{OD:.2f}"}
    assert body["totals"]["planned_usd"] == f"{OD * 24:.2f}" and len(body["groups"]) == 1
