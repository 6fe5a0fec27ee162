"""The catalog store: schema on first use, snapshots swap atomically, both read paths agree."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gpuprov.errors import StoreError
from gpuprov.models import Cloud, Market, Offer
from gpuprov.store import database as database_mod
from gpuprov.store import tables
from gpuprov.store.catalog import Catalog

T0 = datetime(2026, 5, 20, tzinfo=UTC)


def offer(price: str, zone: str = "use1-az1", market: Market = Market.ON_DEMAND, cloud: Cloud = Cloud.AWS) -> Offer:
    return Offer(
        cloud=cloud,
        region="us-east-1",
        zone=zone,
        instance_type="p4d.24xlarge",
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=Decimal("1152"),
        market=market,
        hourly_usd=Decimal(price),
    )


def test_schema_versions_agree() -> None:
    assert tables.SCHEMA_VERSION == int(database_mod.SCHEMA_VERSION)  # one version, read by the tables


def test_prices_round_trip_exactly(db_url: str) -> None:
    cat = Catalog(db_url)
    prices = ["32.7726", "0.000001", "12345.678901234", "2.4655"]
    cat.add_snapshot("test", Cloud.AWS, T0, [offer(p, zone=f"z{i}") for i, p in enumerate(prices)])
    got = sorted(str(o.hourly_usd) for o in cat.offers(["A100-40GB"]))
    assert got == sorted(prices)


def test_new_snapshot_becomes_current_and_old_one_stays(db_url: str) -> None:
    cat = Catalog(db_url)
    first = cat.add_snapshot("one", Cloud.AWS, T0, [offer("30")])
    cat.add_snapshot("gcp", Cloud.GCP, T0, [offer("5", cloud=Cloud.GCP)])
    second = cat.add_snapshot("two", Cloud.AWS, T0, [offer("20"), offer("9", market=Market.SPOT)])
    snaps = {s.id: s for s in cat.snapshots()}
    assert not snaps[first.id].current and snaps[second.id].current
    assert [s.source for s in cat.snapshots(current_only=True)] == ["gcp", "two"]
    assert sorted(o.hourly_usd for o in cat.offers(["A100-40GB"], clouds=[Cloud.AWS])) == [Decimal(9), Decimal(20)]
    assert [o.market for o in cat.offers(["A100-40GB"], markets=[Market.SPOT])] == [Market.SPOT]
    assert snaps[first.id].fetched_at == T0


def test_a_failed_write_leaves_the_current_snapshot_alone(db_url: str) -> None:
    cat = Catalog(db_url)
    cat.add_snapshot("good", Cloud.AWS, T0, [offer("30")])
    bad = offer("31")
    object.__setattr__(bad, "gpus_per_instance", None)  # NOT NULL column: the insert fails mid-way
    with pytest.raises(StoreError):
        cat.add_snapshot("bad", Cloud.AWS, T0, [offer("1"), bad])
    assert [s.source for s in cat.snapshots()] == ["good"]
    assert [o.hourly_usd for o in cat.offers(["A100-40GB"])] == [Decimal(30)]


def test_plans_and_state_on_every_database(db_url: str) -> None:
    from gpuprov.store.plans import PlanStore
    from gpuprov.store.state import FleetStore, PassRecord, StateStore
    from tests.plans import planned

    plans = PlanStore(db_url)
    doc = replace(planned("day_night"), plan_id="abc123")
    plans.save(doc)
    plans.save(doc)
    assert plans.get("abc") == doc and [p.id for p in plans.list()] == ["abc123"]
    assert plans.list()[0].hourly_usd == str(doc.costs.hourly_usd.quantize(Decimal("0.0001")))
    state = StateStore(db_url)
    entry = state.begin("fleet", "abc123", "launch", "tok", ["aws", "r", "z", "t", "spot", "w"], T0)
    assert [e.state for e in state.journal("fleet", pending_only=True)] == ["pending"]
    assert state.settle("fleet", set(), T0) == 1 and state.journal("fleet")[0].error
    assert entry == state.journal("fleet")[0].id
    state.mark_unavailable(("aws", "z", "t", "spot"), T0 + timedelta(minutes=3), "no capacity")
    assert state.unavailable(T0) == {("aws", "z", "t", "spot"): "no capacity"}
    assert state.unavailable(T0 + timedelta(minutes=4)) == {}
    fleets = FleetStore(db_url)
    fleets.adopt("fleet", "abc123", T0)
    assert fleets.active_plan("fleet") == ("abc123", T0)
    fleets.record(PassRecord("fleet", T0, T0, "me", 3, (1, 2), "keep", "cheap enough"))
    assert [(p.decision, p.snapshots) for p in fleets.history("fleet")] == [("keep", (1, 2))]
    money = PassRecord(
        "fleet",
        T0,
        T0,
        "me",
        4,
        (),
        "adopt",
        "saves",
        "a",
        "b",
        2,
        1,
        Decimal("12.3456"),
        Decimal("0.0001"),
        Decimal("98765.43"),
    )
    fleets.record(money)
    newest = fleets.history("fleet")[0]
    assert newest == money  # read back by column name, money exact
    assert isinstance(newest.expected_saving_usd, Decimal)


def test_sqlite_fast_reader_and_sqlalchemy_reader_agree(_isolated_db: str) -> None:
    cat = Catalog(_isolated_db)
    cat.add_snapshot("a", Cloud.AWS, T0, [offer("30"), offer("9", market=Market.SPOT), offer("20", zone="z2")])
    fast = cat.offers(["A100-40GB"], markets=[Market.ON_DEMAND])
    slow = Catalog(_isolated_db)
    slow._path = None  # force the SQLAlchemy path, as for PostgreSQL
    assert sorted(slow.offers(["A100-40GB"], markets=[Market.ON_DEMAND]), key=str) == sorted(fast, key=str)
    assert slow.snapshots() == cat.snapshots()


def test_other_schema_version_is_refused(_isolated_db: str, tmp_path: Path) -> None:
    Catalog(_isolated_db).snapshots()
    path = _isolated_db.removeprefix("sqlite:///")
    with sqlite3.connect(path) as con:
        con.execute("UPDATE gpuprov_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 99"):
        Catalog(_isolated_db).snapshots()


def test_journal_pools_read_back_typed_from_the_stored_json(_isolated_db: str) -> None:
    from gpuprov.models import WorkloadPool
    from gpuprov.store.state import StateStore

    state = StateStore(_isolated_db)
    pool = WorkloadPool("aws", "us-east-1", "", "p5.48xlarge", "spot", "training")
    state.begin("fleet", "abc123", "launch", "tok", pool, T0)
    state.begin("fleet", "abc123", "launch", "tok2", ["gcp", "r", "z", "t", "on_demand", "w"], T0)
    path = _isolated_db.removeprefix("sqlite:///")
    with sqlite3.connect(path) as con:  # the text every version wrote: a JSON array of six strings
        stored = [p for (p,) in con.execute("SELECT pool FROM gpuprov_journal ORDER BY id")]
    assert stored[0] == '["aws", "us-east-1", "", "p5.48xlarge", "spot", "training"]'
    first, second = state.journal("fleet")
    assert type(first.pool) is WorkloadPool and first.pool == pool and first.pool.location == "us-east-1"
    assert second.pool == WorkloadPool("gcp", "r", "z", "t", "on_demand", "w")
    with sqlite3.connect(path) as con:
        con.execute("""UPDATE gpuprov_journal SET pool = '["aws", "r"]' WHERE token = 'tok2'""")
    with pytest.raises(StoreError, match=r"journal row \d+ is corrupt: its pool"):
        state.journal("fleet")


def test_naive_times_are_refused(_isolated_db: str) -> None:
    with pytest.raises(ValueError):
        Catalog(_isolated_db).add_snapshot("x", Cloud.AWS, datetime(2026, 1, 1), [])


def test_bad_url_is_a_store_error() -> None:
    with pytest.raises(StoreError):
        Catalog("nosuchdb://x/y").snapshots()


def test_a_version_1_database_is_upgraded_in_place(_isolated_db: str) -> None:
    cat = Catalog(_isolated_db)
    cat.add_snapshot("keep", Cloud.AWS, T0, [offer("30")])
    path = _isolated_db.removeprefix("sqlite:///")
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE gpuprov_plan")
        con.execute("UPDATE gpuprov_meta SET value = '1' WHERE key = 'schema_version'")
    again = Catalog(_isolated_db)
    assert [o.hourly_usd for o in again.offers(["A100-40GB"])] == [Decimal(30)]
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM gpuprov_meta WHERE key='schema_version'").fetchone() == (
            database_mod.SCHEMA_VERSION,
        )
        assert con.execute("SELECT count(*) FROM gpuprov_plan").fetchone() == (0,)


def test_a_version_5_catalog_gains_the_offer_columns_and_keeps_its_rows(_isolated_db: str) -> None:
    """Schema 6 added gpu_fraction and as_of to gpuprov_offer: a schema-5 file (the table without
    them) is upgraded with ALTER TABLE; its rows read back undated and whole, new rows keep both."""
    from datetime import UTC, datetime

    path = _isolated_db.removeprefix("sqlite:///")
    Catalog(_isolated_db).add_snapshot("old", Cloud.AWS, T0, [offer("30")])
    with sqlite3.connect(path) as con:  # what a schema-5 catalog looks like
        con.execute("ALTER TABLE gpuprov_offer DROP COLUMN gpu_fraction")
        con.execute("ALTER TABLE gpuprov_offer DROP COLUMN as_of")
        con.execute("UPDATE gpuprov_meta SET value = '5' WHERE key = 'schema_version'")
    again = Catalog(_isolated_db)
    (old,) = again.offers(["A100-40GB"])
    assert (old.hourly_usd, old.as_of, old.gpu_fraction) == (Decimal(30), None, None)
    when = datetime(2026, 1, 21, tzinfo=UTC)
    from dataclasses import replace

    again.add_snapshot("new", Cloud.AWS, T0, [replace(offer("31"), as_of=when)])
    (new,) = Catalog(_isolated_db).offers(["A100-40GB"])
    assert (new.hourly_usd, new.as_of) == (Decimal(31), when)
    with sqlite3.connect(path) as con:
        cols = {r[1] for r in con.execute("PRAGMA table_info(gpuprov_offer)")}
        assert {"gpu_fraction", "as_of"} <= cols
        assert con.execute("SELECT value FROM gpuprov_meta WHERE key='schema_version'").fetchone() == (
            database_mod.SCHEMA_VERSION,
        )
        assert {"gpuprov_bill_import", "gpuprov_bill_charge"} <= {  # schema 7's tables came with it
            r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
