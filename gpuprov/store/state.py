"""Provisioning state: the journal of cloud calls, the unavailable-pool cache, the fleet mirror.

The cloud is the source of truth; these tables let a run that was killed be reconciled
by the next one, and let ``status`` answer without calling the cloud.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuprov.errors import StoreError
from gpuprov.models import Cloud, InstanceHandle, JournalState, Market, Site, WorkloadPool
from gpuprov.store.database import Database, first_line, parse_time

if TYPE_CHECKING:
    from sqlmodel import Session


@dataclass(frozen=True)
class JournalEntry:
    id: int
    owner: str
    plan_id: str
    op: str
    token: str
    pool: WorkloadPool
    instance_id: str | None
    state: str
    error: str | None
    started_at: datetime


def _journal_pool(text: object, row_id: object) -> WorkloadPool:
    """A journal row's pool, stored as the JSON array of its six strings (every gpuprov version
    wrote it so: ``json.dumps(list(pool))``)."""
    try:
        value = json.loads(text) if isinstance(text, str | bytes) else None
    except ValueError:
        value = None
    if not (
        isinstance(value, list) and len(value) == len(WorkloadPool._fields) and all(isinstance(v, str) for v in value)
    ):
        raise StoreError(
            f"journal row {row_id} is corrupt: its pool is not a list of {len(WorkloadPool._fields)} strings"
        )
    return WorkloadPool(*value)


class StateStore(Database):
    def _session(self) -> Session:
        self.ensure_schema()
        from sqlmodel import Session

        return Session(self.engine())

    # -- journal -------------------------------------------------------------------
    # Every journal write is durable before it returns (a launch's row before the launch: a run
    # killed at any point leaves rows the next run settles). Writes that arrive while a commit is
    # under way are committed together in the next one (group commit): one SQLite commit costs
    # ~11 ms, and a pass migrating 2,500 instances makes 10,000 journal writes from up to 16
    # launch threads at once.
    def begin(
        self,
        owner: str,
        plan_id: str,
        op: str,
        token: str,
        pool: Sequence[str],
        when: datetime,
        instance_id: str | None = None,
    ) -> int:
        return self.begin_many([(owner, plan_id, op, token, pool, when, instance_id)])[0]

    def begin_many(self, rows: Sequence[tuple[str, str, str, str, Sequence[str], datetime, str | None]]) -> list[int]:
        """Journal several calls before they are made, in one commit; their ids in order."""
        from gpuprov.store.tables import JournalRow

        made = [
            JournalRow(
                owner=owner,
                plan_id=plan_id,
                op=op,
                token=token,
                pool=json.dumps(list(pool)),
                instance_id=instance_id,
                started_at=when,
            )
            for owner, plan_id, op, token, pool, when, instance_id in rows
        ]
        ops = rows[0][2] if rows else "call"
        self._group().write([("add", row) for row in made], f"could not journal a {ops} before the call")
        ids = []
        for row in made:
            if row.id is None:
                raise StoreError("the database returned no id for a journal row")
            ids.append(row.id)
        return ids

    def finish(self, entry_id: int, when: datetime, instance_id: str | None = None, error: str | None = None) -> None:
        self.finish_many([(entry_id, when, instance_id, error)])

    def finish_many(self, rows: Sequence[tuple[int, datetime, str | None, str | None]]) -> None:
        """Close several journal rows in one commit."""
        first = rows[0][0] if rows else 0
        self._group().write(
            [("close", row) for row in rows], f"could not close journal row {first} (the next run settles it)"
        )

    def _group(self) -> _GroupCommit:
        group: _GroupCommit | None = getattr(self, "_journal_group", None)
        if group is None:
            group = _GroupCommit(self)
            self._journal_group = group
        return group

    def journal(self, owner: str, pending_only: bool = False) -> list[JournalEntry]:
        self.ensure_schema()
        sql = (
            "SELECT id, owner, plan_id, op, token, pool, instance_id, state, error, started_at "
            "FROM gpuprov_journal WHERE owner = :owner"
        )
        if pending_only:
            sql += f" AND state = '{JournalState.PENDING.value}'"
        rows = self._records(sql + " ORDER BY id", {"owner": owner})
        return [
            JournalEntry(
                int(r["id"]),
                r["owner"],
                r["plan_id"],
                r["op"],
                r["token"],
                _journal_pool(r["pool"], r["id"]),
                r["instance_id"],
                r["state"],
                r["error"],
                parse_time(r["started_at"]),
            )
            for r in rows
        ]

    def settle(self, owner: str, live_tokens: set[str], when: datetime) -> int:
        """Close the pending rows a killed run left: a launch whose token is live is done,
        one whose token is not was never made (or did not survive); either way the next
        reconcile acts on what describe shows. Returns how many rows were settled."""
        pending = self.journal(owner, pending_only=True)
        for entry in pending:
            if entry.op == "launch":
                error = None if entry.token in live_tokens else "interrupted before the instance existed"
            else:
                error = None
            self.finish(entry.id, when, error=error)
        return len(pending)

    def clouds_used(self, owner: str) -> set[Cloud]:
        """Every cloud this fleet's journal has called: where its instances may still run."""
        self.ensure_schema()
        rows = self._rows("SELECT DISTINCT pool FROM gpuprov_journal WHERE owner = :owner", {"owner": owner})
        out: set[Cloud] = set()
        for (pool,) in rows:
            try:
                out.add(Cloud(json.loads(pool)[0]))
            except (ValueError, IndexError, TypeError):
                continue
        return out

    # -- unavailable pools -----------------------------------------------------------
    def mark_unavailable(self, pool: Site, until: datetime, reason: str) -> None:
        from gpuprov.store.tables import UnavailableRow

        pool = Site(*pool)  # a plain 4-tuple too, as callers passed before Site
        with self.guarded("could not record an unavailable pool"), self._session() as session:
            key = {
                "cloud": pool.cloud,
                "zone": pool.location,
                "instance_type": pool.instance_type,
                "market": pool.market,
            }
            row = session.get(UnavailableRow, key)
            if row is None:
                row = UnavailableRow(**key, until=until, reason=reason)
            else:
                row.until, row.reason = until, reason
            session.add(row)
            session.commit()

    def unavailable(self, now: datetime) -> dict[Site, str]:
        self.ensure_schema()
        rows = self._records("SELECT cloud, zone, instance_type, market, until, reason FROM gpuprov_unavailable", {})
        return {
            Site(r["cloud"], r["zone"], r["instance_type"], r["market"]): r["reason"]
            for r in rows
            if parse_time(r["until"]) > now
        }

    # -- fleet mirror ------------------------------------------------------------------
    def mirror(self, owner: str, handles: Sequence[InstanceHandle], when: datetime) -> None:
        """Replace the owner's mirror with what describe returned, in one transaction."""
        self.ensure_schema()
        from sqlalchemy import delete, insert
        from sqlalchemy.exc import SQLAlchemyError

        from gpuprov.store.tables import InstanceRow

        table = InstanceRow.__table__  # type: ignore[attr-defined]
        rows = [
            {
                "instance_id": h.instance_id,
                "cloud": h.cloud.value,
                "owner": owner,
                "plan_id": h.plan_id,
                "token": h.token,
                "region": h.region,
                "zone": h.zone,
                "instance_type": h.instance_type,
                "market": h.market.value,
                "workload": h.workload,
                "state": h.state,
                "seen_at": when,
            }
            for h in handles
        ]
        try:
            with self.engine().begin() as con:
                con.execute(delete(table).where(table.c.owner == owner))
                if rows:
                    con.execute(insert(table), rows)
        except SQLAlchemyError as exc:
            raise StoreError(f"could not record the fleet of {owner}: {first_line(exc)}") from exc

    def mirrored(self, owner: str) -> tuple[list[InstanceHandle], datetime | None]:
        self.ensure_schema()
        rows = self._records(
            "SELECT instance_id, cloud, region, zone, instance_type, market, state, owner, plan_id, "
            "token, workload, seen_at FROM gpuprov_instance WHERE owner = :owner ORDER BY instance_id",
            {"owner": owner},
        )
        handles = [
            InstanceHandle(
                cloud=Cloud(r["cloud"]),
                instance_id=r["instance_id"],
                region=r["region"],
                zone=r["zone"],
                instance_type=r["instance_type"],
                market=Market(r["market"]),
                state=r["state"],
                owner=r["owner"],
                plan_id=r["plan_id"],
                token=r["token"],
                workload=r["workload"],
            )
            for r in rows
        ]
        seen = max((parse_time(r["seen_at"]) for r in rows), default=None)
        return handles, seen


