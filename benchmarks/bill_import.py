"""How much memory and time ``gpuprov bill import`` takes on a large FOCUS export.

Writes a FOCUS 1.2 export of ``--rows`` rows (default 10 M) shaped like an AWS Data Exports
month: hourly rows; 10% GPU instance hours (p4d, p5, g5; half of them tagged by gpuprov), 1%
rows of a Savings Plan (used and unused), the rest storage, network and other compute rows that
are read, checked and counted but not kept. The CSV is written to a
temporary file and imported by ``gpuprov bill import`` in a child process; ``--parquet`` then
converts it to Parquet (pyarrow, streamed; money as doubles, times as timestamps, as AWS writes
them) and imports that into the same database (replacing the first import's charges, as a
restated month would). Prints rows, rows kept, seconds, rows per second and the importing
process's own peak resident memory (getrusage in the child).

    python benchmarks/bill_import.py [--rows 10000000] [--parquet]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.billing.month import HEADER

START = datetime(2026, 6, 1, tzinfo=UTC)
GPU = [("p4d.24xlarge", "32.7726"), ("p5.48xlarge", "55.04"), ("g5.12xlarge", "5.672")]
OTHER = [
    ("Storage", "Amazon Simple Storage Service", "$0.023 per GB-Mo for storage", "0.0031"),
    ("Networking", "Amazon Elastic Compute Cloud", "$0.01 per GB - regional data transfer", "0.0147"),
    ("Compute", "Amazon Elastic Compute Cloud", "$0.096 per On Demand Linux m5.large Instance Hour", "0.096"),
    ("Storage", "Amazon Elastic Compute Cloud", "$0.08 per GB-month of General Purpose (gp3)", "0.0122"),
]


def z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def rows(n: int):  # type: ignore[no-untyped-def]
    base = {
        "BillingAccountId": "123456789012",
        "BillingAccountName": "bench",
        "BillingAccountType": "Billing Account",
        "BillingCurrency": "USD",
        "BillingPeriodStart": z(START),
        "BillingPeriodEnd": z(START + timedelta(days=30)),
        "ChargeCategory": "Usage",
        "ChargeFrequency": "Usage-Based",
        "InvoiceIssuerName": "Amazon Web Services, Inc.",
        "ProviderName": "AWS",
        "PublisherName": "Amazon Web Services, Inc.",
        "RegionId": "us-east-1",
        "RegionName": "US East (N. Virginia)",
        "SubAccountId": "123456789012",
        "SubAccountName": "bench",
        "SubAccountType": "AWS Account",
    }
    hours = [z(START + timedelta(hours=h)) for h in range(721)]
    for i in range(n):
        h = i % 720
        r = dict(base)
        r["ChargePeriodStart"], r["ChargePeriodEnd"] = hours[h], hours[h + 1]
        k = i % 100
        if k < 10:
            itype, price = GPU[i % 3]
            tags = {"team": "ml"}
            if k < 5:
                tags |= {"gpuprov-owner": "bench", "gpuprov-plan": "p1", "gpuprov-workload": "training",
                         "gpuprov-market": "on_demand"}  # fmt: skip
            r |= {
                "ServiceCategory": "Compute",
                "ServiceName": "Amazon Elastic Compute Cloud",
                "ChargeDescription": f"${price} per On Demand Linux {itype} Instance Hour",
                "BilledCost": price,
                "EffectiveCost": price,
                "ListCost": price,
                "ListUnitPrice": price,
                "ContractedCost": price,
                "ContractedUnitPrice": price,
                "PricingCategory": "Standard",
                "PricingQuantity": "1",
                "PricingUnit": "Hours",
                "ConsumedQuantity": "1",
                "ConsumedUnit": "Hours",
                "ResourceId": f"i-{i // 720:016x}",
                "ResourceType": "Instance",
                "SkuMeter": f"BoxUsage:{itype}",
                "SkuPriceDetails": json.dumps({"InstanceType": itype}),
                "AvailabilityZone": "us-east-1a",
                "Tags": json.dumps(tags),
            }
        elif k == 10:
            r |= {
                "ServiceCategory": "Compute",
                "ServiceName": "Savings Plans for AWS Compute usage",
                "ChargeDescription": "Savings Plan unused commitment",
                "BilledCost": "0",
                "EffectiveCost": "1.25",
                "ListCost": "0",
                "ContractedCost": "0",
                "PricingCategory": "Committed",
                "CommitmentDiscountId": "arn:aws:savingsplans::123456789012:savingsplan/bench",
                "CommitmentDiscountStatus": "Unused",
                "CommitmentDiscountType": "Savings Plan",
                "CommitmentDiscountCategory": "Spend",
                "Tags": "{}",
            }
        else:
            cat, service, desc, cost = OTHER[i % 4]
            r |= {
                "ServiceCategory": cat,
                "ServiceName": service,
                "ChargeDescription": desc,
                "BilledCost": cost,
                "EffectiveCost": cost,
                "ListCost": cost,
                "ContractedCost": cost,
                "PricingCategory": "Standard",
                "PricingQuantity": "1",
                "PricingUnit": "Units",
                "ResourceId": f"vol-{i:016x}",
                "Tags": json.dumps({"team": "web", "env": "prod"}),
            }
        yield r


def write_csv(path: Path, n: int) -> None:
    """The export as a file, fast: each row kind rendered once as a CSV line with slots for the
    hour and the resource id (csv quoting done once per template)."""
    templates: dict[int, str] = {}
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, HEADER, restval="", lineterminator="\n")
        w.writeheader()
        hours = [z(START + timedelta(hours=h)) for h in range(721)]
        chunk: list[str] = []
        for i, r in enumerate(rows(min(n, 400))):  # the 400 row shapes (i % 100, i % 4 and i % 3 cycle)
            r = {**r, "ChargePeriodStart": "@S@", "ChargePeriodEnd": "@E@"}
            if "ResourceId" in r:
                r["ResourceId"] = "@R@"
            buf = io.StringIO()
            csv.DictWriter(buf, HEADER, restval="", lineterminator="\n").writerow(r)
            templates[i] = buf.getvalue()
        for i in range(n):
            h = i % 720
            rid = f"i-{i // 720:016x}" if i % 100 < 10 else f"vol-{i:016x}"
            line = templates[i % 400].replace("@S@", hours[h]).replace("@E@", hours[h + 1]).replace("@R@", rid)
            chunk.append(line)
            if len(chunk) >= 10_000:
                fh.write("".join(chunk))
                chunk = []
        fh.write("".join(chunk))


def to_parquet(src: Path, dst: Path) -> None:
    """The same export as Parquet, streamed (pyarrow's CSV reader, one row group per block):
    money as doubles and times as timestamps, as AWS writes them."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from gpuprov.billing import focus

    spec = focus.columns("1.2")
    types = {}
    for c in HEADER:
        kind = spec[c].data_type if c in spec else "String"
        types[c] = (
            pa.float64() if kind == "Decimal" else pa.timestamp("ms", "UTC") if kind == "Date/Time" else pa.string()
        )
    opts = pcsv.ConvertOptions(column_types=types, strings_can_be_null=True, null_values=[""])
    reader = pcsv.open_csv(src, read_options=pcsv.ReadOptions(block_size=64 << 20), convert_options=opts)
    with pq.ParquetWriter(dst, reader.schema) as writer:
        for batch in reader:
            writer.write_batch(batch)


def run_import(path: Path) -> tuple[float, int, dict[str, object]]:
    """Import in a child process; its seconds, its peak resident memory (KiB) and its summary."""
    began = time.perf_counter()
    code = (
        "import json, resource, sys\n"
        "from gpuprov.cli import app\n"
        "try:\n"
        "    app(['bill', 'import', sys.argv[1], '-o', 'json'])\n"
        "except SystemExit as exc:\n"
        "    sys.stderr.write(f'peak_kib {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')\n"
        "    raise\n"
    )
    child = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if child.returncode != 0:
        raise SystemExit(f"import failed: {child.stderr[-800:]}")
    peak = int(child.stderr.rsplit("peak_kib ", 1)[1].split()[0])
    return seconds, peak, json.loads(child.stdout)["imports"][0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--parquet", action="store_true", help="also convert to Parquet and import that")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuprov-bench-bill-") as tmp:
        os.environ["GPUPROV_DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'bench.db'}"
        os.environ["GPUPROV_CONFIG"] = str(Path(tmp) / "none.yaml")
        path = Path(tmp) / "export.csv"
        began = time.perf_counter()
        write_csv(path, a.rows)
        gib = path.stat().st_size / 2**30
        print(f"wrote {a.rows:,} rows, {gib:.2f} GiB of CSV in {time.perf_counter() - began:.0f} s")
        for label, file in [("CSV", path)] + ([("Parquet", Path(tmp) / "export.parquet")] if a.parquet else []):
            if label == "Parquet":
                began = time.perf_counter()
                to_parquet(path, file)
                path.unlink()
                mib = file.stat().st_size / 2**20
                print(f"converted to {mib:.0f} MiB of Parquet in {time.perf_counter() - began:.0f} s")
            seconds, peak, body = run_import(file)
            size = (Path(tmp) / "bench.db").stat().st_size
            rows_ = int(body["rows"])  # type: ignore[call-overload]
            print(
                f"{label}: {rows_:,} rows, kept {body['kept_rows']:,} {body['kept']}, {seconds:.0f} s "
                f"({rows_ / seconds:,.0f} rows/s), peak RSS {peak / 1024:.0f} MiB; database {size / 2**20:.0f} MiB"
            )


if __name__ == "__main__":
    main()
