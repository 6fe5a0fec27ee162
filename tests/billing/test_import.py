"""``gpuprov bill import`` on the official FOCUS sample data and the spec's commitment-discount
scenarios (tests/fixtures/billing, see its PROVENANCE.md): every count and sum checked against a
reading of the same file by the standard library here, never by the importer."""

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.billing.charges import Types
from gpuprov.billing.importer import import_files
from gpuprov.cli import app
from gpuprov.errors import UsageError
from gpuprov.store.billing import BillStore
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "billing"
SAMPLE = FIXTURES / "focus_1.0_sample_1000rows.csv"
GPU_ROWS = FIXTURES / "focus_1.0_sample_gpu_instance_rows.csv"  # cut from SAMPLE with grep (PROVENANCE.md)
SCENARIOS = sorted((FIXTURES / "focus_spec_data").glob("*/*.csv"))
CORRECTED = FIXTURES / "corrected"
TYPES = Types({"aws": {"g5.4xlarge", "p4d.24xlarge"}})  # g3.4xlarge is found by its family (AWS G)


def rows_of(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return [r for r in csv.DictReader(fh) if any((v or "").strip() for v in r.values())]


def null(v: str | None) -> bool:
    return v is None or v.strip() in ("", "NULL", "null")


def total(rows: list[dict[str, str]], column: str) -> Decimal:
    return sum((Decimal(r[column]) for r in rows if not null(r.get(column))), Decimal(0))


def cents(d: Decimal) -> Decimal:
    return d.quantize(Decimal("0.01"))


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def stored(url: str) -> list[sqlite3.Row]:
    con = sqlite3.connect(url.removeprefix("sqlite:///"))
    con.row_factory = sqlite3.Row
    try:
        return con.execute("SELECT * FROM gpuprov_bill_charge ORDER BY id").fetchall()
    finally:
        con.close()


# -- the official sample ------------------------------------------------------------------------


def test_the_official_sample_imports_exactly(_isolated_db: str) -> None:
    every = rows_of(SAMPLE)
    gpu = rows_of(GPU_ROWS)
    committed = [r for r in every if not null(r["CommitmentDiscountId"])]
    assert (len(every), len(gpu), len(committed)) == (1000, 10, 4)
    [s] = import_files([SAMPLE], BillStore(), TYPES)
    assert (s.focus_version, s.format, s.rows) == ("1.0", "csv", 1000)
    for column, got in (("BilledCost", s.billed_usd), ("EffectiveCost", s.effective_usd), ("ListCost", s.list_usd)):
        assert got == total(every, column), column  # exact, not only to the cent
    assert s.kept == Counter(instance=10, commitment=4)
    charges = BillStore().charges()
    instances = [c for c in charges if c.kind == "instance"]
    assert sorted((c.resource_id, c.start.strftime("%Y-%m-%d %H:%M:%S")) for c in instances) == sorted(
        (r["ResourceId"], r["ChargePeriodStart"]) for r in gpu
    )
    assert Counter(c.instance_type for c in instances) == Counter({"g5.4xlarge": 8, "g3.4xlarge": 2})
    assert sum((c.billed for c in instances), Decimal(0)) == total(gpu, "BilledCost")
    assert sum((c.effective for c in instances), Decimal(0)) == total(gpu, "EffectiveCost")
    assert cents(total(gpu, "BilledCost")) == Decimal("12.13")  # the figure the README quotes
    commitments = [c for c in charges if c.kind == "commitment"]
    assert sorted(c.commitment_id for c in commitments) == sorted(r["CommitmentDiscountId"] for r in committed)
    assert {c.commitment_status for c in commitments} == {"Used"}
    assert all(c.start.tzinfo is not None and c.start.utcoffset().total_seconds() == 0 for c in charges)
    nulls = sum(1 for r in every if null(r["ContractedCost"]))
    assert f"null in ContractedCost in {nulls} rows (FOCUS allows none)" in s.notes
    assert any("Id" in n and "not FOCUS 1.0" in n for n in s.notes)


def test_the_sample_through_the_command_in_json(_isolated_db: str) -> None:
    code, out, err = cli("bill", "import", str(SAMPLE), "--output", "json")
    assert code == 0, err
    [body] = json.loads(out)["imports"]
    every = rows_of(SAMPLE)
    assert body["rows"] == 1000 and body["kept"] == {"commitment": 4, "instance": 10}
    assert Decimal(body["billed_usd"]) == total(every, "BilledCost")
    assert isinstance(body["billed_usd"], str)  # money is a decimal string
    clouds = {c["provider"]: c["cloud"] for c in body["coverage"]}
    assert clouds == {"AWS": "aws", "Microsoft": "azure", "Oracle": None}
    code, out, _ = cli("bill", "imports", "-o", "json")
    assert code == 0 and json.loads(out)[0]["stored_now"] == 14


# -- the commitment-discount scenarios -----------------------------------------------------------


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_each_commitment_discount_scenario(path: Path, _isolated_db: str) -> None:
    every = rows_of(path)
    broken = any("T30:" in r["ChargePeriodEnd"] for r in every)  # the spec's own typo (PROVENANCE.md)
    if broken:
        with pytest.raises(UsageError) as info:
            import_files([path], BillStore(), TYPES)
        line = next(i for i, r in enumerate(every, start=2) if "T30:" in r["ChargePeriodEnd"])
        assert f"(line {line}): ChargePeriodEnd: not an ISO 8601 date and time" in info.value.message
        assert "nothing was stored" in info.value.message
        assert BillStore().imports() == [] and stored(_isolated_db) == []
        path = CORRECTED / path.name
        every = rows_of(path)
    [s] = import_files([path], BillStore(), TYPES)
    assert s.rows == len(every)
    assert s.billed_usd == total(every, "BilledCost") and s.effective_usd == total(every, "EffectiveCost")
    committed = [r for r in every if not null(r["CommitmentDiscountId"])]
    got = stored(_isolated_db)
    assert len(got) == len(committed)
    assert sum(Decimal(r["billed"]) for r in got) == total(committed, "BilledCost")
    assert sum(Decimal(r["effective"]) for r in got) == total(committed, "EffectiveCost")
    statuses = Counter(r["commitment_status"] for r in got)
    assert statuses == Counter(
        None if null(r.get("CommitmentDiscountStatus")) else r["CommitmentDiscountStatus"] for r in committed
    )


def test_usage_scenario_3_is_75_percent_used(_isolated_db: str) -> None:
    import_files(
        [FIXTURES / "focus_spec_data/commitment_discount_scenarios/commitment_discount_usage_scenario_3.csv"],
        BillStore(),
        TYPES,
    )
    by = {c.commitment_status: c.effective for c in BillStore().charges()}
    assert by == {"Used": Decimal("0.75"), "Unused": Decimal("0.25")}


# -- formats --------------------------------------------------------------------------------------


def test_gzip_and_standard_input_read_the_same(tmp_path: Path, _isolated_db: str) -> None:
    packed = tmp_path / "sample.csv.gz"
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    [a] = import_files([packed], BillStore(), TYPES)
    r = CliRunner().invoke(app, ["bill", "import", "-", "-o", "json"], input=SAMPLE.read_bytes())
    assert r.exit_code == 0, r.stderr
    [b] = json.loads(r.stdout)["imports"]
    assert (a.rows, a.billed_usd, a.kept) == (b["rows"], Decimal(b["billed_usd"]), Counter(b["kept"]))
    assert b["replaced"] == 14  # the second import of the same billing periods replaced the first's charges
    assert len(stored(_isolated_db)) == 14


def test_parquet_with_typed_columns(tmp_path: Path, _isolated_db: str) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from gpuprov.billing import focus

    spec = focus.columns("1.0")
    every = rows_of(SAMPLE)
    arrays = {}
    for name in every[0]:
        values = [None if null(r[name]) else r[name] for r in every]
        kind = spec[name].data_type if name in spec else "String"
        if kind == "Decimal":  # AWS writes its cost columns as doubles
            arrays[name] = pa.array([None if v is None else float(v) for v in values], pa.float64())
        elif kind == "Date/Time":
            from datetime import datetime

            arrays[name] = pa.array(
                [None if v is None else datetime.fromisoformat(v) for v in values], pa.timestamp("ms")
            )
        else:
            arrays[name] = pa.array(values, pa.string())
    path = tmp_path / "sample.parquet"
    pq.write_table(pa.table(arrays), path, row_group_size=300)
    [s] = import_files([path], BillStore(), TYPES)
    assert (s.format, s.rows, s.kept) == ("parquet", 1000, Counter(instance=10, commitment=4))
    assert cents(s.billed_usd) == cents(total(every, "BilledCost"))
    assert cents(s.effective_usd) == cents(total(every, "EffectiveCost"))
    gpu = rows_of(GPU_ROWS)
    inst = [c for c in BillStore().charges() if c.kind == "instance"]
    assert sum((c.billed for c in inst), Decimal(0)) == total(gpu, "BilledCost")  # shortest repr: exact here


# -- bad input: one line, exit 2, nothing stored -------------------------------------------------


def csv_text(rows: list[list[str]]) -> str:
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def header_and(row: dict[str, str], **changes: str) -> str:
    row = {**row, **changes}
    return csv_text([list(row), list(row.values())])


GOOD = {
    "BilledCost": "1.5",
    "EffectiveCost": "1.5",
    "ListCost": "1.5",
    "ChargeCategory": "Usage",
    "ChargePeriodStart": "2026-06-01T00:00:00Z",
    "ChargePeriodEnd": "2026-06-01T01:00:00Z",
    "BillingPeriodStart": "2026-06-01T00:00:00Z",
    "BillingPeriodEnd": "2026-07-01T00:00:00Z",
    "ProviderName": "AWS",
    "BillingCurrency": "USD",
    "Tags": "{}",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cloud,region,instance_type,price\naws,us-east-1,p5.48xlarge,98.32\n", "not a FOCUS export"),
        ("AmortizedCost,BilledCost,ChargeType,ChargePeriodStart,ChargePeriodEnd\n1,1,Usage,x,y\n", "FOCUS 0.5"),
        (header_and({**GOOD, "ServiceProviderName": "AWS"}), "FOCUS 1.3 or later"),
        (header_and(GOOD, BilledCost="1,5"), "row 1 (line 2): BilledCost: not a decimal"),
        (header_and(GOOD, EffectiveCost="NaN"), "EffectiveCost: not a finite decimal"),
        (header_and(GOOD, BilledCost="NULL"), "BilledCost: null, and FOCUS allows no null here"),
        (header_and(GOOD, ChargePeriodStart="2026-13-01T00:00:00Z"), "ChargePeriodStart: not an ISO 8601"),
        (header_and(GOOD, ChargePeriodEnd="2026-05-01T00:00:00Z"), "ChargePeriodEnd: before ChargePeriodStart"),
        (header_and(GOOD, ChargePeriodStart="1969-01-01T00:00:00Z"), "outside 2000-2100"),
        (header_and(GOOD, ChargeCategory="Refund"), "ChargeCategory: not one of Usage, Purchase"),
        (header_and(GOOD, Tags="[1, 2]"), "Tags: not a JSON object"),
        (header_and(GOOD, Tags="{oops"), "Tags: not JSON"),
        (header_and(GOOD, BillingCurrency="EUR"), "BillingCurrency: 'EUR': gpuprov reads bills in USD"),
        (header_and(GOOD, BilledCost="1e40"), "BilledCost: out of range"),
        ("BilledCost,EffectiveCost,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,BilledCost\n", "appears twice"),
        ("", "empty file"),
        (header_and(GOOD).rstrip("\n") + ",extra\n", "has 12 fields, the header 11"),
    ],
)
def test_bad_files_are_one_line_and_store_nothing(tmp_path: Path, text: str, expected: str, _isolated_db: str) -> None:
    import_files([SAMPLE], BillStore(), TYPES)  # what is stored already must survive
    before = stored(_isolated_db)
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    code, out, err = cli("bill", "import", str(path))
    assert code == 2, (out, err)
    assert err.startswith("error: ") and expected in err.splitlines()[0], err
    assert "Traceback" not in err
    assert stored(_isolated_db) == before and len(BillStore().imports()) == 1


