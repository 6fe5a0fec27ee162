"""Imported price history: (time, offer key, market, price) rows, stored in one transaction per file.

The rows are plain tuples here (the store knows no price formats): ``ChangeTuple`` is
(at, cloud, kind, key_a, key_b, key_c, market, price or None, event). ``pricing/history.py``
reads the files and turns the rows into price changes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from gpuprov.errors import StoreError, UsageError
from gpuprov.store.database import Database, parse_time

ChangeTuple = tuple[datetime, str, str, str, str, str, str, Decimal | None, str]
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


class HistoryStore(Database):
    def add(self, rows: Sequence[ChangeTuple], source: str) -> tuple[int, int]:
        """Store the rows not already stored, all in one transaction; (stored, already there)."""
        self.ensure_schema()
        from sqlalchemy import insert

        from gpuprov.store import tables

        clouds = {r[1] for r in rows}
        stored = self.changes(clouds)
        have = {_key(r) for r in stored}
        # one price per (time, offer key, market): a file that says otherwise than what is stored
        # (or than itself) is refused whole
        prices: dict[tuple[Any, ...], tuple[Decimal | None, str]] = {_key(r)[:7]: (r[7], "stored") for r in stored}
        new: list[dict[str, Any]] = []
        seen: set[tuple[Any, ...]] = set()
        for r in rows:
            k = _key(r)
            slot = k[:7]
            if slot in prices and prices[slot][0] != r[7] and k not in have:
                other, where = prices[slot]
                raise UsageError(
                    f"{source}: {r[1]} {'/'.join(r[3:6])} {r[6]} at {k[0]} is {r[7]} here but {other} "
                    f"({'already stored' if where == 'stored' else 'earlier in the file'}); nothing was stored",
                    hint="gpuprov pricing history remove --source SOURCE takes a bad import back",
                )
            prices.setdefault(slot, (r[7], "file"))
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

    def changes(self, clouds: Collection[str] | None = None) -> list[ChangeTuple]:
        """Every stored change of these clouds (None: all), oldest first (import order within a time)."""
        self.ensure_schema()
        sql = f"SELECT {', '.join(COLUMNS)} FROM gpuprov_price_change"
        params: dict[str, Any] = {}
        if clouds is not None:
            if not clouds:
                return []
            names = []
            for i, c in enumerate(sorted(clouds)):
                params[f"c{i}"] = c
                names.append(f":c{i}")
            sql += f" WHERE cloud IN ({', '.join(names)})"
        rows = self._rows(
            f"SELECT id, {', '.join(COLUMNS)} FROM gpuprov_price_change"
            + sql.split("FROM gpuprov_price_change", 1)[1]
            + " ORDER BY at, id",
            params,
        )
        out: list[ChangeTuple] = []
        for rid, at, cloud, kind, a, b, c, market, price, event in rows:
            try:
                value = None if price is None else Decimal(price)
                if value is not None and not value.is_finite():
                    raise ValueError(price)
                out.append((parse_time(at), cloud, kind, a, b, c, market, value, event))
            except (ValueError, ArithmeticError, TypeError):
                raise StoreError(
                    f"stored price change {rid} is unreadable",
                    hint="gpuprov pricing history remove --source SOURCE, then import the file again",
                ) from None
        out.sort(key=lambda r: r[0])  # SQLite compares the stored text; the parsed times decide
        return out

    def coverage(self) -> list[Coverage]:
        self.ensure_schema()
        rows = self._records(
            "SELECT cloud, source, count(*) AS n_changes, "
            "count(DISTINCT kind || '|' || key_a || '|' || key_b || '|' || key_c) AS n_keys, "
            "min(at) AS first_at, max(at) AS last_at FROM gpuprov_price_change "
            "GROUP BY cloud, source ORDER BY cloud, source",
            {},
        )
        return [
            Coverage(
                cloud=r["cloud"],
                source=r["source"],
                changes=int(r["n_changes"]),
                keys=int(r["n_keys"]),
                first=parse_time(r["first_at"]),
                last=parse_time(r["last_at"]),
            )
            for r in rows
        ]

    def remove(self, source: str) -> int:
        """Forget every change imported from ``source`` (one transaction); how many were removed."""
        self.ensure_schema()
        from sqlalchemy import delete

        from gpuprov.store import tables

        t = tables.PriceChangeRow.__table__  # type: ignore[attr-defined]
        with self.guarded(f"could not remove the price history from {source}"), self.engine().begin() as con:
            gone = con.execute(delete(t).where(t.c.source == source)).rowcount
        return int(gone or 0)
