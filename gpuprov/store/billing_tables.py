"""The bill tables (store schema 7): one row per import, one per charge kept (see ``billing``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger
from sqlmodel import Field, SQLModel


class BillImportRow(SQLModel, table=True):
    __tablename__ = "gpuprov_bill_import"
    id: int | None = Field(default=None, primary_key=True)
    source: str
    sha256: str
    focus_version: str
    format: str
    imported_at: datetime
    rows_read: int = 0
    rows_stored: int = 0
    billed_usd: str = "0"  # over every row of the file, kept or not
    effective_usd: str = "0"
    list_usd: str = "0"
    coverage: str = "[]"  # JSON: [[provider, cloud, first start ms, last end ms], ...]
    notes: str = "[]"  # JSON list of conformance notes
    replaced: int = 0  # charges of earlier imports this one replaced


class BillChargeRow(SQLModel, table=True):
    __tablename__ = "gpuprov_bill_charge"
    id: int | None = Field(default=None, primary_key=True)
    import_id: int = Field(index=True)
    source_row: int
    kind: str  # instance | tagged | commitment | capacity
    provider: str | None = None
    cloud: str | None = None
    billing_account_id: str | None = None
    sub_account_id: str | None = None
    billing_period_start_ms: int | None = Field(default=None, sa_type=BigInteger)  # epoch milliseconds
    charge_category: str
    charge_class: str | None = None
    charge_frequency: str | None = None
    pricing_category: str | None = None
    start_ms: int = Field(index=True, sa_type=BigInteger)
    end_ms: int = Field(sa_type=BigInteger)
    resource_id: str | None = None
    resource_type: str | None = None
    service_category: str | None = None
    sku_id: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    billed: str
    effective: str
    list_cost: str | None = None
    contracted: str | None = None
    pricing_quantity: str | None = None
    pricing_unit: str | None = None
    consumed_quantity: str | None = None
    consumed_unit: str | None = None
    commitment_id: str | None = Field(default=None, index=True)
    commitment_status: str | None = None
    commitment_type: str | None = None
    commitment_category: str | None = None
    commitment_quantity: str | None = None
    commitment_unit: str | None = None
    capacity_reservation_id: str | None = None
    capacity_reservation_status: str | None = None
    owner: str | None = Field(default=None, index=True)
    plan_id: str | None = None
    workload: str | None = None
    market: str | None = None
    tag_problem: str | None = None
