"""A simulated month: the rebalancer runs a fleet (tests/billing/month.py), the fake cloud's meter
is written out as a FOCUS export, and ``gpuprov bill report`` must find the month billed exactly
as planned (0.00), then, with three things injected into the same month's bill (a price rise, an
instance launched outside gpuprov with the fleet's tags, a reservation nothing uses), each under
its own cause with the amount the meter says, computed here from the meter's own records."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.models import Cloud, Market
from gpuprov.store.plans import PlanStore
from gpuprov.store.state import FleetStore
from provisioner.base import LaunchRequest
from tests.billing.month import OWNER, Idle, MeteredDriver, PriceBook, focus_export, simulate

START = datetime(2026, 6, 1, tzinfo=UTC)
HOURS = 30 * 24
END = START + timedelta(hours=HOURS)
RISE_AT = START + timedelta(days=12)
RISEN = Decimal("36.05")
IDLE_FROM = START + timedelta(days=20)
IDLE_RATE = Decimal("40.00")
ORPHAN_AT = 5 * 24 + 9  # day 6, 09:00: launched by hand after the pass of 08:00


def cli(*args: str) -> dict:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout) if "-o" in args else {}


def hours_of(run, since: datetime = START, until: datetime = END) -> int:  # type: ignore[no-untyped-def]
    a, b = max(run.start, since), min(run.end or END, until)
    return max(0, int((b - a).total_seconds() // 3600))


@pytest.fixture
def month_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    shm = Path("/dev/shm")  # ~800 small commits: in memory where the system offers it
    folder = Path(__import__("tempfile").mkdtemp(dir=shm if shm.is_dir() else tmp_path))
    url = f"sqlite:///{folder / 'month.db'}"
    monkeypatch.setenv("GPUPROV_DATABASE_URL", url)
    yield url
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def test_a_month_reconciles_and_injected_causes_land_under_their_cause(tmp_path: Path, month_db: str) -> None:
    orphan: dict[str, str] = {}

    def after(hour: int, driver: MeteredDriver, plan_id: str) -> None:
        if hour >= ORPHAN_AT - 1 and not orphan:
            driver.clock.at = START + timedelta(hours=ORPHAN_AT)
            h = driver.launch(
                LaunchRequest(
                    cloud=Cloud.AWS,
                    region="us-east-1",
                    zone="use1-az2",  # a pool the plan does not use: the next pass ends it
                    instance_type="p4d.24xlarge",
                    market=Market.SPOT,
                    token="launched-by-hand",
                    owner=OWNER,
                    plan_id=plan_id,
                    workload="training",
                )
            )
            orphan["id"] = h.instance_id

    meter = simulate(month_db, START, HOURS, after, every=24)
    history = FleetStore(month_db).history(OWNER, limit=10_000)
    assert {r.decision for r in history} == {"keep"}  # prices never moved for the rebalancer
    doc = PlanStore(month_db).get(history[0].plan_after or "")

    # -- the month as billed: exactly the plan -----------------------------------------------------
    clean = focus_export(tmp_path / "clean.csv", meter, PriceBook(), START, END, skip={orphan["id"]})
    cli("bill", "import", str(tmp_path / "clean.csv"), "-o", "json")
    report = cli("bill", "report", "--owner", OWNER, "--by", "workload", "-o", "json")
    planned = sum((doc.costs.slot_usd[doc.slot_at(START + timedelta(hours=k))] for k in range(HOURS)), Decimal(0))
    billed = sum((Decimal(r["EffectiveCost"]) for r in clean), Decimal(0))
    assert planned == billed  # the fleet ran the plan: a fact of the simulation, checked without gpuprov
    t = report["totals"]
    assert (t["planned_usd"], t["effective_usd"], t["billed_usd"]) == (f"{planned:.2f}",) * 3
    assert t["difference_usd"] == "0.00" and t["causes"] == {}
    assert report["hours"] == HOURS and report["unknown_to_fleet"] == [] and report["missing_from_bill"] == []
    assert sum(Decimal(g["planned_usd"]) for g in report["groups"]) == planned
    assert {g["key"] for g in report["groups"]} == {w for w in doc.demand}

    # -- the same month with a price rise, a hand-launched instance and an idle reservation --------
    risen = next(a for a in doc.allocations if a.market == "on_demand")
    book = PriceBook(rises=[(risen.zone or "", "on_demand", RISE_AT, RISEN)])
    idle = Idle("arn:aws:ec2:us-east-1:123456789012:reserved-instances/ri-idle", "us-east-1", "p5.48xlarge",
                IDLE_RATE, IDLE_FROM, END)  # fmt: skip
    held = tmp_path / "held.yaml"
    held.write_text(
        "commitments:\n  - {id: ri-idle, cloud: aws, kind: reserved_instance, instance_type: p5.48xlarge,\n"
        '     region: us-east-1, count: 1, term: 1y, hourly_usd: 40.00, starts: "2026-06-01"}\n'
    )
    CliRunner().invoke(app, ["commitments", "import", str(held)])
    focus_export(tmp_path / "month.csv", meter, book, START, END, idle=[idle])
    imported = cli("bill", "import", str(tmp_path / "month.csv"), "-o", "json")
    assert imported["imports"][0]["replaced"] == len(clean)  # the restated month replaces the first export
    report = cli("bill", "report", "--owner", OWNER, "--by", "market", "-o", "json")

    runs = list(meter.runs.values())
    in_pool = [r for r in runs if (r.handle.zone, r.handle.market.value) == (risen.zone, "on_demand")]
    rise_hours = sum(hours_of(r, since=RISE_AT) for r in in_pool if r.handle.instance_id != orphan["id"])
    expected = {
        "price_change": (RISEN - risen.unit_hourly_usd) * rise_hours,
        "off_plan_instances": hours_of(meter.runs[orphan["id"]]) * book.price(meter.runs[orphan["id"]].handle, START),
        "commitment_unused": IDLE_RATE * int((END - IDLE_FROM).total_seconds() // 3600),
    }
    assert rise_hours > 100 and hours_of(meter.runs[orphan["id"]]) >= 1
    t = report["totals"]
    assert t["causes"] == {k: f"{v:.2f}" for k, v in expected.items()}
    assert Decimal(t["difference_usd"]) == sum(expected.values(), Decimal(0)).quantize(Decimal("0.01"))
    assert t["planned_usd"] == f"{planned:.2f}"
    [stray] = report["unknown_to_fleet"]
    assert stray["resource_id"] == orphan["id"] and Decimal(stray["hours"]) == hours_of(meter.runs[orphan["id"]])
    [ri] = report["commitments"]
    assert (ri["held_as"], ri["utilization"], ri["unused_usd"]) == (
        "ri-idle",
        "0.0000",
        f"{expected['commitment_unused']:.2f}",
    )
    by_market = {g["key"]: g for g in report["groups"]}
    assert by_market["commitment"]["causes"] == {"commitment_unused": f"{expected['commitment_unused']:.2f}"}

    # -- the same numbers by day, by plan, and for the plan alone ---------------------------------
    by_day = cli("bill", "report", "--owner", OWNER, "--by", "day", "-o", "json")
    assert len(by_day["groups"]) == 30 and by_day["totals"] == report["totals"]
    assert sum(Decimal(g["difference_usd"]) for g in by_day["groups"][:12]) == Decimal(
        f"{expected['off_plan_instances']:.2f}"
    )
    one = cli("bill", "report", "--owner", OWNER, "--plan", doc.plan_id, "--by", "plan", "-o", "json")
    assert [g["key"] for g in one["groups"]] == [doc.plan_id] and one["totals"]["planned_usd"] == f"{planned:.2f}"
    # days 7-12: after the hand-launched instance, before the rise and the idle reservation
    quiet = cli("bill", "report", "--owner", OWNER, "--from", "2026-06-07", "--to", "2026-06-12", "-o", "json")
    assert quiet["hours"] == 6 * 24 and quiet["totals"]["difference_usd"] == "0.00"
    assert quiet["totals"]["planned_usd"] != "0.00"