def test_a_bad_second_file_stores_neither(tmp_path: Path, _isolated_db: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(header_and(GOOD, ChargePeriodEnd="soon"), encoding="utf-8")
    code, _out, err = cli("bill", "import", str(SAMPLE), str(bad))
    assert code == 2 and "ChargePeriodEnd" in err
    assert BillStore().imports() == [] and stored(_isolated_db) == []


def test_not_utf8_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(header_and(GOOD, ProviderName="Ünknown").encode("latin-1"))
    code, _out, err = cli("bill", "import", str(path))
    assert code == 2 and "not UTF-8" in err
    code, _out, err = cli("bill", "import", str(tmp_path / "nope.csv"))
    assert code == 2 and "cannot read" in err
    code, _out, err = cli("bill", "import", str(SAMPLE), "--format", "cur")
    assert code == 2 and "unknown bill format" in err


# -- gpuprov's tags -------------------------------------------------------------------------------


def test_gpuprov_tags_are_read_as_data(tmp_path: Path, _isolated_db: str) -> None:
    rows = [
        {"gpuprov-owner": "team-a", "gpuprov-plan": "abc123", "gpuprov-workload": "training", "gpuprov-market": "spot"},
        {"user:gpuprov-owner": "team-a", "user:gpuprov-market": "on_demand"},  # a provider's prefix
        {"gpuprov-owner": "Team A; rm -rf /", "gpuprov-market": "free"},
    ]
    lines = [[*GOOD, "ResourceId", "ServiceCategory", "ChargeDescription"]]
    for i, tags in enumerate(rows):
        values = {**GOOD, "Tags": json.dumps(tags)}
        lines.append([*values.values(), f"i-{i}", "Compute", "$32.77 per On Demand Linux p4d.24xlarge Instance Hour"])
    path = tmp_path / "tagged.csv"
    path.write_text(csv_text(lines), encoding="utf-8")
    [s] = import_files([path], BillStore(), TYPES)
    assert s.kept == Counter(instance=3)
    a, b, c = BillStore().charges()
    assert (a.owner, a.plan_id, a.workload, a.market, a.instance_type) == (
        "team-a",
        "abc123",
        "training",
        "spot",
        "p4d.24xlarge",
    )
    assert (b.owner, b.market, b.tag_problem) == ("team-a", "on_demand", None)
    assert c.owner is None and c.market is None
    assert c.tag_problem == "unreadable gpuprov tags: gpuprov-owner, gpuprov-market"


# -- the store ------------------------------------------------------------------------------------


def test_a_version_6_database_gets_the_bill_tables(_isolated_db: str) -> None:
    from gpuprov.store import database as database_mod

    BillStore(_isolated_db).imports()
    path = _isolated_db.removeprefix("sqlite:///")
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE gpuprov_bill_charge")
        con.execute("DROP TABLE gpuprov_bill_import")
        con.execute("UPDATE gpuprov_meta SET value = '6' WHERE key = 'schema_version'")
    import_files([SAMPLE], BillStore(_isolated_db), TYPES)
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM gpuprov_meta WHERE key='schema_version'").fetchone() == (
            database_mod.SCHEMA_VERSION,
        )
    assert len(stored(_isolated_db)) == 14


def test_postgres_and_sqlite_store_the_same(db_url: str) -> None:
    import_files([SAMPLE], BillStore(db_url), TYPES)
    got = BillStore(db_url).charges()
    assert len(got) == 14 and sum((c.billed for c in got), Decimal(0)) == Decimal("12.12648332400")
    [imp] = BillStore(db_url).imports()
    assert (imp.rows_read, imp.rows_stored, imp.charges_now) == (1000, 14, 14)


def test_reading_a_bill_leaves_the_csv_field_limit_as_it_was(_isolated_db: str) -> None:
    """The csv module's field limit is process-wide: a bill raises it while read, then puts it back
    (other readers, e.g. commitments import, refuse a field over the default 128 KiB)."""
    import csv

    before = csv.field_size_limit()
    import_files([SAMPLE], BillStore(_isolated_db), TYPES)
    assert csv.field_size_limit() == before
