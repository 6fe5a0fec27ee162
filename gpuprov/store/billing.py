"""Imported bills: one row per import (``gpuprov_bill_import``) and the charges kept of it
(``gpuprov_bill_charge``, see ``gpuprov.billing.charges``), written in one transaction per import.

Money is a decimal string (exact), times are epoch milliseconds in UTC (integers compare and
index the same in SQLite and PostgreSQL). An import replaces the charges an earlier import stored
for the same provider, billing account and billing period: providers restate a period's export as
it fills in, and the parts of one delivery are imported together (``bill import A B C``).
These tables (``billing_tables``) arrived with store schema version 7 (``database.UPGRADABLE``
creates them in an older database). Reads go through the standard library's sqlite3 (no
SQLModel on the way: ``plan`` reads the bills of held commitments).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuprov.errors import StoreError
from gpuprov.store.database import Database

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from gpuprov.billing.charges import Charge


TIMES = ("start", "end", "billing_period_start")
MONEY = (
    "billed",
    "effective",
    "list_cost",
    "contracted",
    "pricing_quantity",
    "consumed_quantity",
    "commitment_quantity",
)


def ms(when: datetime) -> int:
    return int(when.astimezone(UTC).timestamp() * 1000)


def from_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, tz=UTC)


def _row(c: Charge, import_id: int) -> dict[str, Any]:
    out: dict[str, Any] = {"import_id": import_id}
    for f in fields(c):
        v = getattr(c, f.name)
        if f.name in TIMES:
            out[f"{f.name}_ms"] = None if v is None else ms(v)
        elif isinstance(v, Decimal):
            out[f.name] = format(v, "f")
        else:
            out[f.name] = v
    return out


@dataclass(frozen=True)
class ImportRecord:
    id: int
    source: str
    sha256: str
    focus_version: str
    format: str
    imported_at: datetime
    rows_read: int
    rows_stored: int
    billed_usd: Decimal
    effective_usd: Decimal
    list_usd: Decimal
    coverage: tuple[tuple[str | None, str | None, datetime, datetime], ...]
    notes: tuple[str, ...]
    replaced: int
    charges_now: int  # still stored (a later import may have replaced some)


class Writer:
    """One file of an open import (``Session.start``)."""

    def __init__(self, con: Connection, import_id: int) -> None:
        self.con, self.import_id = con, import_id
        self.stored = 0
        self.summary: dict[str, Any] = {}  # the import row's totals, set by the importer

    def add(self, charges: Sequence[Charge]) -> None:
        if not charges:
            return
        from sqlalchemy import insert

        from gpuprov.store.billing_tables import BillChargeRow

        table = BillChargeRow.__table__  # type: ignore[attr-defined]
        self.con.execute(insert(table), [_row(c, self.import_id) for c in charges])
        self.stored += len(charges)


class Session:
    """The open transaction of one ``bill import`` (``BillStore.session``)."""

    def __init__(self, con: Connection) -> None:
        self.con = con
        self.writers: list[Writer] = []

    def start(self, source: str, focus_version: str, fmt: str) -> Writer:
        from sqlalchemy import insert

        from gpuprov.store.billing_tables import BillImportRow

        imp = BillImportRow.__table__  # type: ignore[attr-defined]
        result = self.con.execute(
            insert(imp).values(
                source=source, sha256="", focus_version=focus_version, format=fmt, imported_at=datetime.now(UTC)
            )
        )
        key = result.inserted_primary_key
        if key is None or key[0] is None:
            raise StoreError("the database returned no id for the bill import")
        writer = Writer(self.con, int(key[0]))
        self.writers.append(writer)
        return writer

    def finish(self, periods: Iterable[tuple[str | None, str | None, datetime | None]]) -> int:
        """Replace what earlier imports stored for these (provider, account, billing period)
        keys and record each file's totals; how many earlier charges were replaced."""
        from sqlalchemy import and_, delete, update

        from gpuprov.store.billing_tables import BillChargeRow, BillImportRow

        t = BillChargeRow.__table__  # type: ignore[attr-defined]
        mine = [w.import_id for w in self.writers]
        replaced = 0
        for provider, account, period in sorted(periods, key=lambda k: tuple(str(x) for x in k)):
            cond = and_(
                t.c.import_id.not_in(mine),
                t.c.provider.is_not_distinct_from(provider),
                t.c.billing_account_id.is_not_distinct_from(account),
                t.c.billing_period_start_ms.is_not_distinct_from(None if period is None else ms(period)),
            )
            replaced += int(self.con.execute(delete(t).where(cond)).rowcount or 0)
        imp = BillImportRow.__table__  # type: ignore[attr-defined]
        for i, w in enumerate(self.writers):
            self.con.execute(
                update(imp)
                .where(imp.c.id == w.import_id)
                .values(**w.summary, rows_stored=w.stored, replaced=replaced if i == 0 else 0)
            )
        return replaced


