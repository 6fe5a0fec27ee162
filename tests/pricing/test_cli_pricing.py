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


def test_import_skypilot_then_export_reproduces_every_price() -> None:
    r = runner.invoke(app, ["pricing", "import", str(SKYPILOT_AWS), "--format", "skypilot", "--cloud", "aws"])
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
    assert len(exported) == sum(bool(r["Price"]) + bool(r["SpotPrice"]) for r in rows)


def test_a_malformed_import_names_the_line_and_stores_nothing(tmp_path: Path) -> None:
    runner.invoke(app, ["pricing", "snapshots"])
    before = json.loads(runner.invoke(app, ["pricing", "snapshots", "-o", "json"]).stdout)
    bad = tmp_path / "vms.csv"
    lines = SKYPILOT_AWS.read_text().splitlines()
    lines[5] = lines[5].replace(",x86_64", "").rsplit(",", 4)[0] + ",not-a-price,0.5,us-east-1,use1-az1,x86_64"
    bad.write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["pricing", "import", str(bad), "--format", "skypilot"])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: vms.csv:6: Price 'not-a-price' is not a number")
    assert json.loads(runner.invoke(app, ["pricing", "snapshots", "-o", "json"]).stdout) == before
    r = runner.invoke(app, ["pricing", "import", str(SKYPILOT_AWS), "--format", "skypilot", "--cloud", "gcp"])
    assert r.exit_code == 2 and "the file has the aws layout" in r.stderr


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
