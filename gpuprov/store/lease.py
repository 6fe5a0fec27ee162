"""A lease in the database so that two rebalancers of one fleet never act at once.

``acquire`` is one conditional UPDATE (atomic on SQLite and PostgreSQL alike): it takes the
lease when it is free, expired, or already ours, and bumps the fencing token whenever the
holder changes. ``check`` tells whether we still hold it with the same token: a rebalancer
calls it before every cloud call and stops when it has lost the lease.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpuprov.errors import StateError, StoreError
from gpuprov.store.database import Database, first_line, parse_time

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Leases(Database):
    def _table(self) -> Any:
        self.ensure_schema()
        from gpuprov.store.tables import LeaseRow

        return LeaseRow.__table__  # type: ignore[attr-defined]

    def acquire(self, name: str, holder: str, ttl: timedelta, now: datetime) -> int | None:
        """The fencing token if we now hold the lease, else None."""
        from sqlalchemy import case, insert, select, update
        from sqlalchemy.exc import IntegrityError, SQLAlchemyError

        t = self._table()
        try:
            with self.engine().begin() as con:
                if con.execute(select(t.c.name).where(t.c.name == name)).first() is None:
                    try:
                        with con.begin_nested():
                            con.execute(insert(t).values(name=name, holder="", expires_at=EPOCH, token=0))
                    except IntegrityError:
                        pass                      # another actor made the row first
            with self.engine().begin() as con:
                result = con.execute(
                    update(t).where(t.c.name == name, (t.c.holder == holder) | (t.c.expires_at < now))
                    .values(holder=holder, expires_at=now + ttl,
                            token=case((t.c.holder == holder, t.c.token), else_=t.c.token + 1)))
                if result.rowcount != 1:
                    return None
                return int(con.execute(select(t.c.token).where(t.c.name == name)).scalar_one())
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot take the lease {name}: {first_line(exc)}") from exc

    def holds(self, name: str, holder: str, token: int, now: datetime) -> bool:
        rows = self._rows("SELECT holder, expires_at, token FROM gpuprov_lease WHERE name = :n", {"n": name})
        if not rows:
            return False
        who, expires, current = rows[0]
        return bool(who == holder and int(current) == token and parse_time(expires) > now)

    def check(self, name: str, holder: str, token: int, now: datetime) -> None:
        if not self.holds(name, holder, token, now):
            raise StateError(f"lost the lease on {name}: another rebalancer acts on this fleet now")

    def release(self, name: str, holder: str, token: int) -> None:
        from sqlalchemy import update

        t = self._table()
        with self.engine().begin() as con:
            con.execute(update(t).where(t.c.name == name, t.c.holder == holder, t.c.token == token)
                        .values(expires_at=EPOCH))