class BillStore(Database):
    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: everything the block adds, or (on any error) nothing."""
        self.ensure_schema()
        with self.guarded("could not store the bill"), self.engine().begin() as con:
            yield Session(con)

    def imports(self) -> list[ImportRecord]:
        self.ensure_schema()
        rows = self._records(
            "SELECT i.id, i.source, i.sha256, i.focus_version, i.format, i.imported_at, i.rows_read, i.rows_stored, "
            "i.billed_usd, i.effective_usd, i.list_usd, i.coverage, i.notes, i.replaced, "
            "(SELECT count(*) FROM gpuprov_bill_charge c WHERE c.import_id = i.id) AS charges_now "
            "FROM gpuprov_bill_import i ORDER BY i.id",
            {},
        )
        from gpuprov.store.database import parse_time

        out = []
        for r in rows:
            try:
                cover = tuple((p, c, from_ms(int(a)), from_ms(int(b))) for p, c, a, b in json.loads(r["coverage"]))
                out.append(
                    ImportRecord(
                        id=int(r["id"]),
                        source=r["source"],
                        sha256=r["sha256"],
                        focus_version=r["focus_version"],
                        format=r["format"],
                        imported_at=parse_time(r["imported_at"]),
                        rows_read=int(r["rows_read"]),
                        rows_stored=int(r["rows_stored"]),
                        billed_usd=Decimal(r["billed_usd"]),
                        effective_usd=Decimal(r["effective_usd"]),
                        list_usd=Decimal(r["list_usd"]),
                        coverage=cover,
                        notes=tuple(json.loads(r["notes"])),
                        replaced=int(r["replaced"]),
                        charges_now=int(r["charges_now"]),
                    )
                )
            except (ValueError, TypeError, ArithmeticError):
                raise StoreError(f"stored bill import {r['id']} is unreadable") from None
        return out

    def charges(
        self,
        start: datetime | None = None,
        end: datetime | None = None,
        kinds: Sequence[str] | None = None,
        owner: str | None = None,
    ) -> list[Charge]:
        """Stored charges whose charge period overlaps [start, end), of these kinds (and, for
        instance and tagged charges, this owner), in charge period order."""
        self.ensure_schema()
        where: list[str] = ["1 = 1"]
        params: dict[str, Any] = {}
        if start is not None:
            where.append("end_ms > :start")
            params["start"] = ms(start)
        if end is not None:
            where.append("start_ms < :end")
            params["end"] = ms(end)
        if kinds:
            names = [f":k{i}" for i in range(len(kinds))]
            where.append(f"kind IN ({', '.join(names)})")
            params.update({f"k{i}": k for i, k in enumerate(kinds)})
        if owner is not None:
            where.append("(owner = :owner OR kind NOT IN ('instance', 'tagged'))")
            params["owner"] = owner
        cols = [f.name for f in fields(_charge_type())]
        select = ", ".join(f"{c}_ms" if c in TIMES else c for c in cols)
        rows = self._rows(
            f"SELECT {select}, id FROM gpuprov_bill_charge WHERE {' AND '.join(where)} ORDER BY start_ms, id", params
        )
        return [_charge(cols, r) for r in rows]

    def commitment_rows(self, start: datetime | None = None, end: datetime | None = None) -> list[Charge]:
        """Every stored row of a commitment discount (any kind, any owner) overlapping [start, end)."""
        self.ensure_schema()
        where, params = ["commitment_id IS NOT NULL"], {}
        if start is not None:
            where.append("end_ms > :start")
            params["start"] = ms(start)
        if end is not None:
            where.append("start_ms < :end")
            params["end"] = ms(end)
        cols = [f.name for f in fields(_charge_type())]
        select = ", ".join(f"{c}_ms" if c in TIMES else c for c in cols)
        rows = self._rows(
            f"SELECT {select}, id FROM gpuprov_bill_charge WHERE {' AND '.join(where)} ORDER BY start_ms, id", params
        )
        return [_charge(cols, r) for r in rows]


def _charge_type() -> Any:
    from gpuprov.billing.charges import Charge

    return Charge


def _charge(cols: Sequence[str], r: Sequence[Any]) -> Charge:
    kind = _charge_type()
    values: dict[str, Any] = {}
    try:
        for name, v in zip(cols, r, strict=False):
            if name in TIMES:
                values[name] = None if v is None else from_ms(int(v))
            elif name in MONEY:
                values[name] = None if v is None else Decimal(v)
            else:
                values[name] = v
        charge: Charge = kind(**values)
    except (ValueError, TypeError, ArithmeticError):
        raise StoreError(f"stored bill charge {r[-1]} is unreadable") from None
    if charge.start is None or charge.end is None or not charge.billed.is_finite():
        raise StoreError(f"stored bill charge {r[-1]} is unreadable")
    return charge
