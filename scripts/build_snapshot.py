#!/usr/bin/env python3
"""Rebuild the bundled price snapshot from the source files in data/sources/.

    python scripts/build_snapshot.py [--check]

Writes pricing/data/offers.csv.gz (gzip without a timestamp, so the bytes are reproducible)
and pricing/data/snapshot.json. With --check, writes nothing and exits 1 if the shipped
files differ from what the sources give. See data/sources/PROVENANCE.md for the sources.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import sys
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuprov.models import Cloud, Market, Offer  # noqa: E402
from pricing import skypilot  # noqa: E402
from pricing.gpuprov_csv import write_offers  # noqa: E402

SRC = ROOT / "data" / "sources"
OUT = ROOT / "pricing" / "data"

SNAPSHOTS = {
    Cloud.AWS: {
        "as_of": "2025-12-01T00:00:00+00:00",
        "source": "bundled:skypilot-catalog-v8@00148f2a+vantage@7412fd25",
        "note": "AWS on-demand and spot per AZ id (SkyPilot catalog v8, late 2025); "
        "1-year standard no-upfront reserved per region (instances.vantage.sh, 2026-01-21)",
    },
    Cloud.GCP: {
        "as_of": "2026-05-20T00:00:00+00:00",
        "source": "bundled:anycloud-catalog@62ff0a98",
        "note": "GCP on-demand and spot per zone, host VM + GPUs priced together (2026-05-20)",
    },
    Cloud.AZURE: {
        "as_of": "2026-05-20T00:00:00+00:00",
        "source": "bundled:anycloud-catalog@62ff0a98",
        "note": "Azure on-demand and spot per region (2026-05-20)",
    },
}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def aws_reserved(on_demand: list[Offer], report: skypilot.ParseReport) -> list[Offer]:
    """1-year reserved offers per region, for instance types whose specs the SkyPilot file gives."""
    specs = {o.instance_type: o for o in on_demand}
    out = []
    path = SRC / "aws" / "vantage-ondemand-reserved1y-by-region.csv"
    for row in csv.DictReader(_lines(path)):
        if not row["Reserved1y"]:
            continue
        spec = specs.get(row["InstanceType"])
        if spec is None:
            report.skip("reserved rate for a type without specs")
            continue
        report.offers += 1
        out.append(
            Offer(
                cloud=Cloud.AWS,
                region=row["Region"],
                zone=None,
                instance_type=spec.instance_type,
                gpu=spec.gpu,
                gpus_per_instance=spec.gpus_per_instance,
                gpu_memory_gib=spec.gpu_memory_gib,
                vcpus=spec.vcpus,
                memory_gib=spec.memory_gib,
                market=Market.RESERVED_1Y,
                hourly_usd=Decimal(row["Reserved1y"]),
            )
        )
    return out


def build() -> tuple[bytes, bytes, dict[str, skypilot.ParseReport]]:
    reports = {c.value: skypilot.ParseReport() for c in Cloud}
    offers: list[Offer] = []

    path = SRC / "aws" / "skypilot-v8-vms-gpu-subset.csv"
    _, aws = skypilot.parse(_lines(path), path.name, reports["aws"], Cloud.AWS)
    offers += aws + aws_reserved(aws, reports["aws"])

    gcp_rows = []
    for name in ("anycloud-vms-gpu.csv", "anycloud-vms-n1-hosts.csv"):
        _, rows = skypilot.read_rows(_lines(SRC / "gcp" / name), name)
        gcp_rows += rows
    offers += list(skypilot.parse_gcp(gcp_rows, "gcp", reports["gcp"]))

    path = SRC / "azure" / "anycloud-vms-gpu.csv"
    _, azure = skypilot.parse(_lines(path), path.name, reports["azure"], Cloud.AZURE)
    offers += azure

    offers.sort(key=lambda o: o.key)
    buf = io.StringIO()
    write_offers(offers, buf)
    blob = gzip.compress(buf.getvalue().encode("utf-8"), mtime=0)
    meta = {
        "snapshots": [{"cloud": c.value, **SNAPSHOTS[c], "rows": sum(1 for o in offers if o.cloud == c)} for c in Cloud]
    }
    return blob, (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(), reports


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    blob, meta, reports = build()
    for cloud, rep in reports.items():
        skipped = ", ".join(f"{k}: {v}" for k, v in sorted(rep.skipped.items()))
        print(f"{cloud}: {rep.offers} offers; skipped {skipped or 'none'}")
    targets = {OUT / "offers.csv.gz": blob, OUT / "snapshot.json": meta}
    if args.check:
        stale = [p.name for p, data in targets.items() if not p.exists() or p.read_bytes() != data]
        if stale:
            print(f"out of date: {', '.join(stale)}")
            return 1
        print("bundled snapshot is up to date")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for path, data in targets.items():
        path.write_bytes(data)
        print(f"wrote {path.relative_to(ROOT)} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
