"""Table rows of the local catalog (SQLModel). Kept apart from the value types in models.py.

Money is stored as a decimal string: SQLite would store a Decimal column as REAL and lose
exactness. Datetimes are stored timezone-aware (sqlmodel rejects naive ones at flush).
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from gpuprov.store.database import SCHEMA_VERSION as _DATABASE_SCHEMA

SCHEMA_VERSION = int(_DATABASE_SCHEMA)  # one version: the store's (database.py)


class MetaRow(SQLModel, table=True):
    __tablename__ = "gpuprov_meta"
    key: str = Field(primary_key=True)
    value: str


class SnapshotRow(SQLModel, table=True):
    __tablename__ = "gpuprov_snapshot"
    id: int | None = Field(default=None, primary_key=True)
    source: str
    cloud: str = Field(index=True)
    fetched_at: datetime
    created_at: datetime
    row_count: int = 0
    current: bool = Field(default=False, index=True)
    note: str = ""


class OfferRow(SQLModel, table=True):
    __tablename__ = "gpuprov_offer"
    id: int | None = Field(default=None, primary_key=True)
    snapshot_id: int = Field(foreign_key="gpuprov_snapshot.id", index=True)
    cloud: str
    region: str
    zone: str | None = None
    instance_type: str
    gpu: str = Field(index=True)
    gpus_per_instance: int
    gpu_memory_gib: int
    vcpus: int
    memory_gib: str
    interconnect: str | None = None
    market: str
    hourly_usd: str
    currency: str = "USD"
    gpu_fraction: str | None = None  # a share of one GPU, as a decimal string (schema 6)
    as_of: str | None = None  # when the source row was priced, ISO 8601 UTC (schema 6)


class PlanRow(SQLModel, table=True):
    """A saved plan: the JSON document ``gpuprov plan --output json`` prints, by content id."""

    __tablename__ = "gpuprov_plan"
    id: str = Field(primary_key=True)
    created_at: datetime
    gpu: str
    gpus: int
    policy: str
    hourly_usd: str
    document: str


class JournalRow(SQLModel, table=True):
    """One cloud call, written before it is made and completed after (crash safety)."""

    __tablename__ = "gpuprov_journal"
    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(index=True)
    plan_id: str
    op: str  # launch | terminate
    token: str = Field(index=True)
    pool: str  # JSON list: cloud, region, zone, instance type, market, workload
    instance_id: str | None = None
    state: str = "pending"  # pending | done | failed
    error: str | None = None
    started_at: datetime
    finished_at: datetime | None = None


class UnavailableRow(SQLModel, table=True):
    """A pool the cloud just refused for capacity or quota, not to be planned on until ``until``."""

    __tablename__ = "gpuprov_unavailable"
    cloud: str = Field(primary_key=True)
    zone: str = Field(primary_key=True)
    instance_type: str = Field(primary_key=True)
    market: str = Field(primary_key=True)
    until: datetime
    reason: str


class InstanceRow(SQLModel, table=True):
    """The database's mirror of what ``describe`` last returned for an owner."""

    __tablename__ = "gpuprov_instance"
    instance_id: str = Field(primary_key=True)
    cloud: str = Field(primary_key=True)
    owner: str = Field(index=True)
    plan_id: str
    token: str
    region: str
    zone: str | None = None
    instance_type: str
    market: str
    workload: str
    state: str
    seen_at: datetime


class LeaseRow(SQLModel, table=True):
    """One actor at a time: who holds a fleet's lease, until when, and a fencing token that
    grows each time the lease changes hands."""

    __tablename__ = "gpuprov_lease"
    name: str = Field(primary_key=True)
    holder: str
    expires_at: datetime
    token: int = 0


class FleetRow(SQLModel, table=True):
    """The plan a fleet follows now (the rebalancer adopts new ones)."""

    __tablename__ = "gpuprov_fleet"
    owner: str = Field(primary_key=True)
    plan_id: str
    adopted_at: datetime


class PassRow(SQLModel, table=True):
    """One rebalancing pass, whatever it decided."""

    __tablename__ = "gpuprov_pass"
    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(index=True)
    started_at: datetime
    finished_at: datetime
    holder: str
    fencing_token: int
    snapshots: str  # JSON list of snapshot ids
    decision: str  # adopt | keep | skipped | failed
    reason: str
    plan_before: str | None = None
    plan_after: str | None = None
    launched: int = 0
    terminated: int = 0
    hourly_before_usd: str = "0"
    hourly_after_usd: str = "0"
    expected_saving_usd: str = "0"


class CommitmentRow(SQLModel, table=True):
    """A commitment the team holds (commitments/records.py): reservations, committed use,
    Savings Plans, capacity reservations; imported from a file or discovered from a cloud."""

    __tablename__ = "gpuprov_commitment"
    id: str = Field(primary_key=True)
    cloud: str
    kind: str
    instance_type: str | None = None
    family: str | None = None
    region: str | None = None
    zone: str | None = None
    count: int | None = None
    usd_per_hour: str | None = None
    hourly_usd: str = "0"
    term: str | None = None
    discount: str | None = None
    starts: datetime
    ends: datetime
    source: str = "file"
    added_at: datetime


class PriceChangeRow(SQLModel, table=True):
    """One imported price change: an offer key's market at a time, a new price or gone (None)."""

    __tablename__ = "gpuprov_price_change"
    id: int | None = Field(default=None, primary_key=True)
    cloud: str = Field(index=True)
    kind: str  # gcp-accelerator (accelerator, count, zone) | instance (instance type, region, accelerator)
    key_a: str
    key_b: str
    key_c: str
    market: str
    at: datetime = Field(index=True)
    price: str | None = None  # decimal string; None: the offer's market went away
    event: str  # new | price | removed
    source: str  # format:file name
    imported_at: datetime


# schema 7: the bill tables (gpuprov_bill_import, gpuprov_bill_charge) live beside their repository
from gpuprov.store.billing_tables import BillChargeRow, BillImportRow  # noqa: E402, F401
