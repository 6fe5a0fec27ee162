#!/usr/bin/env python3
"""Peak memory and speed of ``gpuprov pricing import`` on a large SkyPilot-format (AWS) file.

    python benchmarks/import_memory.py [--rows 1000000] [--seed 7] [--format skypilot|skypilot-gcp|gpuprov]

Writes a deterministic (seeded) file of ``--rows`` rows to a temporary directory: the instance
types of the bundled SkyPilot subset spread over synthetic regions and zones, so that almost every
row is its own pool (the worst case for anything that keeps per-pool state), about 1.6% of rows bad
(non-numeric, negative, absurd price, bad identifier) and 0.4% with a spot price far above
on-demand. Then runs the real import in a child process against a new SQLite database and prints
rows/s, wall time and the child's peak RSS (``ru_maxrss``). Target: peak RSS under 300 MiB for 1 M rows.

``--format skypilot-gcp``: the GCP layout (host rows and accelerator rows joined per zone, read
in two passes): the bundled GCP rows zone by zone, copied into synthetic zones (see
``write_skypilot_gcp``).
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBSET = ROOT / "data" / "sources" / "aws" / "skypilot-v8-vms-gpu-subset.csv"
GCP_SOURCES = ("anycloud-vms-gpu.csv", "anycloud-vms-n1-hosts.csv")
GCP_HEADER = (
    "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice"
)
GCP_HEADER_COLUMNS = GCP_HEADER.split(",")
GPUPROV_COLUMNS = (
    "cloud,region,zone,instance_type,gpu,gpus_per_instance,gpu_memory_gib,vcpus,memory_gib,market,"
    "hourly_usd,interconnect,currency"
).split(",")


def types() -> list[dict[str, str]]:
    with open(SUBSET, encoding="utf-8", newline="") as fh:
        seen: dict[str, dict[str, str]] = {}
        for row in csv.DictReader(fh):
            seen.setdefault(row["InstanceType"], row)
    return list(seen.values())


def bad(rng: random.Random, row: dict[str, str]) -> None:
    kind = rng.randrange(5)
    if kind == 0:
        row["Price"] = "n/a"
    elif kind == 1:
        row["Price"] = "-1.5"
    elif kind == 2:
        row["Price"] = row["SpotPrice"] = "99999"
    elif kind == 3:
        row["Region"] = "us east 1"
    elif row["Price"]:
        row["SpotPrice"] = str(round(float(row["Price"]) * 3, 4))  # spot far above on-demand


def write_skypilot(path: Path, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    kinds = types()
    header = list(kinds[0].keys())
    with open(path, "w", encoding="utf-8", newline="") as fh:
        out = csv.DictWriter(fh, header, lineterminator="\n")
        out.writeheader()
        for i in range(rows):
            base = kinds[rng.randrange(len(kinds))]
            region = f"bench-{i // 4000 % 250}"
            od = round(float(base["Price"] or "1.0") * rng.uniform(0.9, 1.1), 4)
            row = dict(base)
            row.update(
                Region=region,
                AvailabilityZone=f"{region}-az{i % 4000}",
                Price=f"{od:.4f}",
                SpotPrice=f"{od * rng.uniform(0.2, 0.7):.4f}" if rng.random() < 0.9 else "",
            )
            if rng.random() < 0.02:
                bad(rng, row)
            out.writerow(row)


def gcp_zones() -> list[list[dict[str, str]]]:
    """The bundled GCP SkyPilot rows (GPU hosts, n1 hosts and accelerator rows), zone by zone."""
    zones: dict[str, list[dict[str, str]]] = {}
    for name in GCP_SOURCES:
        with open(ROOT / "data" / "sources" / "gcp" / name, encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                zones.setdefault(row["AvailabilityZone"], []).append(row)
    return [zones[z] for z in sorted(zones)]


def write_skypilot_gcp(path: Path, rows: int, seed: int) -> None:
    """GCP layout: real zones' rows (hosts and their accelerator rows, about half each) copied
    into synthetic zones, one zone per copy, so the join's accelerator rows grow with the file
    (its worst case: a real catalog has about a hundred zones); prices jittered; ~2% bad rows."""
    rng = random.Random(seed)
    templates = gcp_zones()
    with open(path, "w", encoding="utf-8", newline="") as fh:
        out = csv.DictWriter(fh, GCP_HEADER_COLUMNS, lineterminator="\n")
        out.writeheader()
        written, block = 0, 0
        while written < rows:
            template = templates[block % len(templates)]
            region = f"bench{block // 3}"
            zone = f"{region}-{'abc'[block % 3]}"
            for base in template[: rows - written]:
                row = dict(base)
                factor = rng.uniform(0.9, 1.1)
                row.update(
                    Region=region,
                    AvailabilityZone=zone,
                    Price=f"{float(base['Price']) * factor:.5f}" if base["Price"] else "",
                    SpotPrice=f"{float(base['SpotPrice']) * factor:.5f}" if base["SpotPrice"] else "",
                )
                if rng.random() < 0.02:
                    bad(rng, row)
                out.writerow(row)
            written += len(template[: rows - written])
            block += 1


def write_gpuprov(path: Path, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(GPUPROV_COLUMNS)
        for i in range(rows):
            region = f"bench-{i // 4000 % 250}"
            price = f"{rng.uniform(1, 40):.4f}" if rng.random() > 0.01 else "-1"
            market = "spot" if i % 2 else "on_demand"
            zone = f"{region}-az{i // 2 % 4000}"
            out.writerow(["aws", region, zone, "p4d.24xlarge", "A100", 8, 40, 96, 1152, market, price, "", "USD"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--format", choices=("skypilot", "skypilot-gcp", "gpuprov"), default="skypilot")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    gpuprov = shutil.which("gpuprov") or str(Path(sys.executable).with_name("gpuprov"))
    tmp = tempfile.mkdtemp(prefix="gpuprov-import-")
    try:
        src = Path(tmp) / f"prices-{args.format}.csv"
        start = time.perf_counter()
        writer = {"skypilot": write_skypilot, "skypilot-gcp": write_skypilot_gcp, "gpuprov": write_gpuprov}
        writer[args.format](src, args.rows, args.seed)
        took = time.perf_counter() - start
        print(f"generated {args.rows:,} rows ({src.stat().st_size / 2**20:.0f} MiB) in {took:.1f} s")
        env = {
            **os.environ,
            "GPUPROV_DATABASE_URL": f"sqlite:///{tmp}/bench.db",
            "GPUPROV_CONFIG": f"{tmp}/no-config.yaml",
        }
        # first use loads the bundled catalog: do it before timing
        subprocess.run([gpuprov, "pricing", "snapshots"], env=env, check=True, stdout=subprocess.DEVNULL)
        cmd = [gpuprov, "pricing", "import", str(src), "--format", args.format.removesuffix("-gcp")]
        cmd += ["--as-of", "2026-01-01T00:00:00+00:00"]
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with open(out, "w") as o, open(err, "w") as e:
            start = time.perf_counter()
            child = subprocess.Popen(cmd, env=env, stdout=o, stderr=e)
            _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the largest child's
            wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        print(out.read_text().strip())
        print("\n".join(line for line in err.read_text().splitlines() if line.startswith(("warning", "error"))))
        if code != 0:
            sys.exit(f"import failed with exit {code}")
        peak_kib = usage.ru_maxrss  # KiB on Linux
        con = sqlite3.connect(f"{tmp}/bench.db")
        stored = con.execute(
            "SELECT sum(row_count) FROM gpuprov_snapshot WHERE current = 1 AND source LIKE 'import:%'"
        ).fetchone()[0]
        con.close()
        print(f"rows:          {args.rows:,} ({args.format}); offers in the new snapshot: {stored:,}")
        print(f"wall time:     {wall:.1f} s")
        print(f"rows/s:        {args.rows / wall:,.0f}")
        print(f"peak RSS:      {peak_kib / 1024:.0f} MiB (target < 300 MiB for 1 M rows)")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
