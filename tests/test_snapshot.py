"""The bundled snapshot: reproducible from its sources, loaded with every row, prices exact."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from decimal import Decimal

import pytest

from gpuprov.errors import ConfigError
from gpuprov.models import Cloud, Market, Offer
from gpuprov.store.catalog import Catalog
from pricing.snapshot import load_bundled
from tests.conftest import ROOT

SRC = ROOT / "data" / "sources"


def _rows(path: str) -> list[dict[str, str]]:
    with open(SRC / path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_build_script_reproduces_the_shipped_files() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_snapshot.py"), "--check"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "up to date" in run.stdout


def test_row_counts_match_the_manifest_and_the_store(_isolated_db: str) -> None:
    meta = json.loads((ROOT / "pricing" / "data" / "snapshot.json").read_text())
    snaps = load_bundled()
    assert {s.cloud.value: len(s.offers) for s in snaps} == {m["cloud"]: m["rows"] for m in meta["snapshots"]}
    catalog = Catalog(_isolated_db)
    for s in snaps:
        catalog.add_snapshot(s.source, s.cloud, s.as_of, s.offers)
    stored = {s.cloud: s.row_count for s in catalog.snapshots(current_only=True)}
    assert stored == {s.cloud: len(s.offers) for s in snaps}
    # every on-demand and spot row of the AWS source with a real quote is an offer
    aws = _rows("aws/skypilot-v8-vms-gpu-subset.csv")
    od = sum(1 for r in aws if r["Price"])
    spot = sum(1 for r in aws if r["SpotPrice"])
    aws_snap = next(s for s in snaps if s.cloud is Cloud.AWS)
    assert sum(1 for o in aws_snap.offers if o.market is Market.ON_DEMAND) == od
    assert sum(1 for o in aws_snap.offers if o.market is Market.SPOT) == spot


def _list_row(machine: str, region: str) -> dict[str, str]:
    [row] = [
        r
        for r in _rows("gcp/cyclenerd-pricing-gpu-all-regions.csv")
        if r["machine_type"] == machine and r["region"] == region
    ]
    return row


def _find(cloud: Cloud, itype: str, where: str, market: Market, gpu: str | None = None) -> Decimal:
    snap = next(s for s in load_bundled() if s.cloud is cloud)
    hits = [
        o
        for o in snap.offers
        if o.instance_type == itype and o.location == where and o.market is market and (gpu is None or o.gpu == gpu)
    ]
    assert len(hits) == 1, hits
    return hits[0].hourly_usd


def test_known_prices_exactly() -> None:
    # AWS p4d.24xlarge in use1-az1, from the SkyPilot row
    row = next(
        r
        for r in _rows("aws/skypilot-v8-vms-gpu-subset.csv")
        if r["InstanceType"] == "p4d.24xlarge" and r["AvailabilityZone"] == "use1-az1"
    )
    assert _find(Cloud.AWS, "p4d.24xlarge", "use1-az1", Market.ON_DEMAND) == Decimal(row["Price"])
    assert _find(Cloud.AWS, "p4d.24xlarge", "use1-az1", Market.SPOT) == Decimal(row["SpotPrice"])
    # AWS 1-year reserved p4d.24xlarge in us-east-1 (regional), from the vantage row
    res = next(
        r
        for r in _rows("aws/vantage-ondemand-reserved1y-by-region.csv")
        if r["InstanceType"] == "p4d.24xlarge" and r["Region"] == "us-east-1"
    )
    assert _find(Cloud.AWS, "p4d.24xlarge", "us-east-1", Market.RESERVED_1Y) == Decimal(res["Reserved1y"])
    # GCP a2-ultragpu-1g in us-central1-a: the list prices the type in the region, so its hour and hour_spot
    listed = _list_row("a2-ultragpu-1g", "us-central1")
    assert _find(Cloud.GCP, "a2-ultragpu-1g", "us-central1-a", Market.ON_DEMAND) == Decimal(listed["hour"])
    assert _find(Cloud.GCP, "a2-ultragpu-1g", "us-central1-a", Market.SPOT) == Decimal(listed["hour_spot"])
    # GCP a4-highgpu-8g in us-central1-b (the list has no a4) = host row + eight B200 accelerator rows' price
    gcp = _rows("gcp/anycloud-vms-gpu.csv")
    host = next(r for r in gcp if r["InstanceType"] == "a4-highgpu-8g" and r["AvailabilityZone"] == "us-central1-b")
    acc = next(
        r
        for r in gcp
        if not r["InstanceType"]
        and r["AcceleratorName"] == "B200"
        and r["AcceleratorCount"] == "8.0"
        and r["AvailabilityZone"] == "us-central1-b"
    )
    assert _find(Cloud.GCP, "a4-highgpu-8g", "us-central1-b", Market.ON_DEMAND) == (
        Decimal(host["Price"]) + Decimal(acc["Price"])
    )
    assert _find(Cloud.GCP, "a4-highgpu-8g", "us-central1-b", Market.SPOT) == (
        Decimal(host["SpotPrice"]) + Decimal(acc["SpotPrice"])
    )
    # GCP n1-standard-8 + 1 T4 in us-central1-a: the n1 host file plus the accelerator row
    n1 = next(
        r
        for r in _rows("gcp/anycloud-vms-n1-hosts.csv")
        if r["InstanceType"] == "n1-standard-8" and r["AvailabilityZone"] == "us-central1-a"
    )
    t4 = next(
        r
        for r in gcp
        if r["AcceleratorName"] == "T4" and r["AcceleratorCount"] == "1.0" and r["AvailabilityZone"] == "us-central1-a"
    )
    assert _find(Cloud.GCP, "n1-standard-8", "us-central1-a", Market.ON_DEMAND, "T4") == (
        Decimal(n1["Price"]) + Decimal(t4["Price"])
    )
    # Azure NC24ads A100 v4 in eastus, on demand and spot
    az = next(
        r
        for r in _rows("azure/anycloud-vms-gpu.csv")
        if r["InstanceType"] == "Standard_NC24ads_A100_v4" and r["Region"] == "eastus"
    )
    assert _find(Cloud.AZURE, "Standard_NC24ads_A100_v4", "eastus", Market.ON_DEMAND) == Decimal(az["Price"])
    assert _find(Cloud.AZURE, "Standard_NC24ads_A100_v4", "eastus", Market.SPOT) == Decimal(az["SpotPrice"])


def test_azure_sizes_carry_the_size_tables_gpus_and_memory() -> None:
    """Fractional sizes are offers holding their share of one GPU (gpus_per_instance 0), whatever
    count the catalog wrote (anycloud: NV4as_v4 "1.0", NV6ads_A10_v5 "0.167"); memory per GPU too."""
    from fractions import Fraction

    from pricing.azure_sizes import SIZES

    az = next(s for s in load_bundled() if s.cloud is Cloud.AZURE)
    listed = {r["InstanceType"] for r in _rows("azure/anycloud-vms-gpu.csv")}
    assert {"Standard_NV4as_v4", "Standard_NV6ads_A10_v5", "Standard_NC8ads_A10_v4"} <= listed
    seen = set()
    for o in az.offers:
        row = SIZES.get(o.instance_type)
        if row is None:
            continue
        seen.add(o.instance_type)
        # independent: the "Accelerators (Qty.)" text of the size table, e.g. "1/8"
        qty = Fraction(row.source.split("Accelerators ")[1].split(",")[0])
        if qty < 1:
            assert (o.gpus_per_instance, Fraction(o.gpu_fraction or 0).limit_denominator(64)) == (0, qty)
        else:
            assert (o.gpus_per_instance, o.gpu_fraction) == (qty, None)
        mem = int(row.source.rsplit("Accelerator-Memory ", 1)[1].split()[0])
        assert o.gpu_memory_gib == mem / qty
    assert seen == listed & set(SIZES)
    nc_h100 = [o for o in az.offers if o.instance_type == "Standard_NC40ads_H100_v5"]
    assert nc_h100 and {o.gpu_memory_gib for o in nc_h100} == {94}


def test_gpu_names_are_canonical() -> None:
    names = {o.gpu for s in load_bundled() for o in s.offers}
    assert {"A100-40GB", "A100-80GB", "H100", "L4", "T4"} <= names
    assert "A100" not in names and "H100-MEGA" not in names


def _offers(cloud: Cloud) -> tuple[Offer, ...]:
    return next(s for s in load_bundled() if s.cloud is cloud).offers


def test_gcp_a3_highgpu_8g_on_demand_is_the_list_price_in_every_us_central1_zone() -> None:
    listed = Decimal(_list_row("a3-highgpu-8g", "us-central1")["hour"])  # about $88.49/h
    zones = {
        r["AvailabilityZone"]
        for r in _rows("gcp/anycloud-vms-gpu.csv")
        if r["InstanceType"] == "a3-highgpu-8g" and r["Region"] == "us-central1"
    }
    hits = [
        o
        for o in _offers(Cloud.GCP)
        if o.instance_type == "a3-highgpu-8g" and o.region == "us-central1" and o.market is Market.ON_DEMAND
    ]
    assert zones and {o.zone for o in hits} == zones and len(hits) == len(zones)
    for o in hits:
        assert abs(o.hourly_usd - listed) <= listed * Decimal("0.015"), o
        assert (o.gpu, o.gpus_per_instance, o.interconnect) == ("H100", 8, "GPUDirect-TCPX")


def test_gcp_commitments_are_regional_at_month_over_730() -> None:
    reserved = [o for o in _offers(Cloud.GCP) if o.market.is_reserved]
    for gpu in ("A100-40GB", "H100", "L4"):
        for market in (Market.RESERVED_1Y, Market.RESERVED_3Y):
            assert any(o.gpu == gpu and o.market is market for o in reserved), (gpu, market)
    assert all(o.zone is None for o in reserved)
    by_key = {o.key: o for o in reserved}
    for machine, region in (
        ("a2-highgpu-1g", "us-central1"),
        ("a3-highgpu-8g", "europe-west4"),
        ("g2-standard-4", "us-east1"),
    ):
        row = _list_row(machine, region)
        for market, column in ((Market.RESERVED_1Y, "month_1y"), (Market.RESERVED_3Y, "month_3y")):
            got = by_key[("gcp", region, "", machine, market.value)].hourly_usd
            assert abs(got - Decimal(row[column]) / 730) < Decimal("1e-9"), (machine, region, market)
        assert (
            by_key[("gcp", region, "", machine, "reserved_3y")].hourly_usd
            < (by_key[("gcp", region, "", machine, "reserved_1y")].hourly_usd)
            < Decimal(row["hour"])
        )


def test_aws_reservations_cover_the_common_gpus() -> None:
    families = {"T4", "A10G", "L4", "L40S", "A100-40GB", "A100-80GB", "V100", "V100-32GB", "H100"}
    reserved = [o for o in _offers(Cloud.AWS) if o.market is Market.RESERVED_1Y]
    assert all(o.zone is None for o in reserved)
    assert sum(1 for o in reserved if o.gpu in families) >= 300
    for gpu in ("T4", "A10G", "L4", "L40S", "A100-40GB", "A100-80GB", "V100-32GB"):
        assert any(o.gpu == gpu for o in reserved), gpu
    # a type SkyPilot's subset does not describe, priced from the vantage row
    row = next(
        r
        for r in _rows("aws/vantage-ondemand-reserved1y-by-region.csv")
        if r["InstanceType"] == "g6e.xlarge" and r["Region"] == "us-east-1"
    )
    [g6e] = [o for o in reserved if o.instance_type == "g6e.xlarge" and o.region == "us-east-1"]
    assert (g6e.hourly_usd, g6e.gpu, g6e.gpus_per_instance, g6e.vcpus, g6e.memory_gib) == (
        Decimal(row["Reserved1y"]),
        "L40S",
        1,
        4,
        Decimal(32),
    )


def test_the_disagreement_report_keeps_the_list_and_names_the_old_anycloud_price() -> None:
    with open(SRC / "REPORT-disagreements.csv", encoding="utf-8") as fh:
        report = list(csv.DictReader(fh))
    assert report
    # the old bundle's a3-highgpu-8g price: anycloud's host row + its 8 x H100 accelerator row
    gcp = _rows("gcp/anycloud-vms-gpu.csv")
    host = next(r for r in gcp if r["InstanceType"] == "a3-highgpu-8g" and r["AvailabilityZone"] == "us-central1-a")
    acc = next(
        r
        for r in gcp
        if not r["InstanceType"]
        and r["AcceleratorName"] == "H100"
        and r["AcceleratorCount"] == "8.0"
        and r["AvailabilityZone"] == "us-central1-a"
    )
    old = Decimal(host["Price"]) + Decimal(acc["Price"])  # $43.07/h
    [row] = [
        r
        for r in report
        if (r["zone"], r["instance_type"], r["market"]) == ("us-central1-a", "a3-highgpu-8g", "on_demand")
    ]
    assert row["other_source"].startswith("anycloud") and Decimal(row["other_usd"]) == old
    assert row["kept_source"].startswith("cyclenerd") and Decimal(row["kept_usd"]) == Decimal(
        _list_row("a3-highgpu-8g", "us-central1")["hour"]
    )
    # every row: the bundle holds the kept price (never an average), and the two differ by more than 15 %
    bundle = {o.key: o.hourly_usd for s in load_bundled() for o in s.offers}
    keys = [(r["cloud"], r["region"], r["zone"], r["instance_type"], r["market"]) for r in report]
    assert keys == sorted(keys)
    for r, key in zip(report, keys, strict=True):
        kept, other = Decimal(r["kept_usd"]), Decimal(r["other_usd"])
        assert bundle[key] == kept
        assert abs(other - kept) > kept * Decimal("0.15")


def test_the_js_reader_takes_data_and_evaluates_nothing() -> None:
    spec = importlib.util.spec_from_file_location("build_snapshot", ROOT / "scripts" / "build_snapshot.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    text = """// generated
