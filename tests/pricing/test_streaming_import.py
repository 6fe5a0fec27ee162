"""``pricing import`` streams: rows are read, checked and stored a batch at a time, with the same
result as checking the whole file at once; a file that fails part way stores nothing."""

from __future__ import annotations

import csv
import io
import random
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.errors import ConfigError, PricingError
from gpuprov.models import Cloud, Market, Offer
from gpuprov.store.catalog import Catalog
from pricing import importer, skypilot
from pricing.gpuprov_csv import read_offers, write_offers
from pricing.gpus import GPUS
from pricing.validate import check_offers
from tests.conftest import ROOT

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
SKYPILOT_AWS = ROOT / "data" / "sources" / "aws" / "skypilot-v8-vms-gpu-subset.csv"
GPU_NAMES = [g.name for g in GPUS]


def offer(
    zone: str | None, market: Market, price: str, region: str = "us-east-1", itype: str = "p4d.24xlarge"
) -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region=region,
        zone=zone,
        instance_type=itype,
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=Decimal(1152),
        market=market,
        hourly_usd=Decimal(price),
    )


def gpuprov_file(path: Path, offers: list[Offer], tail: str = "") -> Path:
    buf = io.StringIO()
    write_offers(offers, buf)
    path.write_text(buf.getvalue() + tail, encoding="utf-8")
    return path


def run_import(catalog: Catalog, path: Path, fmt: str = "gpuprov", batch_rows: int = 100) -> list[importer.Imported]:
    report = skypilot.ParseReport()
    with importer.read_source(path, fmt, report) as offers:
        return importer.store(
            offers, catalog, f"import:{path.name}", WHEN, report, GPU_NAMES, path.name, batch_rows=batch_rows
        )


def current_offers(catalog: Catalog, cloud: Cloud = Cloud.AWS) -> list[Offer]:
    return catalog.offers(GPU_NAMES, [cloud])