class _GroupCommit:
    """Journal writes from many threads, committed together: a write waits for the commit in
    progress, if any, then the writes queued meanwhile go in one transaction. A write returns only
    once a commit holding it is done (or raises that commit's error)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.cond = threading.Condition()
        self.queue: list[_Ticket] = []
        self.busy = False

    def write(self, ops: list[tuple[str, Any]], what: str) -> None:
        ticket = _Ticket(ops, what)
        with self.cond:
            self.queue.append(ticket)
            while not ticket.done:
                if self.busy:
                    self.cond.wait()
                    continue
                batch, self.queue = self.queue, []
                self.busy = True
                self.cond.release()
                try:
                    self._commit(batch)
                finally:
                    self.cond.acquire()
                    self.busy = False
                    for t in batch:
                        t.done = True
                    self.cond.notify_all()
        if ticket.error is not None:
            raise ticket.error

    def _commit(self, batch: list[_Ticket]) -> None:
        """One transaction for the batch (SQLAlchemy Core: an insert per new row for its id, one
        executemany update for the rows closed)."""
        from sqlalchemy import bindparam, insert, update
        from sqlalchemy.exc import SQLAlchemyError

        from gpuprov.store.tables import JournalRow

        table = JournalRow.__table__  # type: ignore[attr-defined]
        try:
            self.store.ensure_schema()
            with self.store.engine().begin() as con:
                closes = []
                adds = [item for t in batch for kind, item in t.ops if kind == "add"]
                if adds:  # one executemany, ids back in the order given
                    ids = con.execute(
                        insert(table).returning(table.c.id, sort_by_parameter_order=True),
                        [{c: getattr(item, c) for c in _ADD_COLUMNS} for item in adds],
                    ).scalars()
                    for item, got in zip(adds, ids, strict=True):
                        item.id = got
                for t in batch:
                    for kind, item in t.ops:
                        if kind == "add":
                            continue
                        entry_id, when, instance_id, error = item
                        closes.append(
                            {
                                "row_id": entry_id,
                                "new_state": (JournalState.FAILED if error else JournalState.DONE).value,
                                "new_error": error,
                                "new_finished": when,
                                "new_instance": instance_id,
                            }
                        )
                if closes:
                    done = con.execute(
                        update(table)
                        .where(table.c.id == bindparam("row_id"))
                        .values(
                            state=bindparam("new_state"),
                            error=bindparam("new_error"),
                            finished_at=bindparam("new_finished"),
                            instance_id=_coalesce(bindparam("new_instance"), table.c.instance_id),
                        ),
                        closes,
                    )
                    if done.rowcount is not None and 0 <= done.rowcount < len(closes):
                        raise StoreError(f"{len(closes) - done.rowcount} of {len(closes)} journal rows vanished")
        except SQLAlchemyError as exc:
            failed = StoreError(f"{batch[0].what}: {first_line(exc)}")
            for t in batch:
                t.error = failed
        except StoreError as exc:
            for t in batch:
                t.error = exc
        except Exception as exc:  # nothing of the batch is known to be stored: every writer hears so
            failed = StoreError(f"{batch[0].what}: {type(exc).__name__}: {exc}")
            for t in batch:
                t.error = failed


_ADD_COLUMNS = ("owner", "plan_id", "op", "token", "pool", "instance_id", "state", "started_at")


def _coalesce(a: Any, b: Any) -> Any:
    from sqlalchemy import func

    return func.coalesce(a, b)


@dataclass
class _Ticket:
    ops: list[tuple[str, Any]]
    what: str
    done: bool = False
    error: StoreError | None = None


@dataclass(frozen=True)
class PassRecord:
    owner: str
    started_at: datetime
    finished_at: datetime
    holder: str
    fencing_token: int
    snapshots: tuple[int, ...]
    decision: str  # a Decision, or "dry-run: <decision>"
    reason: str
    plan_before: str | None = None
    plan_after: str | None = None
    launched: int = 0
    terminated: int = 0
    hourly_before_usd: Decimal = Decimal(0)  # USD per hour, before and after the pass's calls
    hourly_after_usd: Decimal = Decimal(0)
    expected_saving_usd: Decimal = Decimal(0)  # over the plan's horizon


class FleetStore(Database):
    """Which plan each fleet follows, and the record of every rebalancing pass."""

    def active_plan(self, owner: str) -> tuple[str, datetime] | None:
        self.ensure_schema()
        rows = self._rows("SELECT plan_id, adopted_at FROM gpuprov_fleet WHERE owner = :o", {"o": owner})
        return (rows[0][0], parse_time(rows[0][1])) if rows else None

    def adopt(self, owner: str, plan_id: str, when: datetime) -> None:
        self.ensure_schema()
        from sqlmodel import Session

        from gpuprov.store.tables import FleetRow

        with self.guarded(f"could not record the plan of fleet {owner}"), Session(self.engine()) as session:
            row = session.get(FleetRow, owner)
            if row is None:
                row = FleetRow(owner=owner, plan_id=plan_id, adopted_at=when)
            else:
                row.plan_id, row.adopted_at = plan_id, when
            session.add(row)
            session.commit()

    def record(self, rec: PassRecord) -> None:
        self.ensure_schema()
        from sqlmodel import Session

        from gpuprov.store.tables import PassRow

        with self.guarded("could not record the rebalancing pass"), Session(self.engine()) as session:
            money = {k: format(Decimal(v), "f") for k, v in rec.__dict__.items() if k.endswith("_usd")}
            session.add(PassRow(**{**rec.__dict__, **money, "snapshots": json.dumps(list(rec.snapshots))}))
            session.commit()

    def history(self, owner: str, limit: int = 50) -> list[PassRecord]:
        self.ensure_schema()
        cols = (
            "owner, started_at, finished_at, holder, fencing_token, snapshots, decision, reason, plan_before, "
            "plan_after, launched, terminated, hourly_before_usd, hourly_after_usd, expected_saving_usd"
        )
        rows = self._records(
            f"SELECT {cols} FROM gpuprov_pass WHERE owner = :o ORDER BY id DESC LIMIT {int(limit)}", {"o": owner}
        )
        return [
            PassRecord(
                owner=r["owner"],
                started_at=parse_time(r["started_at"]),
                finished_at=parse_time(r["finished_at"]),
                holder=r["holder"],
                fencing_token=int(r["fencing_token"]),
                snapshots=tuple(json.loads(r["snapshots"])),
                decision=r["decision"],
                reason=r["reason"],
                plan_before=r["plan_before"],
                plan_after=r["plan_after"],
                launched=int(r["launched"]),
                terminated=int(r["terminated"]),
                hourly_before_usd=Decimal(r["hourly_before_usd"]),
                hourly_after_usd=Decimal(r["hourly_after_usd"]),
                expected_saving_usd=Decimal(r["expected_saving_usd"]),
            )
            for r in rows
        ]