/* a comment with ] and } */ const allGPUInstances = [
  { name: 'it\\'s "x"', "url": "http://a//b", n: 1.5, ok: true, tags: [1, 2,], },  // tail, }
  {"k": "v,]"},
];
"""
    assert builder.js_data(text, "t.js") == [
        {"name": 'it\'s "x"', "url": "http://a//b", "n": 1.5, "ok": True, "tags": [1, 2]},
        {"k": "v,]"},
    ]
    with pytest.raises(ConfigError):
        builder.js_data("const x = [alert(1)];", "t.js")


def test_a_catalog_on_an_older_bundle_moves_to_the_shipped_one_and_imports_are_left_alone() -> None:
    from datetime import UTC, datetime
    from decimal import Decimal

    from gpuprov.commands.common import open_catalog
    from gpuprov.models import Cloud, Market, Offer
    from gpuprov.store.catalog import Catalog
    from pricing.snapshot import bundled_meta

    old = Offer(
        cloud=Cloud.AWS,
        region="us-east-1",
        zone="use1-az1",
        instance_type="p4d.24xlarge",
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=Decimal(1152),
        market=Market.ON_DEMAND,
        hourly_usd=Decimal("1.0"),
    )
    when = datetime(2025, 1, 1, tzinfo=UTC)
    catalog = Catalog()
    catalog.add_snapshot("bundled:an-older-gpuprov", Cloud.AWS, when, [old])
    catalog.add_snapshot("import:vms.csv", Cloud.GCP, when, [])  # a user's import, even an empty one
    _, current = open_catalog()
    by_cloud = {s.cloud: s for s in current}
    shipped = bundled_meta()
    assert (by_cloud[Cloud.AWS].source, by_cloud[Cloud.AWS].row_count) == shipped[Cloud.AWS]
    assert by_cloud[Cloud.GCP].source == "import:vms.csv"  # not a bundle: the user's, kept
    assert (by_cloud[Cloud.AZURE].source, by_cloud[Cloud.AZURE].row_count) == shipped[Cloud.AZURE]
