"""A GCP SkyPilot file is imported in two passes (accelerator rows first, then the host rows
streamed) with the very offers and skip report of the one-pass join that held every row."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gpuprov.models import Cloud, Market, Offer
from gpuprov.store.catalog import Catalog
from pricing import importer, skypilot
from pricing.gpus import GPUS
from tests.conftest import ROOT

GCP = ROOT / "data" / "sources" / "gcp"
SOURCES = ("anycloud-vms-gpu.csv", "anycloud-vms-n1-hosts.csv")
WHEN = datetime(2026, 1, 1, tzinfo=UTC)
GPU_NAMES = [g.name for g in GPUS]


def both(tmp_path: Path) -> Path:
    """The two bundled GCP SkyPilot files as one (the layout SkyPilot ships: hosts and GPUs together)."""
    out = tmp_path / "gcp-vms.csv"
    lines = (GCP / SOURCES[0]).read_text(encoding="utf-8").splitlines(keepends=True)
    lines += (GCP / SOURCES[1]).read_text(encoding="utf-8").splitlines(keepends=True)[1:]
    out.write_text("".join(lines), encoding="utf-8")
    return out


def hostile(tmp_path: Path) -> Path:
    """The bundled rows with every kind of row the join skips or counts, mixed in."""
    src = both(tmp_path).read_text(encoding="utf-8").splitlines(keepends=True)
    extra = [
        "a2-highgpu-1g,12.0,85.0,,,,nowhere1,nowhere1-a,0.9,0.4\n",  # host without its GPU price
        ",,,T4,0.5,,us-central1,us-central1-a,0.1,0.05\n",  # fractional GPU
        ",,,,,,us-central1,us-central1-a,0.1,0.05\n",  # neither a host nor an accelerator
        ",,,A100,3,,us-central1,us-central1-a,1.1,0.5\n",  # GPU without a host machine type
        ",,,T4,16,,us-central1,us-central1-a,1.1,0.5\n",  # attachable, no n1 size for 16
        ",,,T4,1,,lonely1,lonely1-a,0.35,0.1\n",  # attachable GPU without an n1 host price
        "n1-standard-8,8.0,30.0,,,,lonely2,lonely2-a,0.38,\n",  # n1 host: no spot quote
        ",,,P4,1,,lonely2,lonely2-a,0.6,0.2\n",
        "a2-highgpu-1g,12.0,85.0,,,,us central1,us-central1-a,0.9,0.4\n",  # bad identifier
        "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,n/a,0.4\n",  # non-numeric
        "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,-1,0.4\n",  # negative
        "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.9,0.4,extra\n",  # more fields
        ",,,Z100,1,,us-central1,us-central1-a,1.0,0.5\n",  # unknown accelerator (no host)
    ]
    rng = list(range(1, len(src)))
    for i, row in enumerate(extra):  # spread over the file, deterministically
        src.insert(rng[(i * 97) % len(rng)], row)
    out = tmp_path / "gcp-hostile.csv"
    out.write_text("".join(src), encoding="utf-8")
    return out


def one_pass(path: Path) -> tuple[list[tuple[int, Offer]], skypilot.ParseReport]:
    report = skypilot.ParseReport()
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    _, offers = skypilot.stream(lines, path.name, report)  # no reread: the rows are held
    return list(offers), report


def two_pass(path: Path) -> tuple[list[tuple[int, Offer]], skypilot.ParseReport]:
    report = skypilot.ParseReport()
    with importer.read_source(path, "skypilot", report) as offers:
        return list(offers), report


@pytest.mark.parametrize("name", [*SOURCES, "both", "hostile"])
def test_two_passes_give_the_one_pass_offers_and_report(name: str, tmp_path: Path) -> None:
    path = {"both": both, "hostile": hostile}.get(name, lambda _: GCP / name)(tmp_path)
    old, old_report = one_pass(path)
    new, new_report = two_pass(path)
    assert Counter(new) == Counter(old)
    assert len(new) == len(old) == old_report.offers == new_report.offers
    assert new_report.skipped == old_report.skipped
    assert {k: sorted(v) for k, v in new_report.lines.items()} == {k: sorted(v) for k, v in old_report.lines.items()}
    assert new_report.line_count == old_report.line_count
    if name == "both":
        assert len(new) > 1500 and {o.instance_type for _, o in new} >= {"n1-standard-8", "a3-highgpu-8g"}
    if name == "hostile":
        assert set(new_report.skipped) >= {
            "host without its GPU price",
            "fractional GPU",
            "neither a host nor an accelerator",
            "GPU without a host machine type",
            "attachable GPU without an n1 host price",
            "identifier outside [A-Za-z0-9._:/-]",
            "non-numeric number field",
            "negative number",
            "more fields than the header has",
            "no spot quote",
        }


def test_an_attached_gpu_is_priced_as_host_plus_gpus_read_from_the_csv(tmp_path: Path) -> None:
    """Independent of the parser: n1-standard-8 + 1 × T4 in each zone, summed from the CSV rows."""
    rows = list(csv.DictReader(both(tmp_path).open(encoding="utf-8")))
    hosts = {r["AvailabilityZone"]: r for r in rows if r["InstanceType"] == "n1-standard-8"}
    t4 = {
        r["AvailabilityZone"]: r
        for r in rows
        if not r["InstanceType"] and r["AcceleratorName"] == "T4" and r["AcceleratorCount"] in ("1", "1.0")
    }
    expected = {
        (zone, Market.ON_DEMAND): Decimal(h["Price"]) + Decimal(t4[zone]["Price"])
        for zone, h in hosts.items()
        if zone in t4
    }
    assert len(expected) > 20
    new, _ = two_pass(both(tmp_path))
    got = {
        (o.zone, o.market): o.hourly_usd
        for _, o in new
        if o.instance_type == "n1-standard-8" and o.gpu == "T4" and o.market is Market.ON_DEMAND
    }
    assert got == expected


def test_the_second_pass_emits_offers_as_it_reads() -> None:
    """Pass 2 yields a host's offers right after reading its row, not after the whole file."""
    header = ",".join(skypilot.GCP_HEADER) + "\n"
    body = [",,,L4,1,,r1,r1-a,0.5,0.2\n"] + ["g2-standard-4,4.0,16.0,,,,r1,r1-a,0.2,0.1\n"] * 1000
    lines = [header, *body]
    read = Counter[str]()

    def counted(src: Iterable[str]) -> Iterator[str]:
        for line in src:
            read["lines"] += 1
            yield line

    report = skypilot.ParseReport()
    _, offers = skypilot.stream(counted(lines), "x.csv", report, reread=lambda: counted(lines))
    first = next(offers)
    assert first[1].instance_type == "g2-standard-4" and first[1].hourly_usd == Decimal("0.7")
    assert read["lines"] < len(lines) + 10  # pass 1 read the file once; pass 2 only its first rows
    rest = list(offers)
    assert len(rest) == 1999 and read["lines"] == 2 * len(lines)


