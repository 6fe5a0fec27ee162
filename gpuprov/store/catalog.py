"""The price catalog: snapshots of offers, one current snapshot per cloud.

A refresh or import is one transaction: the new snapshot becomes current only once all
its rows are in.
"""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from gpuprov.errors import StoreError, UsageError
from gpuprov.models import Cloud, Market, Offer, SnapshotInfo
from gpuprov.store.database import Database, first_line, parse_time

OFFER_COLUMNS = (
    "cloud",
    "region",
    "zone",
    "instance_type",
    "gpu",
    "gpus_per_instance",
    "gpu_memory_gib",
    "vcpus",
    "memory_gib",
    "market",
    "hourly_usd",
    "interconnect",
    "currency",
    "gpu_fraction",
    "as_of",
)
SNAPSHOT_COLUMNS = ("id", "source", "cloud", "fetched_at", "row_count", "current")


def offer_from_row(row: Sequence[Any]) -> Offer:
    (cloud, region, zone, itype, gpu, gpi, gmem, vcpus, mem, market, price, ic, cur, frac, as_of) = row
    return Offer(
        cloud=Cloud(cloud),
        region=region,
        zone=zone or None,
        instance_type=itype,
        gpu=gpu,
        gpus_per_instance=int(gpi),
        gpu_memory_gib=int(gmem),
        vcpus=int(vcpus),
        memory_gib=Decimal(mem),
        market=Market(market),
        hourly_usd=Decimal(price),
        interconnect=ic or None,
        currency=cur,
        gpu_fraction=Decimal(frac) if frac else None,
        as_of=parse_time(as_of) if as_of else None,
    )


def offer_to_row(offer: Offer, snapshot_id: int) -> dict[str, Any]:
    return {
        "snapshot_id": snapshot_id,
        "cloud": offer.cloud.value,
        "region": offer.region,
        "zone": offer.zone,
        "instance_type": offer.instance_type,
        "gpu": offer.gpu,
        "gpus_per_instance": offer.gpus_per_instance,
        "gpu_memory_gib": offer.gpu_memory_gib,
        "vcpus": offer.vcpus,
        "memory_gib": str(offer.memory_gib),
        "market": offer.market.value,
        "hourly_usd": str(offer.hourly_usd),
        "interconnect": offer.interconnect,
        "currency": offer.currency,
        "gpu_fraction": None if offer.gpu_fraction is None else str(offer.gpu_fraction),
        "as_of": None if offer.as_of is None else offer.as_of.astimezone(UTC).isoformat(),
    }


def _in_clause(name: str, values: Collection[str], params: dict[str, Any]) -> str:
    keys = []
    for i, value in enumerate(sorted(values)):
        key = f"{name}{i}"
        params[key] = value
        keys.append(f":{key}")
    return f"({', '.join(keys)})"


BATCH_ROWS = 5000  # offers per INSERT of a streamed import


