"""The commitment inventory: what the team already pays for, by id."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from commitments.records import IDENT, Commitment, Kind
from gpuprov.errors import StoreError, UsageError
from gpuprov.names import show
from gpuprov.store.database import Database, first_line, parse_time

COLUMNS = (
    "id, cloud, kind, instance_type, family, region, zone, count, usd_per_hour, hourly_usd, term, discount, "
    "starts, ends, source"
)


class CommitmentStore(Database):
    def add(self, records: Sequence[Commitment], replace: bool = False) -> int:
        """Store records in one transaction: all or none. ``replace`` lets discovery refresh
        the records it found before (same id)."""
        self.ensure_schema()
        from sqlalchemy.exc import SQLAlchemyError
        from sqlmodel import Session

        from gpuprov.store.tables import CommitmentRow

        now = datetime.now(UTC)
        try:
            with Session(self.engine()) as session:
                for c in records:
                    old = session.get(CommitmentRow, c.id)
                    if old is not None:
                        if not replace:
                            raise UsageError(f"commitment {show(c.id)} is already stored")
                        session.delete(old)
                        session.flush()
                    session.add(
                        CommitmentRow(
                            id=c.id,
                            cloud=c.cloud,
                            kind=c.kind.value,
                            instance_type=c.instance_type,
                            family=c.family,
                            region=c.region,
                            zone=c.zone,
                            count=c.count,
                            usd_per_hour=None if c.usd_per_hour is None else format(c.usd_per_hour, "f"),
                            hourly_usd=format(c.hourly_usd, "f"),
                            term=c.term,
                            discount=None if c.discount is None else format(c.discount, "f"),
                            starts=c.starts,
                            ends=c.ends,
                            source=c.source,
                            added_at=now,
                        )
                    )
                session.commit()
        except SQLAlchemyError as exc:
            raise StoreError(f"could not store commitments: {first_line(exc)}") from exc
        return len(records)

    def list(self) -> list[Commitment]:
        self.ensure_schema()
        rows = self._rows(f"SELECT {COLUMNS} FROM gpuprov_commitment ORDER BY cloud, id", {})
        out = []
        for r in rows:
            cid = r[0]
            try:
                out.append(self._record(r))
            except (ValueError, ArithmeticError, TypeError):
                raise StoreError(
                    f"stored commitment {show(str(cid))} is unreadable",
                    hint=f"gpuprov commitments remove {show(str(cid))}, then import it again",
                ) from None
        return out

    @staticmethod
    def _record(r: Sequence[Any]) -> Commitment:
        (cid, cloud, kind, itype, family, region, zone, count, usd_h, hourly, term, discount, s, e, src) = r
        if not isinstance(cid, str) or not IDENT.fullmatch(cid):
            raise ValueError("not an id")  # ids reach warnings and tables: only what an import admits
        money = [Decimal(v) for v in (usd_h, hourly, discount) if v is not None]
        if any(not m.is_finite() for m in money):
            raise ValueError("not a finite amount")
        return Commitment(
            id=cid,
            cloud=cloud,
            kind=Kind(kind),
            instance_type=itype,
            family=family,
            region=region,
            zone=zone,
            count=None if count is None else int(count),
            usd_per_hour=None if usd_h is None else Decimal(usd_h),
            hourly_usd=Decimal(hourly),
            term=term,
            discount=None if discount is None else Decimal(discount),
            starts=parse_time(s),
            ends=parse_time(e),
            source=src,
        )

    def ids(self) -> set[str]:
        self.ensure_schema()
        return {r[0] for r in self._rows("SELECT id FROM gpuprov_commitment", {})}

    def remove(self, cid: str) -> None:
        """Delete by id with one statement (a row too damaged to read can still be removed)."""
        self.ensure_schema()
        from sqlalchemy import delete
        from sqlalchemy.exc import SQLAlchemyError

        from gpuprov.store.tables import CommitmentRow

        try:
            with self.engine().begin() as con:
                gone = con.execute(delete(CommitmentRow).where(CommitmentRow.id == cid)).rowcount  # type: ignore[arg-type]
        except SQLAlchemyError as exc:
            raise StoreError(f"could not remove commitment {show(cid)}: {first_line(exc)}") from exc
        if not gone:
            raise UsageError(f"no commitment {show(cid)}", hint="gpuprov commitments list shows them")
