"""The journal's group commit: writes from many threads share commits, and each returns only
once it is stored (read back from another connection right after it returns)."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import event

from gpuprov.errors import StoreError
from gpuprov.store.state import StateStore

WHEN = datetime(2026, 6, 1, 12, tzinfo=UTC)
POOL = ("aws", "us-east-1", "use1-az1", "g5.xlarge", "spot", "inference")


def _stored(path: Path, entry: int) -> tuple[str, str | None] | None:
    con = sqlite3.connect(path)
    try:
        row = con.execute("SELECT state, instance_id FROM gpuprov_journal WHERE id = ?", (entry,)).fetchone()
    finally:
        con.close()
    return None if row is None else (row[0], row[1])


def test_concurrent_writes_share_commits_and_each_is_stored_when_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    store = StateStore(f"sqlite:///{path}")
    store.ensure_schema()
    commits = [0]
    event.listen(store.engine(), "commit", lambda _con: commits.__setitem__(0, commits[0] + 1))
    missing: list[str] = []
    barrier = threading.Barrier(16)

    def worker(k: int) -> None:
        barrier.wait()
        for n in range(25):
            entry = store.begin("o", "p", "launch", f"t-{k}-{n}", POOL, WHEN)
            if _stored(path, entry) != ("pending", None):
                missing.append(f"begin {k}/{n}")
            store.finish(entry, WHEN, instance_id=f"i-{k}-{n}")
            if _stored(path, entry) != ("done", f"i-{k}-{n}"):
                missing.append(f"finish {k}/{n}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert missing == []
    rows = store.journal("o")
    assert len(rows) == 16 * 25 and {r.state for r in rows} == {"done"}
    assert len({r.id for r in rows}) == 16 * 25
    assert commits[0] < 2 * 16 * 25, "every write committed alone"


def test_a_batch_is_journalled_and_closed_in_one_commit_each(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'j.db'}")
    store.ensure_schema()
    commits = [0]
    event.listen(store.engine(), "commit", lambda _con: commits.__setitem__(0, commits[0] + 1))
    ids = store.begin_many([("o", "p", "terminate", f"t{n}", POOL, WHEN, f"i-{n}") for n in range(200)])
    assert commits[0] == 1 and ids == sorted(ids) and len(set(ids)) == 200
    store.finish_many([(e, WHEN, None, "boom" if e == ids[3] else None) for e in ids])
    assert commits[0] == 2
    by_id = {r.id: r for r in store.journal("o")}
    assert by_id[ids[3]].state == "failed" and by_id[ids[3]].error == "boom"
    assert by_id[ids[4]].state == "done" and by_id[ids[4]].instance_id == "i-4"  # kept when none given


def test_a_failed_commit_fails_every_writer_in_it(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    store = StateStore(f"sqlite:///{path}")
    store.ensure_schema()
    con = sqlite3.connect(path)
    con.execute("DROP TABLE gpuprov_journal")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="could not journal a launch before the call"):
        store.begin("o", "p", "launch", "t", POOL, WHEN)
    with pytest.raises(StoreError, match="could not close journal row 7"):
        store.finish(7, WHEN)