class SnapshotWriter:
    """New snapshots filled a batch at a time inside one open transaction (``Catalog.writing``).

    Offers go in as they come (``add``); a snapshot row per cloud is made at the cloud's first
    offer and becomes current only at ``finish``. Nothing is held but the batch being filled,
    so a file of any size can be stored; if anything fails before the transaction commits,
    nothing at all is stored.
    """

    def __init__(self, con: Any, source: str, fetched_at: datetime, batch_rows: int = BATCH_ROWS) -> None:
        from gpuprov.store import tables

        self._con = con
        self._source = source
        self._fetched_at = fetched_at.astimezone(UTC)
        self._batch_rows = batch_rows
        self._batch: list[dict[str, Any]] = []
        self._snap_t = tables.SnapshotRow.__table__  # type: ignore[attr-defined]
        self._offer_t = tables.OfferRow.__table__  # type: ignore[attr-defined]
        self.snapshot_ids: dict[Cloud, int] = {}
        self.counts: dict[Cloud, int] = {}  # offers in each new snapshot (added - dropped + carried)

    def add(self, offer: Offer) -> None:
        snap_id = self.snapshot_ids.get(offer.cloud)
        if snap_id is None:
            snap_id = self._new_snapshot(offer.cloud)
        self._batch.append(offer_to_row(offer, snap_id))
        self.counts[offer.cloud] += 1
        if len(self._batch) >= self._batch_rows:
            self.flush()

    def flush(self) -> None:
        from sqlalchemy import insert

        if self._batch:
            self._con.execute(insert(self._offer_t), self._batch)
            self._batch = []

    def _new_snapshot(self, cloud: Cloud) -> int:
        from sqlalchemy import insert

        result = self._con.execute(
            insert(self._snap_t).values(
                source=self._source,
                cloud=cloud.value,
                fetched_at=self._fetched_at,
                created_at=datetime.now(UTC),
                row_count=0,
                current=False,
                note="",
            )
        )
        key = result.inserted_primary_key
        if key is None:
            raise StoreError("the database returned no id for the new snapshot")
        self.snapshot_ids[cloud] = int(key[0])
        self.counts[cloud] = 0
        return self.snapshot_ids[cloud]

    def groups(self, cloud: Cloud, markets: Collection[Market]) -> Iterator[list[tuple[int, Offer]]]:
        """The new snapshot's offers of these markets as (row id, offer), read back in order of
        (region, instance type, GPU, GPUs per instance) and handed out one such group at a time."""
        self.flush()
        if cloud not in self.snapshot_ids or not markets:
            return
        params: dict[str, Any] = {"s": self.snapshot_ids[cloud]}
        cols = ", ".join(OFFER_COLUMNS)
        sql = (
            f"SELECT id, {cols} FROM gpuprov_offer WHERE snapshot_id = :s "
            f"AND market IN {_in_clause('m', [m.value for m in markets], params)} "
            "ORDER BY region, instance_type, gpu, gpus_per_instance, id"
        )
        from sqlalchemy import text

        options = {"stream_results": True, "max_row_buffer": self._batch_rows}
        result = self._con.execute(text(sql), params, execution_options=options)
        group: list[tuple[int, Offer]] = []
        key: tuple[Any, ...] | None = None
        for row in result:
            offer = offer_from_row(row[1:])
            k = (offer.region, offer.instance_type, offer.gpu, offer.gpus_per_instance)
            if k != key and group:
                yield group
                group = []
            key = k
            group.append((int(row[0]), offer))
        if group:
            yield group

    def drop(self, cloud: Cloud, ids: Iterable[int]) -> int:
        """Remove these offers (row ids from ``groups``) from the cloud's new snapshot."""
        from sqlalchemy import delete

        t = self._offer_t
        pending = array("q", ids)
        for start in range(0, len(pending), self._batch_rows):
            chunk = list(pending[start : start + self._batch_rows])
            self._con.execute(delete(t).where(t.c.snapshot_id == self.snapshot_ids[cloud], t.c.id.in_(chunk)))
        self.counts[cloud] -= len(pending)
        return len(pending)

    def stored_markets(self, cloud: Cloud) -> set[Market]:
        """The markets the cloud's new snapshot holds offers of so far."""
        from sqlalchemy import select

        self.flush()
        if cloud not in self.snapshot_ids:
            return set()
        t = self._offer_t
        rows = self._con.execute(select(t.c.market).where(t.c.snapshot_id == self.snapshot_ids[cloud]).distinct())
        return {Market(r[0]) for r in rows}

    def carry_over(self, cloud: Cloud, gpus: Collection[str], except_markets: Collection[Market]) -> tuple[int, int]:
        """Copy the offers of the cloud's current snapshot in other markets than these (and of
        these GPUs) into its new snapshot, in the database: (offers copied, snapshot they came from)."""
        from sqlalchemy import func, insert, literal, select

        self.flush()
        s, t = self._snap_t, self._offer_t
        current = self._con.execute(
            select(s.c.id).where(s.c.cloud == cloud.value, s.c.current.is_(True)).order_by(s.c.id.desc()).limit(1)
        ).scalar()
        if current is None or cloud not in self.snapshot_ids:
            return 0, 0
        where = [t.c.snapshot_id == current, t.c.gpu.in_(sorted(gpus))]
        if except_markets:
            where.append(t.c.market.not_in(sorted(m.value for m in except_markets)))
        n = int(self._con.execute(select(func.count()).select_from(t).where(*where)).scalar() or 0)
        if n:
            cols = [getattr(t.c, c) for c in OFFER_COLUMNS]
            copy = select(literal(self.snapshot_ids[cloud]), *cols).where(*where).order_by(t.c.id)
            self._con.execute(insert(t).from_select(["snapshot_id", *OFFER_COLUMNS], copy))
        self.counts[cloud] += n
        return n, int(current)

    def finish(self, notes: dict[Cloud, str] | None = None) -> list[SnapshotInfo]:
        """Record each new snapshot's row count and make it its cloud's current one; a cloud whose
        new snapshot ended up empty gets none (its current snapshot stays)."""
        from sqlalchemy import delete, update

        self.flush()
        s = self._snap_t
        out = []
        for cloud, snap_id in sorted(self.snapshot_ids.items()):
            if not self.counts[cloud]:
                self._con.execute(delete(s).where(s.c.id == snap_id))
                continue
            note = (notes or {}).get(cloud, "")
            self._con.execute(update(s).where(s.c.cloud == cloud.value).values(current=False))
            self._con.execute(
                update(s).where(s.c.id == snap_id).values(current=True, row_count=self.counts[cloud], note=note)
            )
            out.append(SnapshotInfo(snap_id, self._source, cloud, self._fetched_at, self.counts[cloud], True))
        return out


