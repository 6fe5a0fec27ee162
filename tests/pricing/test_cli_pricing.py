"""gpuprov pricing refresh / import / export / snapshots, and discounts in prices, through the CLI."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
import responses
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.errors import PricingError
from tests.conftest import ROOT
from tests.pricing import fakes
from tests.pricing.test_refresh import FakeSource, live_sources, local_fakes  # noqa: F401 - fixture

runner = CliRunner()
SKYPILOT_AWS = ROOT / "data" / "sources" / "aws" / "skypilot-v8-vms-gpu-subset.csv"


@pytest.fixture
def sources(monkeypatch: pytest.MonkeyPatch, local_fakes: responses.RequestsMock) -> Iterator[None]:  # noqa: F811
    fakes.register_azure(local_fakes)
    monkeypatch.setattr(
        "pricing.refresh.default_sources",
        lambda clouds=None: [s for s in live_sources() if clouds is None or s.cloud in clouds],
    )
    yield


def test_refresh_all_then_reserved_offers_of_every_cloud_are_listed(sources: None) -> None:
    r = runner.invoke(app, ["pricing", "refresh", "--cloud", "all"])
    assert r.exit_code == 0, r.stderr
    for cloud in ("aws", "gcp", "azure"):
        assert f"{cloud}: snapshot" in r.stdout
    r = runner.invoke(app, ["prices", "--type", "a100", "--market", "reserved_1y", "-o", "json"])
    assert r.exit_code == 0
    offers = json.loads(r.stdout)["offers"]
    assert {o["cloud"] for o in offers} == {"aws", "gcp", "azure"}
    assert all(o["market"] == "reserved_1y" for o in offers)
    r = runner.invoke(app, ["prices", "--type", "a100", "-o", "json"])
    markets = {(o["cloud"], o["market"]) for o in json.loads(r.stdout)["offers"]}
    for cloud in ("aws", "gcp", "azure"):
        assert {(cloud, "on_demand"), (cloud, "spot"), (cloud, "reserved_1y")} <= markets, markets
    r = runner.invoke(app, ["pricing", "snapshots", "-o", "json"])
    snaps = json.loads(r.stdout)
    current = {s["cloud"]: s["source"] for s in snaps if s["current"]}
    assert all(not v.startswith("bundled") for v in current.values())
    assert len(snaps) == 6  # the bundled three, then the refreshed three


def test_a_failed_source_exits_4_and_keeps_the_bundled_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov.models import Cloud

    monkeypatch.setattr(
        "pricing.refresh.default_sources",
        lambda clouds=None: [FakeSource(Cloud.AZURE, error=PricingError("retail prices API answered 500"))],
    )
    r = runner.invoke(app, ["pricing", "refresh", "--cloud", "azure"])
    assert r.exit_code == 4
    assert "azure" in r.stderr and "error:" in r.stderr
    r = runner.invoke(app, ["pricing", "snapshots", "-o", "json"])
    azure = [s for s in json.loads(r.stdout) if s["cloud"] == "azure"]
    assert len(azure) == 1 and azure[0]["current"] and azure[0]["source"].startswith("bundled")


AS_OF = "2025-12-01T00:00:00+00:00"


def test_import_skypilot_then_export_reproduces_every_price_and_keeps_reserved() -> None:
    bundled = json.loads(
        runner.invoke(
            app, ["prices", "--type", "a100", "--cloud", "aws", "--market", "reserved_1y", "-o", "json"]
        ).stdout
    )["offers"]
    assert bundled
    r = runner.invoke(
        app, ["pricing", "import", str(SKYPILOT_AWS), "--format", "skypilot", "--cloud", "aws", "--as-of", AS_OF]
    )
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["pricing", "export", "--format", "gpuprov", "--cloud", "aws"])
    assert r.exit_code == 0
    exported = list(csv.DictReader(io.StringIO(r.stdout)))
    got = {(e["instance_type"], e["zone"], e["market"]): Decimal(e["hourly_usd"]) for e in exported}
    with open(SKYPILOT_AWS, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        zone, itype = row["AvailabilityZone"], row["InstanceType"]
        if row["Price"]:
            assert got[(itype, zone, "on_demand")] == Decimal(row["Price"])
            assert str(got[(itype, zone, "on_demand")]) == row["Price"]  # exactly, digits too
        if row["SpotPrice"]:
            assert str(got[(itype, zone, "spot")]) == row["SpotPrice"]
    flexible = [e for e in exported if e["market"] in ("on_demand", "spot")]
    assert len(flexible) == sum(bool(r["Price"]) + bool(r["SpotPrice"]) for r in rows)
    # the SkyPilot file carries no reservations: the reserved prices of the previous snapshot survive
    after = json.loads(
        runner.invoke(
            app, ["prices", "--type", "a100", "--cloud", "aws", "--market", "reserved_1y", "-o", "json"]
        ).stdout
    )["offers"]
    assert after == bundled
    snaps = json.loads(runner.invoke(app, ["pricing", "snapshots", "-o", "json"]).stdout)
    aws = [s for s in snaps if s["cloud"] == "aws" and s["current"]]
    assert aws[0]["fetched_at"].startswith("2025-12-01") and aws[0]["source"].startswith("import:")


def test_an_import_needs_its_as_of_time() -> None:
    r = runner.invoke(app, ["pricing", "import", str(SKYPILOT_AWS), "--format", "skypilot"])
    assert r.exit_code == 2 and "does not say when its prices were current" in r.stderr
    r = runner.invoke(app, ["pricing", "import", str(SKYPILOT_AWS), "--format", "skypilot", "--as-of", "2026-05-20"])
    assert r.exit_code == 2 and "UTC offset" in r.stderr


def test_bad_rows_are_skipped_with_their_lines_and_an_all_bad_file_stores_nothing(tmp_path: Path) -> None:
    runner.invoke(app, ["pricing", "snapshots"])
    before = json.loads(runner.invoke(app, ["pricing", "snapshots", "-o", "json"]).stdout)
    rows = list(csv.reader(io.StringIO(SKYPILOT_AWS.read_text())))
    header, body = rows[0], rows[1:]
    price, spot = header.index("Price"), header.index("SpotPrice")

    def with_price(row: list[str], value: str) -> list[str]:
        out = list(row)
        out[price] = out[spot] = value
        return out

    def text(rows: list[list[str]]) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        return buf.getvalue()

    bad = tmp_path / "vms.csv"
    broken = [
        with_price(body[4], "not-a-price"),
        with_price(body[5], "-3"),
        with_price(body[6], "99999"),
        with_price(body[7], "0.00001"),
    ]
    bad.write_text(text([header, *broken, *body[8:12]]))
    r = runner.invoke(app, ["pricing", "import", str(bad), "--format", "skypilot", "--as-of", AS_OF])
    assert r.exit_code == 0, r.stderr
    assert "non-numeric number field (lines 2)" in r.stderr and "negative number (lines 3)" in r.stderr
    assert "price above $10,000/h or below $0.0001/h" in r.stderr
    everything_bad = tmp_path / "all-bad.csv"
    everything_bad.write_text(text([header, *broken]))
    middle = json.loads(runner.invoke(app, ["pricing", "snapshots", "-o", "json"]).stdout)
    assert len(middle) == len(before) + 1
    r = runner.invoke(app, ["pricing", "import", str(everything_bad), "--format", "skypilot", "--as-of", AS_OF])
    assert r.exit_code == 4 and "nothing was stored" in r.stderr
    assert json.loads(runner.invoke(app, ["pricing", "snapshots", "-o", "json"]).stdout) == middle
    r = runner.invoke(
        app, ["pricing", "import", str(SKYPILOT_AWS), "--format", "skypilot", "--cloud", "gcp", "--as-of", AS_OF]
    )
    assert r.exit_code == 2 and "the file has the aws layout" in r.stderr


def test_an_earlier_snapshot_can_be_made_current_again() -> None:
    runner.invoke(app, ["pricing", "snapshots"])
    first = next(
        s for s in json.loads(runner.invoke(app, ["pricing", "snapshots", "-o", "json"]).stdout) if s["cloud"] == "aws"
    )
    r = runner.invoke(app, ["pricing", "import", str(SKYPILOT_AWS), "--format", "skypilot", "--as-of", AS_OF])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["pricing", "snapshots", "--activate", str(first["id"])])
    assert r.exit_code == 0 and "is current again" in r.stdout
    aws = [
        s for s in json.loads(runner.invoke(app, ["pricing", "snapshots", "-o", "json"]).stdout) if s["cloud"] == "aws"
    ]
    assert [s["current"] for s in aws] == [True, False]
    r = runner.invoke(app, ["pricing", "snapshots", "--activate", "9999"])
    assert r.exit_code == 2 and "no snapshot 9999" in r.stderr


def test_negotiated_discounts_show_in_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    list_prices = json.loads(runner.invoke(app, ["prices", "--type", "h100", "--cloud", "aws", "-o", "json"]).stdout)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("discounts:\n  aws: 0.9\n  'aws:p5': 0.8\n")
    monkeypatch.setenv("GPUPROV_CONFIG", str(cfg))
    discounted = json.loads(runner.invoke(app, ["prices", "--type", "h100", "--cloud", "aws", "-o", "json"]).stdout)
    before = {
        (o["zone"], o["instance_type"], o["market"]): Decimal(str(o["hourly_usd"])) for o in list_prices["offers"]
    }
    for o in discounted["offers"]:
        factor = Decimal("0.8") if o["instance_type"].startswith("p5") else Decimal("0.9")
        assert Decimal(str(o["hourly_usd"])) == pytest.approx(
            before[(o["zone"], o["instance_type"], o["market"])] * factor
        )
    assert discounted["discounts"] == {"aws": 0.9, "aws:p5": 0.8}