def mixed_offers(n: int, seed: int) -> list[Offer]:
    """On-demand and spot offers over a few pools, some regional, some bad, some spot far above."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        zone = rng.choice([None, "use1-az1", "use1-az2", "use1-az4"])
        market = rng.choice([Market.ON_DEMAND, Market.SPOT])
        price = rng.choice(["32.77", "9.83", "50.10", "2.5", "0", "-1", "99999", "0.00001", str(rng.randint(1, 60))])
        out.append(
            offer(
                zone,
                market,
                price,
                rng.choice(["us-east-1", "us-west-2"]),
                rng.choice(["p4d.24xlarge", "p4de.24xlarge"]),
            )
        )
    return out


def test_a_few_thousand_rows_stream_to_the_same_offers_as_checking_the_whole_file(
    _isolated_db: str, tmp_path: Path
) -> None:
    offers = mixed_offers(3000, seed=1)
    path = gpuprov_file(tmp_path / "prices.csv", offers)
    expected, skipped = check_offers(
        list(read_offers(path.read_text().splitlines(keepends=True), "x", skypilot.ParseReport()))
    )
    assert skipped["spot above on-demand"] > 0 and expected  # the case exercises the cross-row check
    catalog = Catalog(_isolated_db)
    (done,) = run_import(catalog, path, batch_rows=97)  # many batches
    assert done.from_file == len(expected) and done.kept == 0 and done.previous is None
    assert current_offers(catalog) == expected  # the same offers, in the same order
    assert done.snapshot.row_count == len(expected)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from([None, "use1-az1", "use1-az2"]),
            st.sampled_from([Market.ON_DEMAND, Market.SPOT]),
            st.sampled_from(["1", "1.5", "1.50", "2", "3.0001", "0", "-2", "10"]),
            st.sampled_from(["us-east-1", "us-west-2"]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_streamed_result_equals_the_whole_file_check(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str | None, Market, str, str]]
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    offers = [offer(z, m, p, r) for z, m, p, r in rows]
    expected, skipped = check_offers(offers)
    catalog = Catalog(f"sqlite:///{tmp / 'db.sqlite'}")
    path = gpuprov_file(tmp / "p.csv", offers)
    report = skypilot.ParseReport()
    if not expected:
        with pytest.raises(PricingError, match="nothing was stored"):
            with importer.read_source(path, "gpuprov", report) as it:
                importer.store(it, catalog, "import:p", WHEN, report, GPU_NAMES, "p", batch_rows=3)
        assert catalog.snapshots() == []
    else:
        with importer.read_source(path, "gpuprov", report) as it:
            importer.store(it, catalog, "import:p", WHEN, report, GPU_NAMES, "p", batch_rows=3)
        assert current_offers(catalog) == expected
    assert report.skipped == skipped


def test_reading_is_incremental_and_a_file_broken_half_way_stores_nothing(_isolated_db: str, tmp_path: Path) -> None:
    good = [offer(f"use1-az{i % 6}", Market.ON_DEMAND, f"{10 + i % 7}.5", itype=f"p4d.{i}xlarge") for i in range(4000)]
    catalog = Catalog(_isolated_db)
    run_import(catalog, gpuprov_file(tmp_path / "first.csv", good[:10]))
    before = catalog.snapshots()
    for name, tail, message in [
        ("not-utf8.csv", "aws,us-east-1,\xff", "not UTF-8"),
        ("long-line.csv", "aws," + "x" * 2_000_000 + "\n", "longer than"),
        ("broken-csv.csv", 'aws,"unterminated' + "x" * 200_000 + "\n", "not CSV"),
    ]:
        path = gpuprov_file(tmp_path / name, good)
        if "\xff" in tail:
            path.write_bytes(path.read_bytes() + b"aws,us-east-1,\xff\n")
        else:
            path.write_text(path.read_text() + tail)
        report = skypilot.ParseReport()
        seen = 0
        with pytest.raises(ConfigError, match=message) as err, importer.read_source(path, "gpuprov", report) as offers:
            for _ in offers:  # the offers come before the broken line is read: the file is streamed
                seen += 1
        assert seen == 4000, name
        assert ":4002" in err.value.message or "line" in err.value.message
        with pytest.raises(ConfigError, match=message):
            run_import(catalog, path, batch_rows=500)  # 8 batches were written before the tail broke
        assert catalog.snapshots() == before, name  # rolled back: no snapshot, the old one current
        assert len(current_offers(catalog)) == 10


def test_a_file_whose_rows_are_all_bad_after_a_good_head_keeps_the_head_and_an_all_bad_file_stores_nothing(
    _isolated_db: str, tmp_path: Path
) -> None:
    catalog = Catalog(_isolated_db)
    head = [offer(f"use1-az{i % 3}", Market.ON_DEMAND, "12.5", itype=f"p4d.{i}x") for i in range(300)]
    tail = [offer("use1-az1", Market.ON_DEMAND, price) for price in ("0", "-3", "99999") * 200]
    (done,) = run_import(catalog, gpuprov_file(tmp_path / "half.csv", head + tail))
    assert done.from_file == 300
    before = catalog.snapshots()
    with pytest.raises(PricingError, match="nothing was stored"):
        run_import(catalog, gpuprov_file(tmp_path / "bad.csv", tail))
    assert catalog.snapshots() == before


def test_other_markets_carry_over_through_the_database(_isolated_db: str, tmp_path: Path) -> None:
    catalog = Catalog(_isolated_db)
    reserved = offer("use1-az1", Market.RESERVED_1Y, "20")
    run_import(catalog, gpuprov_file(tmp_path / "a.csv", [offer("use1-az1", Market.ON_DEMAND, "30"), reserved]))
    first = catalog.snapshots(current_only=True)[0]
    (done,) = run_import(catalog, gpuprov_file(tmp_path / "b.csv", [offer("use1-az1", Market.ON_DEMAND, "31")]))
    assert (done.kept, done.previous, done.markets) == (1, first.id, {Market.ON_DEMAND})
    assert current_offers(catalog) == [offer("use1-az1", Market.ON_DEMAND, "31"), reserved]


def test_a_skypilot_file_streams_to_what_parse_and_check_give(_isolated_db: str) -> None:
    report = skypilot.ParseReport()
    _, parsed = skypilot.parse(SKYPILOT_AWS.read_text().splitlines(keepends=True), SKYPILOT_AWS.name, report)
    expected, _ = check_offers(parsed)
    catalog = Catalog(_isolated_db)
    (done,) = run_import(catalog, SKYPILOT_AWS, "skypilot", batch_rows=50)
    assert done.from_file == len(expected)
    assert current_offers(catalog) == expected


def test_the_skip_report_stays_bounded() -> None:
    report = skypilot.ParseReport()
    for line in range(2, 100_002):
        report.skip(f"unknown accelerator X{line % 500}", line)
    assert len(report.skipped) == skypilot.MAX_REASONS + 1 and sum(report.skipped.values()) == 100_000
    assert all(len(v) <= skypilot.MAX_LINES_PER_REASON for v in report.lines.values())
    other = [line for line in report.summary() if skypilot.OTHER_REASONS in line]
    assert other and "… and" in other[0] and "more)" in other[0]


def test_the_cli_says_skipped_lines_and_how_many_more(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuprov.cli import app

    rows = list(csv.reader(io.StringIO(SKYPILOT_AWS.read_text())))
    header, body = rows[0], rows[1:]
    price = header.index("Price")
    bad = [[*r[:price], "n/a", *r[price + 1 :]] for r in body[:30]]
    path = tmp_path / "vms.csv"
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([header, *bad, *body[30:]])
    r = CliRunner().invoke(
        app, ["pricing", "import", str(path), "--format", "skypilot", "--as-of", "2025-12-01T00:00:00+00:00"]
    )
    assert r.exit_code == 0, r.stderr
    assert "skipped 30 rows: non-numeric number field (lines 2, 3, 4," in r.stderr and "… and 10 more)" in r.stderr