class Catalog(Database):
    """Snapshots of offers; one current snapshot per cloud."""

    def snapshots(self, current_only: bool = False) -> list[SnapshotInfo]:
        self.ensure_schema()
        sql = f"SELECT {', '.join(SNAPSHOT_COLUMNS)} FROM gpuprov_snapshot"
        if current_only:
            sql += " WHERE current = :yes"
        sql += " ORDER BY id"
        return [
            SnapshotInfo(
                id=int(r["id"]),
                source=r["source"],
                cloud=Cloud(r["cloud"]),
                fetched_at=parse_time(r["fetched_at"]),
                row_count=int(r["row_count"]),
                current=bool(r["current"]),
            )
            for r in self._records(sql, {"yes": True})
        ]

    def activate(self, snapshot_id: int) -> SnapshotInfo:
        """Make an earlier snapshot its cloud's current one again (one transaction)."""
        from sqlalchemy import update

        from gpuprov.store import tables

        found = [s for s in self.snapshots() if s.id == snapshot_id]
        if not found:
            raise UsageError(f"no snapshot {snapshot_id}", hint="gpuprov pricing snapshots lists them")
        snap = found[0]
        t = tables.SnapshotRow.__table__  # type: ignore[attr-defined]
        with self.guarded(f"could not activate snapshot {snapshot_id}"), self.engine().begin() as con:
            con.execute(update(t).where(t.c.cloud == snap.cloud.value).values(current=False))
            con.execute(update(t).where(t.c.id == snapshot_id).values(current=True))
        return SnapshotInfo(snap.id, snap.source, snap.cloud, snap.fetched_at, snap.row_count, True)

    def offers(
        self,
        gpus: Collection[str],
        clouds: Collection[Cloud] | None = None,
        markets: Collection[Market] | None = None,
    ) -> list[Offer]:
        """Offers of the given canonical GPUs from every cloud's current snapshot."""
        self.ensure_schema()
        params: dict[str, Any] = {"yes": True}
        cols = ", ".join(f"o.{c}" for c in OFFER_COLUMNS)
        sql = (
            f"SELECT {cols} FROM gpuprov_offer o JOIN gpuprov_snapshot s ON s.id = o.snapshot_id "
            f"WHERE s.current = :yes AND o.gpu IN {_in_clause('g', gpus, params)}"
        )
        if clouds is not None:
            sql += f" AND o.cloud IN {_in_clause('c', [c.value for c in clouds], params)}"
        if markets is not None:
            sql += f" AND o.market IN {_in_clause('m', [m.value for m in markets], params)}"
        if not gpus or (clouds is not None and not clouds) or (markets is not None and not markets):
            return []
        return [offer_from_row(r) for r in self._rows(sql, params)]

    @contextlib.contextmanager
    def writing(self, source: str, fetched_at: datetime, batch_rows: int = BATCH_ROWS) -> Iterator[SnapshotWriter]:
        """One transaction for snapshots written a batch at a time: it commits when the block ends
        and rolls back, storing nothing, if the block raises."""
        if fetched_at.tzinfo is None:
            raise ValueError("fetched_at must be timezone-aware")
        self.ensure_schema()
        with self.guarded(f"could not store the snapshot from {source}"), self.engine().begin() as con:
            yield SnapshotWriter(con, source, fetched_at, batch_rows)

    def add_snapshot(
        self,
        source: str,
        cloud: Cloud,
        fetched_at: datetime,
        offers: Iterable[Offer],
        note: str = "",
        make_current: bool = True,
    ) -> SnapshotInfo:
        """Store a snapshot and its offers in one transaction; it becomes the cloud's current one."""
        if fetched_at.tzinfo is None:
            raise ValueError("fetched_at must be timezone-aware")
        self.ensure_schema()
        from sqlalchemy import insert, update
        from sqlalchemy.exc import SQLAlchemyError

        from gpuprov.store import tables

        rows = [o for o in offers]
        for o in rows:
            if o.cloud != cloud:
                raise ValueError(f"offer of {o.cloud} in a {cloud} snapshot")
        snap_t = tables.SnapshotRow.__table__  # type: ignore[attr-defined]
        offer_t = tables.OfferRow.__table__  # type: ignore[attr-defined]
        try:
            with self.engine().begin() as con:
                result = con.execute(
                    insert(snap_t).values(
                        source=source,
                        cloud=cloud.value,
                        fetched_at=fetched_at.astimezone(UTC),
                        created_at=datetime.now(UTC),
                        row_count=len(rows),
                        current=False,
                        note=note,
                    )
                )
                key = result.inserted_primary_key
                if key is None:
                    raise StoreError("the database returned no id for the new snapshot")
                snap_id = int(key[0])
                if rows:
                    con.execute(insert(offer_t), [offer_to_row(o, snap_id) for o in rows])
                if make_current:
                    con.execute(update(snap_t).where(snap_t.c.cloud == cloud.value).values(current=False))
                    con.execute(update(snap_t).where(snap_t.c.id == snap_id).values(current=True))
        except SQLAlchemyError as exc:
            raise StoreError(f"could not store the {cloud} snapshot from {source}: {first_line(exc)}") from exc
        return SnapshotInfo(
            id=snap_id, source=source, cloud=cloud, fetched_at=fetched_at, row_count=len(rows), current=make_current
        )

    def places(self) -> set[tuple[str, str, str]]:
        """(cloud, region, instance type) of every offer in the current snapshots."""
        self.ensure_schema()
        rows = self._rows(
            "SELECT DISTINCT o.cloud, o.region, o.instance_type FROM gpuprov_offer o "
            "JOIN gpuprov_snapshot s ON s.id = o.snapshot_id WHERE s.current = :yes",
            {"yes": True},
        )
        return {(str(r[0]), str(r[1]), str(r[2])) for r in rows}
