"""The bundled snapshot: reproducible from its sources, loaded with every row, prices exact."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from decimal import Decimal

from gpuprov.models import Cloud, Market
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
    # GCP a2-ultragpu-1g in us-central1-a = host row + one A100-80GB accelerator row
    gcp = _rows("gcp/anycloud-vms-gpu.csv")
    host = next(r for r in gcp if r["InstanceType"] == "a2-ultragpu-1g" and r["AvailabilityZone"] == "us-central1-a")
    acc = next(
        r
        for r in gcp
        if not r["InstanceType"]
        and r["AcceleratorName"] == "A100-80GB"
        and r["AcceleratorCount"] == "1.0"
        and r["AvailabilityZone"] == "us-central1-a"
    )
    assert _find(Cloud.GCP, "a2-ultragpu-1g", "us-central1-a", Market.ON_DEMAND) == (
        Decimal(host["Price"]) + Decimal(acc["Price"])
    )
    assert _find(Cloud.GCP, "a2-ultragpu-1g", "us-central1-a", Market.SPOT) == (
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


def test_azure_fractional_gpus_are_not_offers() -> None:
    az = next(s for s in load_bundled() if s.cloud is Cloud.AZURE)
    fractional = {r["InstanceType"] for r in _rows("azure/anycloud-vms-gpu.csv") if Decimal(r["AcceleratorCount"]) < 1}
    assert fractional
    assert not {o.instance_type for o in az.offers} & fractional


def test_gpu_names_are_canonical() -> None:
    names = {o.gpu for s in load_bundled() for o in s.offers}
    assert {"A100-40GB", "A100-80GB", "H100", "L4", "T4"} <= names
    assert "A100" not in names and "H100-MEGA" not in names
