"""Provisioning state: the journal of cloud calls, the unavailable-pool cache, the fleet mirror.

The cloud is the source of truth; these tables let a run that was killed be reconciled
by the next one, and let ``status`` answer without calling the cloud.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

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
        from gpuprov.store.tables import JournalRow

        row = JournalRow(
            owner=owner,
            plan_id=plan_id,
            op=op,
            token=token,
            pool=json.dumps(list(pool)),
            instance_id=instance_id,
            started_at=when,
        )
        with self.guarded(f"could not journal a {op} before the call"), self._session() as session:
            session.add(row)
            session.commit()
            if row.id is None:
                raise StoreError("the database returned no id for a journal row")
            return row.id

    def finish(self, entry_id: int, when: datetime, instance_id: str | None = None, error: str | None = None) -> None:
        from gpuprov.store.tables import JournalRow

        with (
            self.guarded(f"could not close journal row {entry_id} (the next run settles it)"),
            self._session() as session,
        ):
            row = session.get(JournalRow, entry_id)
            if row is None:
                raise StoreError(f"journal row {entry_id} vanished")
            row.state = (JournalState.FAILED if error else JournalState.DONE).value
            row.error = error
            row.finished_at = when
            if instance_id is not None:
                row.instance_id = instance_id
            session.add(row)
            session.commit()

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
