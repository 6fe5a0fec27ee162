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
import re
import sys
from collections import defaultdict
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuprov.errors import ConfigError, UnknownGpuError  # noqa: E402
from gpuprov.models import HOURS_PER_MONTH, Cloud, Market, Offer  # noqa: E402
from pricing import gcp_machines, gpus, interconnect, skypilot  # noqa: E402
from pricing.gpuprov_csv import write_offers  # noqa: E402

SRC = ROOT / "data" / "sources"
OUT = ROOT / "pricing" / "data"
REPORT = SRC / "REPORT-disagreements.csv"

SNAPSHOTS = {
    Cloud.AWS: {
        "as_of": "2025-12-01T00:00:00+00:00",
        "source": "bundled:skypilot-catalog-v8@00148f2a+vantage@7412fd25",
        "note": "AWS on-demand and spot per AZ id (SkyPilot catalog v8, late 2025); "
        "1-year standard no-upfront reserved per region (instances.vantage.sh, 2026-01-21)",
    },
    Cloud.GCP: {
        # as of the older of its two sources, as AWS is dated by its older one
        "as_of": "2026-05-20T00:00:00+00:00",
        "source": "bundled:cyclenerd-pricing@dac31281+anycloud-catalog@62ff0a98",
        "note": "GCP a2/a3-highgpu/a3-megagpu/g2 on-demand and spot per zone, 1- and 3-year committed use "
        "per region, from the Cloud Billing Catalog list (Cyclenerd pricing.yml, generated 2026-08-20), "
        "a3-edgegpu-8g priced as the list's a3-highgpu-8g (same SKUs), a3-highgpu-1g/2g/4g spot only; "
        "other types and n1 hosts with T4/V100/P100/P4 per zone, host VM + GPUs priced together "
        "(anycloud catalog, 2026-05-20)",
    },
    Cloud.AZURE: {
        "as_of": "2026-05-20T00:00:00+00:00",
        "source": "bundled:anycloud-catalog@62ff0a98",
        "note": "Azure on-demand and spot per region (2026-05-20)",
    },
}

# Source labels in the disagreement report.
GCP_LIST = "cyclenerd-pricing@dac31281"
GCP_ANYCLOUD = "anycloud-catalog@62ff0a98"
GCP_SAME_BILL = "cyclenerd-pricing@dac31281:same-bill"  # priced as the listed type it is billed like

# When each source's rows were priced: every offer carries its row's date (one as-of per source).
AS_OF = {
    "skypilot": datetime.fromisoformat("2025-12-01T00:00:00+00:00"),  # "late 2025", conservative
    "vantage": datetime.fromisoformat("2026-01-21T00:00:00+00:00"),
    "cyclenerd": datetime.fromisoformat("2026-08-20T00:00:00+00:00"),
    "anycloud": datetime.fromisoformat("2026-05-20T00:00:00+00:00"),
}
# Two sources pricing one offer "disagree" when the other differs from the kept price by more than this share.
DISAGREEMENT = Decimal("0.15")
REPORT_COLUMNS = (
    "cloud",
    "region",
    "zone",
    "instance_type",
    "market",
    "kept_source",
    "kept_usd",
    "other_source",
    "other_usd",
    "ratio",
)
# A commitment's hourly rate is month / 730, kept to 1e-10 USD (the division rarely ends).
HOURLY_QUANTUM = Decimal("1e-10")

# The list's gpu_key -> the spelling the catalogs use (pricing/gpus.py makes it canonical).
GCP_LIST_GPU = {
    "a100": "A100",  # a2-highgpu / a2-megagpu: the 40 GB part
    "a100-80gb": "A100-80GB",
    "h100-80gb": "H100",
    "h100-80gb-mega": "H100-MEGA",
    "l4": "L4",
    "rtx6000": "RTX PRO 6000",  # g4: not a GPU gpuprov knows yet, so skipped and counted
}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _plain(value: Decimal) -> Decimal:
    """``30.0`` -> ``30``, ``30.50`` -> ``30.5`` (as pricing.skypilot writes quantities)."""
    return value.quantize(Decimal(1)) if value == value.to_integral_value() else value.normalize()


