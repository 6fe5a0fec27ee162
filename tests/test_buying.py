"""What apply says is what you pay: reservations a plan recommends are bought first, or their
instances bill on demand; the dry run, apply --yes, --buy-later and status, on the fake clouds.
Every figure is recomputed here from the plan document's own prices."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from commitments.purchase import purchase, to_buy
from commitments.records import Commitment, Kind
from gpuprov.cli import app
from gpuprov.plandoc import from_json

runner = CliRunner()
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def run(*args: str) -> Any:
    return runner.invoke(app, list(args))


def aws_gang_plan() -> Any:
    r = run(
        "plan", "--gpus", "32", "--type", "a100-40gb", "--node-gpus", "8", "--clouds", "aws", "--save", "-o", "json"
    )
    assert r.exit_code == 0, r.stderr
    doc = from_json(r.stdout)
    assert doc.reservations, "this request buys reservations on the bundled catalog"
    return doc


def ri(cid: str, count: int, region: str, starts: datetime = NOW - timedelta(days=1)) -> Commitment:
    return Commitment(
        id=cid,
        cloud="aws",
        kind=Kind.RESERVED_INSTANCE,
        starts=starts,
        ends=starts + timedelta(days=365),
        instance_type="p4d.24xlarge",
        region=region,
        count=count,
        hourly_usd=Decimal("13.92"),
        term="1y",
    )


def test_to_buy_counts_what_no_held_commitment_covers(fake_clouds: dict[Any, Any]) -> None:
    doc = aws_gang_plan()
    [r] = doc.reservations
    assert [b.missing for b in to_buy(doc, [], NOW)] == [r.instances]
    assert [b.missing for b in to_buy(doc, [ri("a", 1, r.region)], NOW)] == [r.instances - 1]
    assert to_buy(doc, [ri("a", 1, r.region), ri("b", r.instances, r.region)], NOW) == []
    elsewhere = "us-west-2" if r.region != "us-west-2" else "us-east-1"
    assert [b.missing for b in to_buy(doc, [ri("w", 5, elsewhere)], NOW)] == [r.instances]
    expired = ri("old", 5, r.region, starts=NOW - timedelta(days=400))
    assert [b.missing for b in to_buy(doc, [expired], NOW)] == [r.instances]
    b = to_buy(doc, [], NOW)[0]
    assert b.liability_usd == (r.unit_hourly_usd * r.instances * r.term_hours).quantize(Decimal("0.01"))
    assert r.on_demand_unit_hourly_usd is not None and r.on_demand_unit_hourly_usd > r.unit_hourly_usd
    assert b.on_demand_hourly_usd == r.on_demand_unit_hourly_usd * r.instances


def test_the_dry_run_says_what_to_buy_and_what_it_bills_until_then(fake_clouds: dict[Any, Any]) -> None:
    doc = aws_gang_plan()
    [r] = doc.reservations
    spot = [a for a in doc.allocations if a.instances]
    r_out = run("apply", doc.plan_id, "-o", "json")
    assert r_out.exit_code == 0, r_out.stderr
    out = json.loads(r_out.stdout)
    [buy] = out["to_buy"]
    assert (buy["instances"], buy["instance_type"], buy["kind"]) == (r.instances, r.instance_type, "reserved_instance")
    assert Decimal(buy["liability_usd"]) == r.commitment_total_usd
    spot_usd = sum((a.unit_hourly_usd * a.instances for a in spot), Decimal(0))
    assert r.on_demand_unit_hourly_usd is not None
    until = spot_usd + r.on_demand_unit_hourly_usd * r.instances  # every reserved instance on demand
    once = spot_usd + r.unit_hourly_usd * r.instances
    assert Decimal(out["hourly_usd_before"]) == 0
    assert Decimal(out["hourly_usd_after"]) == until
    assert Decimal(out["hourly_usd_once_bought"]) == once == doc.costs.hourly_usd
    table = run("apply", doc.plan_id)
    assert "reservations to buy first" in table.stdout and "purchase-reserved-instances-offering" in table.stdout
    assert f"${until:,.2f} until the reservations are bought" in table.stdout


def test_apply_refuses_unbought_reservations_unless_told_and_status_bills_them_on_demand(
    fake_clouds: dict[Any, Any], tmp_path: Path
) -> None:
    doc = aws_gang_plan()
    [r] = doc.reservations
    refused = run("apply", doc.plan_id, "--yes", "--allow-stale")
    assert refused.exit_code == 4
    assert f"{r.instances}× {r.instance_type} in {r.location}" in refused.stderr and "--buy-later" in refused.stderr
    assert all(d.describe("default") == [] for d in fake_clouds.values())  # nothing launched
    done = run("apply", doc.plan_id, "--yes", "--allow-stale", "--buy-later", "-o", "json")
    assert done.exit_code == 0, done.stderr
    status = json.loads(run("status", "-o", "json").stdout)
    [group] = [g for g in status["groups"] if g["market"] == r.market]
    assert r.on_demand_unit_hourly_usd is not None
    assert Decimal(group["hourly_usd"]) == r.on_demand_unit_hourly_usd * r.instances
    assert group["note"] == f"{r.instances} billed on demand: reservation not bought"
    # bought (and in the inventory): the same fleet bills at the reservation's rate, apply goes ahead
    held = tmp_path / "held.yaml"
    held.write_text(
        "commitments:\n"
        f"  - {{id: ri-1, cloud: aws, kind: reserved_instance, instance_type: {r.instance_type}, "
        f'region: {r.region}, count: {r.instances}, hourly_usd: {r.unit_hourly_usd}, starts: "2026-01-01", term: 1y}}\n'
    )
    assert run("commitments", "import", str(held)).exit_code == 0
    status = json.loads(run("status", "-o", "json").stdout)
    [group] = [g for g in status["groups"] if g["market"] == r.market]
    assert Decimal(group["hourly_usd"]) == r.unit_hourly_usd * r.instances and group["note"] is None
    again = run("apply", doc.plan_id, "--yes", "--allow-stale", "-o", "json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["to_buy"] == []


def test_each_cloud_is_told_the_purchase_it_needs(fake_clouds: dict[Any, Any]) -> None:
    doc = aws_gang_plan()
    [r] = doc.reservations
    aws = purchase(r, 3)
    assert f"--instance-type {r.instance_type}" in aws and "--instance-count 3" in aws and f"--region {r.region}" in aws
    assert "--min-duration 31536000" in aws and '"No Upfront"' in aws
    from dataclasses import replace

    gcp = replace(
        r,
        cloud="gcp",
        region="us-central1",
        zone="us-central1-a",
        instance_type="a2-megagpu-16g",
        gpus_per_instance=16,
        term_hours=26280,
    )
    line = purchase(gcp, 2, lambda t, reg: (96, Decimal("1360")))
    assert "--plan=36-month" in line and "--type=accelerator-optimized" in line
    assert "--resources=vcpu=192,memory=2720GB" in line and "type=nvidia-tesla-a100,count=32" in line
    azure = replace(r, cloud="azure", region="eastus", zone=None, instance_type="Standard_ND96asr_v4")
    line = purchase(azure, 4)
    assert "--sku Standard_ND96asr_v4" in line and "--quantity 4" in line and "--term P1Y" in line
