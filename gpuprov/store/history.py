"""Imported price history: (time, offer key, market, price) rows, stored in one transaction per file.

The rows are plain tuples here (the store knows no price formats): ``ChangeTuple`` is
(at, cloud, kind, key_a, key_b, key_c, market, price or None, event). ``pricing/history.py``
reads the files and turns the rows into price changes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from gpuprov.errors import StoreError, UsageError
from gpuprov.store.database import Database, parse_time

ChangeTuple = tuple[datetime, str, str, str, str, str, str, Decimal | None, str]
KINDS = ("gcp-accelerator", "instance")  # pricing.history.GCP_ACCELERATOR, INSTANCE
EVENTS = ("new", "price", "removed")
COLUMNS = ("at", "cloud", "kind", "key_a", "key_b", "key_c", "market", "price", "event")


@dataclass(frozen=True)
class Coverage:
    """What the stored history of one cloud and source holds."""

    cloud: str
    source: str
    changes: int
    keys: int
    first: datetime
    last: datetime


def _key(row: ChangeTuple) -> tuple[Any, ...]:
    at, *rest = row
    price = rest[6]
    return (at.astimezone(UTC).isoformat(), *rest[:6], None if price is None else str(price), rest[7])


def _slot(row: ChangeTuple) -> tuple[Any, ...]:
    """Where a row prices: (time, cloud, kind, key, market). One slot holds one price."""
    return (row[0].astimezone(UTC).isoformat(), *row[1:7])


class HistoryConflictError(UsageError):
    """A file that would store a second, different price at a (time, key, market) already priced."""


def _show_price(price: Decimal | None) -> str:
    return "gone" if price is None else f"${price}"


class HistoryStore(Database):
    def add(self, rows: Sequence[ChangeTuple], source: str) -> tuple[int, int]:
        """Store the rows not already stored, all in one transaction; (stored, already there).

        A row at the same (time, key, market) as a stored row, or an earlier row of the same
        file, with another price is a :class:`HistoryConflictError` (exit 2): nothing is stored."""
        self.ensure_schema()
        from sqlalchemy import insert

        from gpuprov.store import tables

        clouds = {r[1] for r in rows}
        stored = self.changes(clouds)
        have = {_key(r) for r in stored}
        priced: dict[tuple[Any, ...], tuple[Decimal | None, str]] = {_slot(r): (r[7], "stored") for r in stored}
        new: list[dict[str, Any]] = []
        seen: set[tuple[Any, ...]] = set()
        for r in rows:
            slot = _slot(r)
            before = priced.setdefault(slot, (r[7], f"this file ({source})"))
            if before[0] != r[7]:
                at, cloud, _kind, a, b, c, market = slot
                raise HistoryConflictError(
                    f"{source}: {cloud} {a}/{b}/{c} {market} at {at} is {_show_price(r[7])}, but {before[1]} "
                    f"has {_show_price(before[0])} there; nothing was stored",
                    hint="gpuprov pricing history remove --source SOURCE takes out a bad import",
                )
            k = _key(r)
            if k in have or k in seen:
                continue
            seen.add(k)
            at, cloud, kind, a, b, c, market, price, event = r
            if at.tzinfo is None:
                raise ValueError("price change times must be timezone-aware")
            new.append(
                {
                    "at": at.astimezone(UTC),
                    "cloud": cloud,
                    "kind": kind,
                    "key_a": a,
                    "key_b": b,
                    "key_c": c,
                    "market": market,
                    "price": None if price is None else str(price),
                    "event": event,
                    "source": source,
                    "imported_at": datetime.now(UTC),
                }
            )
        t = tables.PriceChangeRow.__table__  # type: ignore[attr-defined]
        with self.guarded(f"could not store the price history from {source}"), self.engine().begin() as con:
            if new:
                con.execute(insert(t), new)
        return len(new), len(rows) - len(new)

    def remove(self, source: str) -> int:
        """Delete every change imported from ``source``, in one transaction; how many."""
        self.ensure_schema()
        from sqlalchemy import delete

        from gpuprov.store import tables

        t = tables.PriceChangeRow.__table__  # type: ignore[attr-defined]
        with self.guarded(f"could not remove the price history from {source}"), self.engine().begin() as con:
            return int(con.execute(delete(t).where(t.c.source == source)).rowcount or 0)

    def sources(self) -> list[str]:
        self.ensure_schema()
        return [str(r[0]) for r in self._rows("SELECT DISTINCT source FROM gpuprov_price_change ORDER BY source", {})]

    def changes(self, clouds: Collection[str] | None = None) -> list[ChangeTuple]:
        """Every stored change of these clouds (None: all), oldest first (import order within a time)."""
        self.ensure_schema()
        sql = f"SELECT id, {', '.join(COLUMNS)} FROM gpuprov_price_change"
        params: dict[str, Any] = {}
        if clouds is not None:
            if not clouds:
                return []
            names = []
            for i, c in enumerate(sorted(clouds)):
                params[f"c{i}"] = c
                names.append(f":c{i}")
            sql += f" WHERE cloud IN ({', '.join(names)})"
        rows = self._rows(sql + " ORDER BY at, id", params)
        out = [self._read(row) for row in rows]
        out.sort(key=lambda r: r[0])  # SQLite compares the stored text; the parsed times decide
        return out

    def _read(self, row: Sequence[Any]) -> ChangeTuple:
        """One stored row as a change tuple; a row that is not one is a StoreError naming its id."""
        from gpuprov.models import HISTORY_EARLIEST, HISTORY_LATEST, Cloud, Market

        rid, at, cloud, kind, a, b, c, market, price, event = row

        def bad(what: str) -> StoreError:
            return StoreError(
                f"price history row {rid} is corrupt: {what}",
                hint="gpuprov pricing history remove --source SOURCE, then import that file again",
            )

        try:
            when = parse_time(at).astimezone(UTC)
        except (ValueError, TypeError, OverflowError):
            when = None
        if when is None or not HISTORY_EARLIEST <= when < HISTORY_LATEST:
            raise bad(f"time {str(at)[:40]!r} is not a time from {HISTORY_EARLIEST:%Y} to {HISTORY_LATEST:%Y}")
        if cloud not in {x.value for x in Cloud} or market not in (Market.ON_DEMAND.value, Market.SPOT.value):
            raise bad(f"cloud/market {str(cloud)[:20]!r}/{str(market)[:20]!r} is not one the history holds")
        if kind not in KINDS or event not in EVENTS or not all(isinstance(k, str) for k in (a, b, c)):
            raise bad("its kind, key or event is not one the history holds")
        value: Decimal | None = None
        if price is not None:
            try:
                value = Decimal(str(price))
            except InvalidOperation:
                value = None
            if value is None or not value.is_finite() or value <= 0:
                raise bad(f"price {str(price)[:40]!r} is not a price")
        return (when, cloud, kind, a, b, c, market, value, event)

    def coverage(self) -> list[Coverage]:
        self.ensure_schema()
        rows = self._rows(
            "SELECT cloud, source, count(*), count(DISTINCT kind || '|' || key_a || '|' || key_b || '|' || key_c), "
            "min(at), max(at) FROM gpuprov_price_change GROUP BY cloud, source ORDER BY cloud, source",
            {},
        )
        out = []
        for r in rows:
            try:
                first, last = parse_time(r[4]).astimezone(UTC), parse_time(r[5]).astimezone(UTC)
                out.append(Coverage(str(r[0]), str(r[1]), int(r[2]), int(r[3]), first, last))
            except (ValueError, TypeError, OverflowError):
                raise StoreError(
                    f"price history of {str(r[0])[:20]!r} from {str(r[1])[:80]!r} holds a time that is not one "
                    f"({str(r[4])[:40]!r} to {str(r[5])[:40]!r})",
                    hint="gpuprov pricing history remove --source SOURCE, then import that file again",
                ) from None
        return out
