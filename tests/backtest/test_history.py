"""Price history: reading the two real formats, storing them, refusing bad files whole, and the
catalog as of a time."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.models import Cloud, Market, Offer
from gpuprov.store import database as database_mod
from gpuprov.store.catalog import Catalog
from gpuprov.store.history import HistoryStore
from pricing import history
from tests.conftest import ROOT

runner = CliRunner()
FIXTURES = ROOT / "tests" / "fixtures" / "history"
ANYCLOUD = FIXTURES / "anycloud-gcp-azure-gpu-price-history.csv"
P5 = FIXTURES / "aws-p5-48xlarge-us-east-1-daily-price.csv"
HEADER = "cloud,commit,commit_date,key_a,key_b,key_c,price,spot_price,prev_price,prev_spot_price,change\n"


def cli(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_the_real_anycloud_file_is_read_row_for_row() -> None:
    rows = list(csv.DictReader(io.StringIO(ANYCLOUD.read_text())))
    parsed = history.read_anycloud(ANYCLOUD.read_bytes(), "any")
    assert parsed.rows == len(rows) == 8289
    # every row gives one change per market that has a price, or that lost one, or two when removed
    expected = 0
    for r in rows:
        if r["change"] == "removed":
            expected += 2
            continue
        for now, prev in ((r["price"], r["prev_price"]), (r["spot_price"], r["prev_spot_price"])):
            expected += bool(now) or (r["change"] == "changed" and bool(prev))
    assert len(parsed.changes) == expected
    first = parsed.changes[0]
    assert (first.cloud, first.kind, first.key, first.market, first.price) == (
        Cloud.GCP,
        history.GCP_ACCELERATOR,
        ("A100", "1", "asia-northeast1-a"),
        Market.ON_DEMAND,
        Decimal("1.70586"),
    )
    assert first.at == datetime(2026, 4, 2, 15, 55, 58, tzinfo=UTC)  # -05:00 read as UTC
    removed = [c for c in parsed.changes if c.event == "removed"]
    assert all(c.price is None for c in removed) and len(removed) >= 2 * sum(r["change"] == "removed" for r in rows)


def test_the_p5_file_keeps_the_cut_and_counts_what_it_skips() -> None:
    lines = list(csv.DictReader(io.StringIO(P5.read_text())))
    empty = sum(1 for r in lines if not r["price_usd"].strip())
    parsed = history.read_daily_price(P5.read_bytes(), "p5", Cloud.AWS, "us-east-1", "p5.48xlarge")
    assert empty == 13 and parsed.skipped["no price"] == empty
    prices = [(c.at.date().isoformat(), c.price) for c in parsed.changes]
    assert prices[:2] == [("2025-04-23", Decimal("98.32")), ("2025-06-05", Decimal("55.04"))]
    assert prices[-1] == ("2026-08-22", Decimal("55.04"))  # the file's end, kept to mark coverage
    assert parsed.rows == len(lines)
    assert parsed.rows - empty - parsed.skipped[history.SAME] == len(parsed.changes)


def test_import_stores_once_and_list_shows_coverage() -> None:
    code, out, err = cli("pricing", "history", "import", str(ANYCLOUD), "--format", "anycloud", "--output", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["stored"] == doc["changes"] > 16_000 and doc["already_stored"] == 0
    assert doc["matched_changes"] + doc["unmatched_changes"] == doc["changes"] and doc["unmatched_changes"] > 0
    code, out, _ = cli("pricing", "history", "import", str(ANYCLOUD), "--format", "anycloud", "--output", "json")
    assert json.loads(out)["stored"] == 0  # the same file again adds nothing
    code, out, err = cli(
        "pricing", "history", "import", str(P5), "--format", "daily-price", "--cloud", "aws", "--region", "us-east-1"
    )
    assert code == 0, err
    assert "13 no price" in out
    code, out, _ = cli("pricing", "history", "list", "--output", "json")
    cover = {(c["cloud"], c["source"].split(":")[0]): c for c in json.loads(out)["coverage"]}
    assert set(cover) == {("aws", "daily-price"), ("gcp", "anycloud"), ("azure", "anycloud")}
    assert cover["aws", "daily-price"]["changes"] == 3
    assert cover["aws", "daily-price"]["last"].startswith("2026-08-22")
    assert len(HistoryStore().changes()) == doc["changes"] + 3


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "h.csv"
    p.write_text(text)
    return str(p)


GOOD = "gcp,c1,2026-04-02T10:00:00+00:00,T4,1,us-central1-a,0.35,0.15,,,new\n"


@pytest.mark.parametrize(
    ("text", "args", "says"),
    [
        (HEADER.replace("change", "change,extra") + GOOD, [], "column 12 of the header is not one of"),
        (HEADER.replace("price,", "cost,", 1) + GOOD, [], "column 7 of the header is not one of"),
        (HEADER + GOOD + GOOD.replace("04-02T10", "04-01T10"), [], "earlier than line 2"),
        (HEADER + GOOD + GOOD.replace("0.35", "-0.35"), [], "negative"),
        (HEADER + GOOD.replace("0.15", "nan"), [], "not a number"),
        (HEADER + GOOD.replace("us-central1-a", "us central"), [], "not an identifier"),
        (HEADER + GOOD.replace("us-central1-a", "us-central1/../a"), [], "not an identifier"),
        (HEADER + GOOD.replace("2026-04-02T10:00:00+00:00", "9999-12-31T23:59:59-05:00"), [], "outside 2000-2100"),
        (HEADER + GOOD.replace("2026-04-02T10:00:00+00:00", "1969-12-31T23:59:59+00:00"), [], "outside 2000-2100"),
        (HEADER + GOOD.replace("2026-04-02T10:00:00+00:00", "0001-01-01T00:00:00+01:00"), [], "outside 2000-2100"),
        (HEADER + GOOD.replace("0.35", "0.00001"), [], "is not a price"),
        (HEADER + GOOD.replace("0.15", "10000.01"), [], "is not a price"),
        (HEADER + GOOD, ["--from", "2026-04-03"], "outside --from/--to"),
        (HEADER + GOOD, ["--to", "2026-04-01"], "outside --from/--to"),
        (HEADER + GOOD.replace("0.35", "1e-999999999"), [], "price is not a number"),  # the bounded parser
        (HEADER, [], "no price change"),
        ("", [], "empty"),
    ],
)
def test_a_bad_history_file_is_one_line_exit_2_and_stores_nothing(
    tmp_path: Path, text: str, args: list[str], says: str
) -> None:
    code, out, err = cli("pricing", "history", "import", _write(tmp_path, text), "--format", "anycloud", *args)
    assert code == 2 and says in err and "nothing was stored" in err, (code, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err + out
    assert HistoryStore().changes() == []


DAILY = "timestamp,instance,price_usd\n2026-04-02T00:00:00,p5.48xlarge,55.04\n"
DAILY_ARGS = ["--format", "daily-price", "--cloud", "aws", "--region", "us-east-1"]


@pytest.mark.parametrize(
    ("text", "args", "says"),
    [
        (DAILY.replace("2026-04-02T00:00:00", "9999-12-31T23:59:59-05:00"), DAILY_ARGS, "outside 2000-2100"),
        (DAILY.replace("2026-04-02T00:00:00", "1999-12-31T23:59:59"), DAILY_ARGS, "outside 2000-2100"),
        (DAILY.replace("55.04", "1e-9999999"), DAILY_ARGS, "price_usd is not a number"),
        (DAILY, [*DAILY_ARGS[:-1], "../x"], "--region '../x' is not an identifier"),
        (DAILY, [*DAILY_ARGS, "--instance-type", "p5..x"], "--instance-type 'p5..x' is not an identifier"),
        (DAILY, [*DAILY_ARGS, "--from", "9999-01-01"], "--from: '9999-01-01' is outside 2000-2100"),
        (DAILY, [*DAILY_ARGS, "--to", "9999-12-31T23:59:59-05:00"], "--to: '9999-12-31T23:59:59-05:00' is outside"),
        (DAILY, [*DAILY_ARGS, "--to", "0001-01-01T00:00:00+01:00"], "--to: '0001-01-01T00:00:00+01:00' is outside"),
    ],
)
def test_a_bad_daily_price_file_or_flag_is_one_line_exit_2(
    tmp_path: Path, text: str, args: list[str], says: str
) -> None:
    code, out, err = cli("pricing", "history", "import", _write(tmp_path, text), *args)
    assert code == 2 and says in err, (code, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err + out
    assert HistoryStore().changes() == []


def test_the_bounds_are_the_pricing_import_bounds(tmp_path: Path) -> None:
    from pricing import validate

    assert history.MAX_PRICE is validate.MAX_PRICE and history.MIN_PRICE is validate.MIN_PRICE
    edge = DAILY.replace("55.04", str(validate.MIN_PRICE)) + "2026-04-03T00:00:00,p5.48xlarge,10000\n"
    code, _out, err = cli("pricing", "history", "import", _write(tmp_path, edge), *DAILY_ARGS)
    assert code == 0, err


def test_a_bad_row_late_in_a_good_file_stores_none_of_it(tmp_path: Path) -> None:
    text = ANYCLOUD.read_text().rstrip("\n") + "\nazure,x,2026-05-20T00:00:00+00:00,Standard_X,T4,eastus,-1,,,,new\n"
    code, _out, err = cli("pricing", "history", "import", _write(tmp_path, text), "--format", "anycloud")
    assert code == 2 and "line 8291" in err and "negative" in err
    assert HistoryStore().changes() == []


def test_a_file_pricing_a_stored_time_and_key_differently_is_refused_whole(tmp_path: Path) -> None:
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    one.write_text(HEADER + GOOD)
    later = GOOD.replace("04-02T10", "04-03T10")
    two.write_text(HEADER + GOOD.replace("0.15", "0.16") + later)  # another spot price at GOOD's time
    assert cli("pricing", "history", "import", str(one), "--format", "anycloud")[0] == 0
    code, out, err = cli("pricing", "history", "import", str(two), "--format", "anycloud")
    assert code == 2 and len(err.strip().splitlines()) == 2 and "Traceback" not in err + out, err
    assert "gcp T4/1/us-central1-a spot at 2026-04-02T10:00:00+00:00 is $0.16" in err
    assert "stored has $0.15" in err and "nothing was stored" in err
    assert len(HistoryStore().changes()) == 2  # the first file's two markets only
    # the same price again is no conflict: stored once
    two.write_text(HEADER + GOOD + later)
    code, out, err = cli("pricing", "history", "import", str(two), "--format", "anycloud", "-o", "json")
    assert code == 0 and json.loads(out)["already_stored"] == 2, err


def test_a_file_pricing_one_time_and_key_twice_is_refused(tmp_path: Path) -> None:
    code, _out, err = cli(
        "pricing",
        "history",
        "import",
        _write(tmp_path, HEADER + GOOD + GOOD.replace("0.35", "0.36")),
        "--format",
        "anycloud",
    )
    assert code == 2 and "is $0.36, but this file (anycloud:h.csv) has $0.35" in err, err
    assert HistoryStore().changes() == []


def test_remove_takes_out_one_import(tmp_path: Path) -> None:
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    one.write_text(HEADER + GOOD)
    two.write_text(HEADER + GOOD.replace("04-02T10", "04-03T10").replace("0.15", "0.17"))
    for f in (one, two):
        assert cli("pricing", "history", "import", str(f), "--format", "anycloud")[0] == 0
    code, out, err = cli("pricing", "history", "remove", "--source", "two.csv", "-o", "json")
    assert code == 0 and json.loads(out) == {"source": "anycloud:two.csv", "removed": 2}, err
    assert {r[7] for r in HistoryStore().changes()} == {Decimal("0.35"), Decimal("0.15")}
    code, out, err = cli("pricing", "history", "remove", "--source", "anycloud:two.csv")
    assert code == 2 and "nothing was removed" in err and "anycloud:one.csv" in err and "Traceback" not in err
    assert len(HistoryStore().changes()) == 2
    assert cli("pricing", "history", "remove", "--source", "anycloud:one.csv")[0] == 0
    assert HistoryStore().changes() == []


def test_the_store_knows_the_kinds_the_reader_writes() -> None:
    from gpuprov.store import history as store_history

    assert set(store_history.KINDS) == {history.GCP_ACCELERATOR, history.INSTANCE}


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("price", "abc", "price 'abc' is not a price"),
        ("price", "NaN", "price 'NaN' is not a price"),
        ("price", "-1", "price '-1' is not a price"),
        ("at", "yesterday", "time 'yesterday' is not a time"),
        ("at", "9999-12-31T23:59:59-05:00", "is not a time"),
        ("cloud", "ibm", "cloud/market 'ibm'/'spot'"),
        ("market", "reserved_1y", "cloud/market 'gcp'/'reserved_1y'"),
        ("event", "boom", "kind, key or event"),
    ],
)
def test_a_corrupt_stored_row_is_one_store_error_line(
    tmp_path: Path, _isolated_db: str, column: str, value: str, says: str
) -> None:
    assert cli("pricing", "history", "import", _write(tmp_path, HEADER + GOOD), "--format", "anycloud")[0] == 0
    with sqlite3.connect(_isolated_db.removeprefix("sqlite:///")) as con:
        rid = con.execute("SELECT max(id) FROM gpuprov_price_change WHERE market = 'spot'").fetchone()[0]
        con.execute(f"UPDATE gpuprov_price_change SET {column} = ? WHERE id = ?", (value, rid))
    commands = [["pricing", "history", "list"]]
    if column != "cloud":  # a backtest of gcp reads gcp rows only
        commands.append(
            [
                "backtest",
                "--gpus",
                "1",
                "--type",
                "t4",
                "--clouds",
                "gcp",
                "--from",
                "2026-04-02",
                "--to",
                "2026-04-03T00:00",
            ]
        )
    for args in commands:
        code, out, err = cli(*args)
        assert code == 5 and "Traceback" not in out + err, (args, code, err)
        first = err.strip().splitlines()[0]
        assert first.startswith("error:") and ("corrupt" in first or "not one" in first), (args, err)
        if column != "at":  # a bad time can show first in the coverage, which names the source
            assert f"row {rid} is corrupt" in first and says in first, (args, err)


@pytest.mark.parametrize(
    ("junk", "says"),
    [
        ((b"x" * 100 + b"\n") * 80_000, "line 2: 1 fields, expected 11"),  # 8 MB of short junk lines
        (b"y" * 8_000_000, "line 2: a line is over 65,536 characters"),  # one 8 MB line
        (GOOD.encode() + b"gcp,\xff\n" + b"z" * 8_000_000, "not UTF-8"),
    ],
)
def test_a_junk_file_is_refused_at_its_first_bad_line_without_reading_it_whole(
    tmp_path: Path, junk: bytes, says: str
) -> None:
    import tracemalloc

    path = tmp_path / "junk.csv"
    path.write_bytes(HEADER.encode() + junk)
    tracemalloc.start()
    try:
        with path.open("rb") as fh, pytest.raises(history.HistoryFormatError, match=says):
            history.read_anycloud(fh, "junk.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak  # a line's worth, not the file's 8 MB
    code, out, err = cli("pricing", "history", "import", str(path), "--format", "anycloud")
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in out + err, err


def test_a_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    with path.open("wb") as fh:
        fh.write(HEADER.encode())
        fh.truncate(65 << 20)  # sparse: no 65 MiB written
    code, _out, err = cli("pricing", "history", "import", str(path), "--format", "anycloud")
    assert code == 2 and "larger than 64 MiB" in err, err


def test_daily_price_needs_cloud_and_region(tmp_path: Path) -> None:
    code, _out, err = cli("pricing", "history", "import", str(P5), "--format", "daily-price")
    assert code == 2 and "--cloud and --region" in err
    code, _out, err = cli("pricing", "history", "import", str(P5), "--format", "nope")
    assert code == 2 and "unknown format" in err


def test_a_version_4_database_gets_the_history_table(_isolated_db: str) -> None:
    Catalog(_isolated_db).snapshots()
    path = _isolated_db.removeprefix("sqlite:///")
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE gpuprov_price_change")
        con.execute("UPDATE gpuprov_meta SET value = '4' WHERE key = 'schema_version'")
    HistoryStore(_isolated_db).add(
        [(datetime(2026, 1, 1, tzinfo=UTC), "aws", "instance", "p5", "r", "", "on_demand", Decimal(1), "price")], "t"
    )
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM gpuprov_meta WHERE key='schema_version'").fetchone() == (
            database_mod.SCHEMA_VERSION,
        )
        assert con.execute("SELECT price FROM gpuprov_price_change").fetchall() == [("1",)]


# -- the catalog as of a time -------------------------------------------------------------------
T0 = datetime(2026, 4, 1, tzinfo=UTC)


def gcp(itype: str, gpu: str, n: int, zone: str, market: Market, price: str) -> Offer:
    return Offer(Cloud.GCP, zone[:-2], zone, itype, gpu, n, 16, 8, Decimal(30), market, Decimal(price))


def ch(
    hours: int, key: tuple[str, str, str], market: Market, price: str | None, event: str = "price"
) -> history.PriceChange:
    kind = history.GCP_ACCELERATOR
    return history.PriceChange(
        T0 + timedelta(hours=hours), Cloud.GCP, kind, key, market, None if price is None else Decimal(price), event
    )


def test_replay_moves_host_plus_gpu_offers_by_the_gpu_price_change() -> None:
    n1_small = gcp("n1-standard-4", "T4", 1, "us-central1-a", Market.ON_DEMAND, "0.54")  # host 0.19 + T4 0.35
    n1_big = gcp("n1-standard-8", "T4", 1, "us-central1-a", Market.ON_DEMAND, "0.73")  # host 0.38 + T4 0.35
    two = gcp("n1-standard-8", "T4", 2, "us-central1-a", Market.ON_DEMAND, "1.08")
    other_zone = gcp("n1-standard-4", "T4", 1, "us-central1-b", Market.ON_DEMAND, "0.54")
    spot = gcp("n1-standard-4", "T4", 1, "us-central1-a", Market.SPOT, "0.20")
    base = [n1_small, n1_big, two, other_zone, spot]
    key = ("T4", "1", "us-central1-a")
    changes = [
        ch(0, key, Market.ON_DEMAND, "0.30", "new"),
        ch(10, key, Market.ON_DEMAND, "0.35"),  # the value at the snapshot's time (hour 24)
        ch(48, key, Market.ON_DEMAND, "0.45"),
        ch(72, key, Market.SPOT, None, "removed"),
    ]
    replay = history.Replay(base, {Cloud.GCP: T0 + timedelta(hours=24)}, changes)

    def prices() -> dict[tuple[str, str, int, str], Decimal]:
        return {
            (o.instance_type, o.location, o.gpus_per_instance, o.market.value): o.hourly_usd for o in replay.offers()
        }

    replay.advance(T0 + timedelta(hours=1))
    assert prices()[("n1-standard-4", "us-central1-a", 1, "on_demand")] == Decimal("0.54") - Decimal("0.05")
    assert prices()[("n1-standard-8", "us-central1-a", 1, "on_demand")] == Decimal("0.73") - Decimal("0.05")
    assert prices()[("n1-standard-8", "us-central1-a", 2, "on_demand")] == Decimal("1.08")  # another key
    assert prices()[("n1-standard-4", "us-central1-b", 1, "on_demand")] == Decimal("0.54")  # another zone
    v = replay.version
    assert replay.advance(T0 + timedelta(hours=30))  # back to the snapshot's own prices
    assert prices()[("n1-standard-4", "us-central1-a", 1, "on_demand")] == Decimal("0.54")
    assert not replay.advance(T0 + timedelta(hours=40)) and replay.version == v + 1
    replay.advance(T0 + timedelta(hours=48))
    assert prices()[("n1-standard-8", "us-central1-a", 1, "on_demand")] == Decimal("0.73") + Decimal("0.10")
    assert ("n1-standard-4", "us-central1-a", 1, "spot") in prices()
    replay.advance(T0 + timedelta(hours=72))
    assert ("n1-standard-4", "us-central1-a", 1, "spot") not in prices()  # removed by the history
    with pytest.raises(ValueError):
        replay.advance(T0)


def test_an_offer_first_seen_later_is_absent_before() -> None:
    l4 = gcp("g2-standard-4", "L4", 1, "us-east4-a", Market.ON_DEMAND, "0.71")
    replay = history.Replay(
        [l4], {Cloud.GCP: T0 + timedelta(days=9)}, [ch(5, ("L4", "1", "us-east4-a"), Market.ON_DEMAND, "0.56", "new")]
    )
    replay.advance(T0)
    assert replay.offers() == []
    replay.advance(T0 + timedelta(hours=5))
    assert [o.hourly_usd for o in replay.offers()] == [Decimal("0.71")]


def test_gcp_accelerator_names_follow_the_machine_type() -> None:
    mega = gcp("a3-megagpu-8g", "H100", 8, "us-east4-a", Market.ON_DEMAND, "90")
    high = gcp("a3-highgpu-8g", "H100", 8, "us-east4-a", Market.ON_DEMAND, "88")
    a2 = gcp("a2-highgpu-1g", "A100-40GB", 1, "us-east4-a", Market.SPOT, "1.5")
    assert history.offer_match(mega) == ("gcp", history.GCP_ACCELERATOR, "H100-MEGA", "8", "us-east4-a")
    assert history.offer_match(high) == ("gcp", history.GCP_ACCELERATOR, "H100", "8", "us-east4-a")
    assert history.offer_match(a2) == ("gcp", history.GCP_ACCELERATOR, "A100", "1", "us-east4-a")
