"""A lease in the database so that two rebalancers of one fleet never act at once.

``acquire`` is one conditional UPDATE (atomic on SQLite and PostgreSQL alike): it takes the
lease when it is free, expired, or already ours, and bumps the fencing token whenever the
holder changes. ``check`` tells whether we still hold it with the same token: a rebalancer
calls it before every cloud call and stops when it has lost the lease.
"""

from __future__ import annotations

import re
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
                        pass  # another actor made the row first
            with self.engine().begin() as con:
                result = con.execute(
                    update(t)
                    .where(t.c.name == name, (t.c.holder == holder) | (t.c.expires_at < now))
                    .values(
                        holder=holder,
                        expires_at=now + ttl,
                        token=case((t.c.holder == holder, t.c.token), else_=t.c.token + 1),
                    )
                )
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

    def take_over(self, name: str, dead: str, holder: str, ttl: timedelta, now: datetime) -> int | None:
        """Take a lease from a holder known to be dead (its process is gone): one conditional
        UPDATE on that holder, so two actors racing to take it over cannot both win."""
        from sqlalchemy import update

        t = self._table()
        with self.guarded(f"cannot take over the lease {name}"), self.engine().begin() as con:
            result = con.execute(
                update(t)
                .where(t.c.name == name, t.c.holder == dead)
                .values(holder=holder, expires_at=now + ttl, token=t.c.token + 1)
            )
            if result.rowcount != 1:
                return None
            from sqlalchemy import select

            return int(con.execute(select(t.c.token).where(t.c.name == name)).scalar_one())

    def holder_of(self, name: str) -> tuple[str, datetime]:
        rows = self._rows("SELECT holder, expires_at FROM gpuprov_lease WHERE name = :n", {"n": name})
        return (str(rows[0][0]), parse_time(rows[0][1])) if rows else ("", EPOCH)

    def check(self, name: str, holder: str, token: int, now: datetime) -> None:
        if not self.holds(name, holder, token, now):
            raise StateError(f"lost the lease on {name}: another actor changes this fleet now")

    def release(self, name: str, holder: str, token: int) -> None:
        from sqlalchemy import update

        t = self._table()
        with self.guarded(f"could not release the lease {name}"), self.engine().begin() as con:
            con.execute(
                update(t).where(t.c.name == name, t.c.holder == holder, t.c.token == token).values(expires_at=EPOCH)
            )


def holder_id(what: str) -> str:
    """Who holds a lease, as other actors are told: the command, the host, the process."""
    import os
    import socket
    import uuid

    return f"{what} on {socket.gethostname()[:40]} pid {os.getpid()} ({uuid.uuid4().hex[:6]})"


HOLDER = re.compile(r" on (?P<host>\S+) pid (?P<pid>\d+) \(")


def _dead(holder: str) -> bool:
    """Whether a holder is a process of this machine that no longer runs (killed, crashed)."""
    import os
    import socket

    m = HOLDER.search(holder)
    if m is None or m.group("host") != socket.gethostname()[:40]:
        return False  # another machine: wait for the lease to expire
    try:
        os.kill(int(m.group("pid")), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False
    return False


class FleetLock:
    """One actor per fleet: ``apply``, ``destroy`` and the rebalancer each hold the lease
    ``fleet:<owner>`` while they act. A second actor waits up to ``wait`` for it, then fails with
    one line naming who holds it. ``guard()`` runs before every cloud call: it renews the lease
    when half its time is gone and raises if another actor has taken it (fencing)."""

    def __init__(
        self,
        leases: Leases,
        owner: str,
        what: str,
        wait: timedelta = timedelta(0),
        ttl: timedelta = timedelta(minutes=5),
        clock: Any = None,
        sleep: Any = None,
    ) -> None:
        import time

        self.leases, self.owner, self.wait, self.ttl = leases, owner, wait, ttl
        self.name = f"fleet:{owner}"
        self.holder = holder_id(what)
        self._now = clock or (lambda: datetime.now(UTC))
        self._sleep = sleep or time.sleep
        self.token: int | None = None
        self._renewed = EPOCH

    def __enter__(self) -> FleetLock:
        deadline = self._now() + self.wait
        while True:
            now = self._now()
            token = self.leases.acquire(self.name, self.holder, self.ttl, now)
            if token is not None:
                self.token, self._renewed = token, now
                return self
            who, until = self.leases.holder_of(self.name)
            if who and until > now and _dead(who):
                token = self.leases.take_over(self.name, who, self.holder, self.ttl, now)
                if token is not None:
                    self.token, self._renewed = token, now
                    return self
            if now >= deadline:
                raise StateError(
                    f"fleet {self.owner} is being changed by {who or 'another actor'} "
                    f"(its lease runs to {until:%H:%M:%S} UTC)",
                    hint="wait for it to finish, or pass --wait SECONDS",
                )
            self._sleep(min(1.0, max(0.05, (deadline - now).total_seconds())))

    def guard(self) -> None:
        if self.token is None:
            raise StateError(f"fleet {self.owner}: acting without its lease")
        now = self._now()
        if now - self._renewed > self.ttl / 2:
            token = self.leases.acquire(self.name, self.holder, self.ttl, now)
            if token != self.token:
                raise StateError(f"lost the lease on fleet {self.owner}: another actor changes it now")
            self._renewed = now
        self.leases.check(self.name, self.holder, self.token, now)

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            try:
                self.leases.release(self.name, self.holder, self.token)
            except StoreError:
                pass  # it expires by itself
            self.token = None