def test_an_import_stores_the_same_catalog_through_either_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = hostile(tmp_path)

    def stored(url: str) -> Counter[Offer]:
        catalog = Catalog(url)
        report = skypilot.ParseReport()
        with importer.read_source(path, "skypilot", report) as offers:
            importer.store(offers, catalog, "import:x", WHEN, report, GPU_NAMES, path.name, batch_rows=97)
        return Counter(catalog.offers(GPU_NAMES, [Cloud.GCP]))

    new = stored(f"sqlite:///{tmp_path / 'new.db'}")
    monkeypatch.setattr(importer, "_rereader", lambda *a: None)  # a pipe: the one-pass join
    old = stored(f"sqlite:///{tmp_path / 'old.db'}")
    assert new == old and sum(new.values()) > 1500


def _header(path: Path) -> tuple[str, ...]:
    with path.open(encoding="utf-8") as fh:
        return tuple(next(csv.reader(fh)))


def test_the_layouts_are_told_apart_by_their_headers() -> None:
    # AWS and GCP have the same ten columns; before this, a GCP file was read as AWS and failed
    assert set(_header(GCP / SOURCES[0])) <= set(_header(ROOT / "data/sources/aws/skypilot-v8-vms-gpu-subset.csv"))
    for name in SOURCES:
        assert skypilot.detect_cloud(_header(GCP / name), name) is Cloud.GCP
    aws = _header(ROOT / "data" / "sources" / "aws" / "skypilot-v8-vms-gpu-subset.csv")
    assert skypilot.detect_cloud(aws, "aws") is Cloud.AWS
    assert skypilot.detect_cloud(tuple(c for c in aws if c != "Arch"), "aws") is Cloud.AWS  # pre-v8 AWS
    azure = _header(ROOT / "data" / "sources" / "azure" / "anycloud-vms-gpu.csv")
    assert skypilot.detect_cloud(azure, "azure") is Cloud.AZURE


def test_the_cli_imports_a_gcp_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuprov.cli import app

    path = both(tmp_path)
    old, _ = one_pass(path)
    r = CliRunner().invoke(
        app,
        [
            "pricing",
            "import",
            str(path),
            "--format",
            "skypilot",
            "--cloud",
            "gcp",
            "--as-of",
            "2026-01-01T00:00:00+00:00",
        ],
    )
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("gcp: snapshot ") and "(on_demand, spot)" in r.stdout
    stored = [o for o in Catalog().offers(GPU_NAMES, [Cloud.GCP]) if o.market in (Market.ON_DEMAND, Market.SPOT)]
    # 1,880 rows less the 20 H200 on-demand rows whose GPU row is below its own spot (no quote)
    assert Counter(stored) == Counter(o for _, o in old) and len(stored) == 1860