# --- AWS 1-year reservations: rates from the vantage CSV, specs from vantage's JS file ---------------------------


_JS_WORD = re.compile(r"[A-Za-z_$][\w$]*")


def _js_string(text: str, i: int, origin: str) -> tuple[str, int]:
    """The JS string literal starting at ``text[i]`` as a JSON string, and the index after it."""
    quote, j, body = text[i], i + 1, []
    while j < len(text) and text[j] != quote:
        if text[j] == "\\":
            esc = text[j + 1 : j + 2]
            body.append("'" if esc == "'" else "\\" + esc)
            j += 2
        else:
            body.append('\\"' if text[j] == '"' else text[j])
            j += 1
    if j >= len(text):
        raise ConfigError(f"{origin}: unterminated string")
    return json.dumps(json.loads('"' + "".join(body) + '"')), j + 1


def js_data(text: str, origin: str) -> Any:
    """The data literal assigned in a generated JS file (``const x = [...];``), read without eval.

    Outside strings, comments (``//``, ``/* */``) are dropped, single-quoted strings and bare
    identifier keys become JSON strings and trailing commas go; what is left must be JSON.
    """
    out: list[str] = []
    last = ""  # the last non-blank character written
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        word = _JS_WORD.match(text, i)
        if c in "\"'":
            token, i = _js_string(text, i, origin)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ConfigError(f"{origin}: unterminated comment")
            i = end + 2
            continue
        elif word:
            token = word.group(0)
            i += len(token)
            if last in "{," and re.compile(r"\s*:").match(text, i):
                token = json.dumps(token)
        else:
            token, i = c, i + 1
            if c in "]}" and last == ",":
                while out[-1] != ",":  # drop the trailing comma (and the blanks after it)
                    out.pop()
                out.pop()
        out.append(token)
        if token.strip():
            last = token.strip()[-1]
    code = "".join(out)
    start = code.find("=")
    if start < 0:
        raise ConfigError(f"{origin}: no assignment found")
    try:
        return json.loads(code[start + 1 :].strip().rstrip(";"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{origin}: not a JSON-like data literal: {exc}") from None


def _amount(text: str, unit: str, origin: str) -> Decimal:
    m = re.fullmatch(rf"\s*(\d+(?:\.\d+)?)\s*{unit}\b.*", str(text))
    if m is None:
        raise ConfigError(f"{origin}: {text!r} is not an amount in {unit}")
    return Decimal(m.group(1))


def aws_gpu_of(spec: dict[str, Any], origin: str) -> str:
    """The canonical GPU of a vantage instance record: its model, and, where the model names a
    family (A100, V100), the variant whose memory matches. vantage gives ``gpuMemory`` per GPU
    for some types (p3dn: 32 GB) and per instance for others (p4d: 320 GB), so both are tried.
    Raises UnknownGpuError for a model gpuprov does not know."""
    model = re.sub(r"^(NVIDIA|AMD|AWS)\s+", "", spec["gpu"]).removesuffix(" Blackwell")
    names = gpus.resolve(model)
    if len(names) == 1:
        return names[0]
    total = _amount(spec["gpuMemory"], "GB", origin)
    per_gpu = {total, total / Decimal(spec["gpuCount"])}
    hits = [n for n in names if gpus.memory_gib(n) in per_gpu]
    if len(hits) != 1:
        raise ConfigError(f"{origin}: cannot tell which of {', '.join(names)} has {spec['gpuMemory']}")
    return hits[0]


def aws_specs() -> dict[str, tuple[str, int, int, Decimal] | str]:
    """Instance type -> (GPU, GPUs per instance, vCPUs, memory GiB) from vantage-gpu-instances.js,
    or the reason the type cannot be an offer."""
    path = SRC / "aws" / "vantage-gpu-instances.js"
    out: dict[str, tuple[str, int, int, Decimal] | str] = {}
    for spec in js_data(path.read_text(encoding="utf-8"), path.name):
        origin = f"{path.name}: {spec['name']}"
        count = Decimal(str(spec["gpuCount"]))
        if count < 1 or count != count.to_integral_value():
            out[spec["name"]] = "a fractional-GPU type"
            continue
        try:
            gpu = aws_gpu_of(spec, origin)
        except UnknownGpuError:
            out[spec["name"]] = f"a GPU gpuprov does not know ({spec['gpu']})"
            continue
        out[spec["name"]] = (gpu, int(count), int(spec["vcpu"]), _plain(_amount(spec["memory"], "Gi?B", origin)))
    return out


def aws_reserved(on_demand: list[Offer], report: skypilot.ParseReport) -> list[Offer]:
    """1-year standard no-upfront reserved offers per region (zone None), for every instance type
    with a reserved rate whose GPU gpuprov knows. Where the SkyPilot file also describes the type,
    its specs must agree with vantage's, and the CSV must agree with the JS record it came from."""
    specs = aws_specs()
    skypilot_specs = {o.instance_type: (o.gpu, o.gpus_per_instance, o.vcpus, o.memory_gib) for o in on_demand}
    for itype, theirs in skypilot_specs.items():
        if specs.get(itype, theirs) != theirs:
            raise ConfigError(f"AWS {itype}: vantage specs {specs[itype]} differ from SkyPilot's {theirs}")
    out = []
    path = SRC / "aws" / "vantage-ondemand-reserved1y-by-region.csv"
    for line, row in enumerate(csv.DictReader(_lines(path)), start=2):
        if not row["Reserved1y"]:
            continue
        spec = specs.get(row["InstanceType"], "a type vantage-gpu-instances.js does not describe")
        if isinstance(spec, str):
            report.skip(f"reserved rate for {spec}")
            continue
        gpu, count, vcpus, memory = spec
        if gpu != gpus.canonical(row["gpu"]) or count != Decimal(row["n"]):
            raise ConfigError(f"{path.name}:{line}: GPU {row['gpu']} x {row['n']} differs from the JS record")
        report.offers += 1
        out.append(
            Offer(
                cloud=Cloud.AWS,
                region=row["Region"],
                zone=None,
                instance_type=row["InstanceType"],
                gpu=gpu,
                gpus_per_instance=count,
                gpu_memory_gib=gpus.memory_gib(gpu),
                vcpus=vcpus,
                memory_gib=memory,
                market=Market.RESERVED_1Y,
                hourly_usd=Decimal(row["Reserved1y"]),
                interconnect=interconnect.of("aws", row["InstanceType"]),
                as_of=AS_OF["vantage"],
            )
        )
    return out


# --- GCP: the Cloud Billing Catalog list where it prices a machine type, anycloud per zone elsewhere ------------


def gcp_zones(rows: list[Any]) -> dict[tuple[str, str], list[str]]:
    """(machine type, region) -> the zones anycloud lists the machine type in."""
    zones: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in rows:
        if row.get("InstanceType"):
            zones[(row.get("InstanceType"), row.get("Region"))].add(row.get("AvailabilityZone"))
    return {k: sorted(v) for k, v in zones.items()}


def gcp_list(zones: dict[tuple[str, str], list[str]], report: skypilot.ParseReport) -> list[Offer]:
    """Offers from the list: on-demand (``hour``) and spot (``hour_spot``) in every zone of the
    region that anycloud lists the machine type in; 1- and 3-year commitments (``month_1y`` /
    ``month_3y`` divided by 730) once per region, zone None."""
    path = SRC / "gcp" / "cyclenerd-pricing-gpu-all-regions.csv"
    out: list[Offer] = []
    for line, row in enumerate(csv.DictReader(_lines(path)), start=2):
        machine = row["machine_type"]
        count = Decimal(row["gpu_count"])
        if count < 1 or count != count.to_integral_value():
            report.skip("list: fractional GPU")
            continue
        spelling = GCP_LIST_GPU.get(row["gpu_key"], row["gpu_key"])
        try:
            gpu = gpus.canonical(spelling)
        except UnknownGpuError:
            report.skip(f"list: unknown accelerator {spelling}")
            continue
        builtin = skypilot._gcp_builtin(machine)
        if builtin is None or builtin[:2] != (spelling, int(count)):
            raise ConfigError(f"{path.name}:{line}: {machine} with {row['gpu_key']} x {count} is not a known shape")
        names = [machine] + [b.machine for b in gcp_machines.SAME_BILL if b.like == machine]
        for name in names:
            out += _list_offers(row, name, gpu, int(count), builtin[2], zones, report)
    return out


def _list_offers(
    row: dict[str, str],
    machine: str,
    gpu: str,
    count: int,
    fabric: str | None,
    zones: dict[tuple[str, str], list[str]],
    report: skypilot.ParseReport,
) -> list[Offer]:
    """One list row's offers for ``machine`` (the row's own type, or one billed like it): on demand
    and spot in the zones anycloud lists ``machine`` in, commitments per region where anycloud
    lists it at all (the row's own type: always)."""
    region = row["region"]
    out: list[Offer] = []
    base = {
        "cloud": Cloud.GCP,
        "region": region,
        "instance_type": machine,
        "gpu": gpu,
        "gpus_per_instance": count,
        "gpu_memory_gib": gpus.memory_gib(gpu),
        "vcpus": int(Decimal(row["vcpus"])),
        "memory_gib": _plain(Decimal(row["ram_gib"])),
        "interconnect": fabric,
        "as_of": AS_OF["cyclenerd"],
    }
    if machine != row["machine_type"] and (machine, region) not in zones:
        return out  # a same-bill type GCP does not offer in this region
    where = zones.get((machine, region), [])
    if not where:
        # anycloud lists the type in no zone of the region: GCP does not offer it there, so neither
        # its on-demand/spot prices nor a commitment (which would have no alternative) are offers
        report.skip("list: a region with no zone for the type (no offer)")
        return out
    for zone in where:
        for market, column in ((Market.ON_DEMAND, "hour"), (Market.SPOT, "hour_spot")):
            if not gcp_machines.sold_in(machine, market):
                report.skip(f"list: {market.value} of a type GCP does not sell so")
            elif row[column]:
                out.append(Offer(zone=zone, market=market, hourly_usd=Decimal(row[column]), **base))
            else:
                report.skip(f"list: no {column}")
    for market, column in ((Market.RESERVED_1Y, "month_1y"), (Market.RESERVED_3Y, "month_3y")):
        if not gcp_machines.sold_in(machine, market):
            report.skip(f"list: {market.value} of a type GCP does not sell so")
            continue
        if not row[column]:
            report.skip(f"list: no {column}")
            continue
        hourly = (Decimal(row[column]) / HOURS_PER_MONTH).quantize(HOURLY_QUANTUM)
        out.append(Offer(zone=None, market=market, hourly_usd=hourly, **base))
    return out


def disagreement(kept: Offer, kept_source: str, other: Offer, other_source: str) -> list[str] | None:
    """A report row when ``other`` differs from ``kept`` by more than DISAGREEMENT of the kept price."""
    if abs(other.hourly_usd - kept.hourly_usd) <= kept.hourly_usd * DISAGREEMENT:
        return None
    ratio = (other.hourly_usd / kept.hourly_usd).quantize(Decimal("0.0001"))
    return [
        kept.cloud.value,
        kept.region,
        kept.zone or "",
        kept.instance_type,
        kept.market.value,
        kept_source,
        str(kept.hourly_usd),
        other_source,
        str(other.hourly_usd),
        str(ratio),
    ]


def merge_gcp(
    anycloud: list[Offer], listed: list[Offer], report: skypilot.ParseReport
) -> tuple[list[Offer], list[list[str]]]:
    """The list's offers (with the types billed like a listed one), plus anycloud's for the machine
    types and regions the list does not price. Where both price one offer, the list's price is kept
    (never an average) and a disagreement beyond DISAGREEMENT is reported. A market GCP does not
    sell a type in is dropped from anycloud too."""
    covered = {(o.instance_type, o.region) for o in listed}
    by_key = {o.key: o for o in listed}
    out = list(listed)
    rows = []
    for o in anycloud:
        if not gcp_machines.sold_in(o.instance_type, o.market):
            report.skip(f"anycloud: {o.market.value} of a type GCP does not sell so")
            continue
        if o.instance_type.endswith("-nolssd") and o.instance_type.removesuffix("-nolssd") in (
            gcp_machines.SAME_BILL_BY_MACHINE
        ):
            # anycloud prices it as the type with its Local SSD, and no SSD SKU is at hand to take off
            report.skip("anycloud: -nolssd variant of a same-bill type (no Local SSD SKU to subtract)")
            continue
        if (o.instance_type, o.region) not in covered:
            out.append(o)
            continue
        kept = by_key.get(o.key)
        if kept is None:
            report.skip("anycloud offer in a covered region that the list has no zone for")
            out.append(o)
            continue
        report.skip("anycloud offer superseded by the list")
        source = GCP_SAME_BILL if o.instance_type in gcp_machines.SAME_BILL_BY_MACHINE else GCP_LIST
        row = disagreement(kept, source, o, GCP_ANYCLOUD)
        if row is not None:
            rows.append(row)
    return out, sorted(rows)


def build() -> tuple[bytes, bytes, bytes, dict[str, skypilot.ParseReport]]:
    reports = {c.value: skypilot.ParseReport() for c in Cloud}
    offers: list[Offer] = []

    path = SRC / "aws" / "skypilot-v8-vms-gpu-subset.csv"
    _, aws = skypilot.parse(_lines(path), path.name, reports["aws"], Cloud.AWS)
    aws = [replace(o, as_of=AS_OF["skypilot"]) for o in aws]
    offers += aws + aws_reserved(aws, reports["aws"])

    gcp_rows = []
    for name in ("anycloud-vms-gpu.csv", "anycloud-vms-n1-hosts.csv"):
        _, rows = skypilot.read_rows(_lines(SRC / "gcp" / name), name)
        gcp_rows += rows
    anycloud = [replace(o, as_of=AS_OF["anycloud"]) for o in skypilot.parse_gcp(gcp_rows, "gcp", reports["gcp"])]
    zones = gcp_zones(gcp_rows)
    listed = gcp_list(zones, reports["gcp"])
    gcp, disagreements = merge_gcp(anycloud, listed, reports["gcp"])
    reports["gcp"].offers = len(gcp)
    offers += gcp

    path = SRC / "azure" / "anycloud-vms-gpu.csv"
    _, azure = skypilot.parse(_lines(path), path.name, reports["azure"], Cloud.AZURE)
    offers += [replace(o, as_of=AS_OF["anycloud"]) for o in azure]

    keys = [(*o.key, o.gpu, o.gpus_per_instance) for o in offers]
    if len(set(keys)) != len(keys):
        raise ConfigError("two offers share one (cloud, region, zone, type, market, GPU, count)")
    offers.sort(key=lambda o: o.key)
    buf = io.StringIO()
    write_offers(offers, buf)
    blob = gzip.compress(buf.getvalue().encode("utf-8"), mtime=0)
    meta = {
        "snapshots": [{"cloud": c.value, **SNAPSHOTS[c], "rows": sum(1 for o in offers if o.cloud == c)} for c in Cloud]
    }
    rep = io.StringIO()
    writer = csv.writer(rep, lineterminator="\n")
    writer.writerow(REPORT_COLUMNS)
    writer.writerows(disagreements)
    meta_bytes = (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()
    return blob, meta_bytes, rep.getvalue().encode("utf-8"), reports


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    blob, meta, report, reports = build()
    for cloud, rep in reports.items():
        skipped = ", ".join(f"{k}: {v}" for k, v in sorted(rep.skipped.items()))
        print(f"{cloud}: {rep.offers} offers; skipped {skipped or 'none'}")
    n_rows = report.decode().count("\n") - 1
    print(f"{n_rows} disagreements beyond {DISAGREEMENT * 100}% between sources (see {REPORT.name})")
    targets = {OUT / "offers.csv.gz": blob, OUT / "snapshot.json": meta, REPORT: report}
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
