"""The price catalog: snapshots of offers, one current snapshot per cloud.

A refresh or import is one transaction: the new snapshot becomes current only once all
its rows are in.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
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
)
SNAPSHOT_COLUMNS = ("id", "source", "cloud", "fetched_at", "row_count", "current")


def offer_from_row(row: Sequence[Any]) -> Offer:
    (cloud, region, zone, itype, gpu, gpi, gmem, vcpus, mem, market, price, ic, cur) = row
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
    }


def _in_clause(name: str, values: Collection[str], params: dict[str, Any]) -> str:
    keys = []
    for i, value in enumerate(sorted(values)):
        key = f"{name}{i}"
        params[key] = value
        keys.append(f":{key}")
    return f"({', '.join(keys)})"


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
                id=int(r[0]),
                source=r[1],
                cloud=Cloud(r[2]),
                fetched_at=parse_time(r[3]),
                row_count=int(r[4]),
                current=bool(r[5]),
            )
            for r in self._rows(sql, {"yes": True})
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
