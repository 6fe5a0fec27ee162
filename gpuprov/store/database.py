"""One database for the catalog and gpuprov's state: SQLite by default, any SQLAlchemy URL.

Reads run SQL text through either the standard library's ``sqlite3`` (for a plain SQLite
file: it keeps SQLAlchemy and pydantic off the start-up path of ``plan`` and ``prices``)
or a SQLAlchemy connection (PostgreSQL and anything else). Writes, and the schema itself,
go through SQLModel. The schema is created on first use and upgraded in place from older
versions (each upgrade only adds tables).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuprov.errors import StoreError
from gpuprov.store.db import database_url, sqlite_path

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

SCHEMA_VERSION = "7"  # the one schema version of the store (tables.py reads it); 7: the bill tables
UPGRADABLE = ("1", "2", "3", "4", "5", "6")  # versions whose upgrade is "create the tables added since"
# columns added to existing tables since (schema 6): added by the upgrade with ALTER TABLE
ADDED_COLUMNS = (("gpuprov_offer", "gpu_fraction", "VARCHAR"), ("gpuprov_offer", "as_of", "VARCHAR"))


def masked(url: str) -> str:
    """A database URL fit to print: any password replaced by *** (gpuprov/secrets.py, in any
    form: userinfo, ?password=, a DSN's password=, a URL that does not parse)."""
    from gpuprov.secrets import mask

    return mask(url)


def first_line(exc: BaseException, url: str = "") -> str:
    """The first line of an error, without SQLAlchemy's statement and parameters, and without
    any piece of ``url``'s password (a driver may quote one where it split the URL wrongly)."""
    from gpuprov.secrets import mask, secret_parts

    text = str(exc).strip().splitlines()
    return mask(text[0] if text else type(exc).__name__, secret_parts(url))[:300]


def parse_time(value: Any) -> datetime:
    """A stored time as an aware UTC datetime (SQLite hands back naive strings)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


BUSY_TIMEOUT_S = 30.0  # SQLite: how long a writer waits for another process's lock before failing


class Database:
    """The database behind one URL."""

    @contextlib.contextmanager
    def guarded(self, what: str) -> Iterator[None]:
        """Any database error inside becomes one StoreError line saying what was being done."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            yield
        except SQLAlchemyError as exc:
            raise StoreError(f"{what}: {first_line(exc, self.url)}", hint=f"database {masked(self.url)}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"{what}: {first_line(exc, self.url)}", hint=f"database {masked(self.url)}") from exc

    def __init__(self, url: str | None = None) -> None:
        self.url = url or database_url()
        self._path = sqlite_path(self.url)
        self._engine: Engine | None = None
        self._ready = False

    # -- reading -------------------------------------------------------------------
    def _put_meta(self, key: str, value: str, what: str) -> None:
        """Write one document into the meta table (insert or replace, one transaction)."""
        self.ensure_schema()
        from sqlalchemy.exc import SQLAlchemyError
        from sqlmodel import Session

        from gpuprov.store.tables import MetaRow

        try:
            with Session(self.engine()) as session:
                row = session.get(MetaRow, key)
                if row is None:
                    session.add(MetaRow(key=key, value=value))
                else:
                    row.value = value
                session.commit()
        except SQLAlchemyError as exc:
            raise StoreError(f"could not store {what}: {first_line(exc, self.url)}") from exc

    def _records(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Rows as mappings by column name (what the SELECT names them), not by position."""
        names, rows = self._query(sql, params)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Sequence[Any]]:
        return self._query(sql, params)[1]

    def _query(self, sql: str, params: dict[str, Any]) -> tuple[list[str], list[Sequence[Any]]]:
        """Column names and rows: SQLite through the standard library (fast to start), any other
        database through SQLAlchemy."""
        if self._path is not None:
            try:
                con = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the catalog at {self._path}: {first_line(exc, self.url)}") from exc
            try:
                cur = con.execute(sql, params)
                return [d[0] for d in cur.description or ()], list(cur.fetchall())
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read the catalog at {self._path}: {first_line(exc, self.url)}") from exc
            finally:
                con.close()
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine().connect() as sa_con:
                result = sa_con.execute(text(sql), params)
                return list(result.keys()), [tuple(r) for r in result.all()]
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the catalog: {exc.__class__.__name__}: {first_line(exc, self.url)}") from exc

    def _schema_version(self) -> str | None:
        """The stored schema version, or None where the schema has not been created yet."""
        if self._path is not None:
            if not self._path.exists():
                return None
            try:
                rows = self._rows("SELECT value FROM gpuprov_meta WHERE key = 'schema_version'", {})
            except StoreError:
                return None
            return str(rows[0][0]) if rows else None
        from sqlalchemy import inspect

        with self.guarded("cannot open the database"):
            if not inspect(self.engine()).has_table("gpuprov_meta"):
                return None
        rows = self._rows("SELECT value FROM gpuprov_meta WHERE key = 'schema_version'", {})
        return str(rows[0][0]) if rows else None

    def ensure_schema(self) -> None:
        """Create the schema on first use; refuse a database written by another schema version."""
        if self._ready:
            return
        version = self._schema_version()
        if version is None:
            self._create_schema()
        elif version in UPGRADABLE:
            self._create_schema(upgrade_from=version)
        elif version != SCHEMA_VERSION:
            raise StoreError(
                f"the catalog at {masked(self.url)} has schema version {version}; "
                f"this gpuprov expects {SCHEMA_VERSION}",
                hint="point GPUPROV_DATABASE_URL at a new database, or upgrade gpuprov",
            )
        self._ready = True

    # -- writing -------------------------------------------------------------------
    def engine(self) -> Engine:
        if self._engine is None:
            from sqlalchemy import event
            from sqlmodel import create_engine

            if self._path is not None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
            try:
                args = {"timeout": BUSY_TIMEOUT_S} if self.url.startswith("sqlite") else {}
                engine = create_engine(self.url, connect_args=args)
            except Exception as exc:  # bad URL, missing driver: one clear line
                raise StoreError(f"cannot use database URL {masked(self.url)!r}: {first_line(exc, self.url)}") from exc
            if engine.dialect.name == "sqlite":

                @event.listens_for(engine, "connect")
                def _fk_on(dbapi_con: Any, _record: Any) -> None:
                    dbapi_con.execute("PRAGMA foreign_keys=ON")

            self._engine = engine
        return self._engine

    def _add_columns(self) -> None:
        """The columns of ADDED_COLUMNS that an older schema's tables lack (NULL in old rows)."""
        from sqlalchemy import inspect, text

        with self.engine().begin() as con:
            present = inspect(con)
            for table, column, kind in ADDED_COLUMNS:
                if column not in {c["name"] for c in present.get_columns(table)}:
                    con.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}"))

    def _create_schema(self, upgrade_from: str | None = None) -> None:
        from sqlalchemy.exc import SQLAlchemyError
        from sqlmodel import Session, SQLModel

        from gpuprov.store import tables

        for attempt in range(3):
            try:
                SQLModel.metadata.create_all(self.engine())
                if upgrade_from is not None:
                    self._add_columns()
                with Session(self.engine()) as session:
                    row = session.get(tables.MetaRow, "schema_version")
                    if row is None:
                        session.add(tables.MetaRow(key="schema_version", value=SCHEMA_VERSION))
                    elif upgrade_from is not None and row.value == upgrade_from:
                        row.value = SCHEMA_VERSION
                    session.commit()
                return
            except SQLAlchemyError as exc:
                # another process may be creating the same schema right now: look again
                try:
                    now = self._schema_version()
                except StoreError:
                    now = None
                if now == SCHEMA_VERSION and upgrade_from is None:
                    return  # the other one finished it
                if attempt < 2 and now in (SCHEMA_VERSION, None):
                    import time

                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise StoreError(
                    f"cannot create the catalog schema at {masked(self.url)}: {first_line(exc, self.url)}"
                ) from exc
