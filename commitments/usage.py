"""How much of each held commitment the running fleet uses now, and what the unused part costs.

``usage(records, running, prices, now, discounts)`` is pure. Only commitments active at ``now``
are shown. Each running instance that is not spot is billed against at most one commitment:

1. Counted kinds (reserved instances, committed use, reservations, capacity reservations) take
   running instances of their type in their region (their zone, if zonal), zonal ones first,
   then by id; used = min(count, those instances); unused cost = (count − used) × hourly_usd.
2. Savings Plans then cover what is left, EC2 Instance plans (their family in their region)
   before Compute plans, each in id order: an instance's usage costs its on-demand price ×
   (1 − the plan's discount) at the plan's rate, and a plan pays for covered usage up to its
   $/h; past that, the rest of the instance is billed on-demand (and may fall to the next
   plan). used = the $/h the plan covers; unused cost = its $/h − used. The discount is the
   record's own, else the table given (``compute_1y`` … by family, ``*`` for any); without one
   the plan's use is unknown and said so. An instance without an on-demand price is not covered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from commitments.records import Commitment, family_of


@dataclass(frozen=True)
class Running:
    cloud: str
    region: str
    zone: str | None
    instance_type: str


def plan_kind(c: Commitment) -> str:
    return ("compute" if c.family is None else "ec2_instance") + "_" + (c.term or "1y")


def _share(c: Commitment, discounts: Mapping[str, Mapping[str, Decimal]], itype: str) -> Decimal | None:
    if c.discount is not None:
        return c.discount
    table = discounts.get(plan_kind(c), {})
    return table.get(family_of(itype), table.get("*"))


def usage(
    records: Sequence[Commitment],
    running: Sequence[Running],
    prices: Mapping[tuple[str, str, str], Decimal],
    now: datetime,
    discounts: Mapping[str, Mapping[str, Decimal]] | None = None,
) -> list[dict[str, Any]]:
    """One row per active commitment: id, kind, scope, size, used, utilization, unused_hourly_usd, note."""
    table = discounts or {}
    left = [Decimal(1) for _ in running]  # the share of each instance not yet billed to a commitment
    active = [c for c in records if c.active(now)]
    rows: dict[str, dict[str, Any]] = {}
    for c in sorted((c for c in active if c.kind.counted), key=lambda c: (c.zone is None, c.id)):
        count = c.count or 0
        taken = 0
        for i, r in enumerate(running):
            if taken >= count:
                break
            if left[i] == 1 and c.covers(r.cloud, r.region, r.zone, r.instance_type):
                left[i] = Decimal(0)
                taken += 1
        rows[c.id] = _row(
            c, f"{count} inst.", taken, Decimal(taken) / count if count else Decimal(0), (count - taken) * c.hourly_usd
        )
    for c in sorted((c for c in active if not c.kind.counted), key=lambda c: (c.family is None, c.id)):
        budget = c.usd_per_hour or Decimal(0)
        unknown = False
        for i, r in enumerate(running):
            if budget <= 0:
                break
            if left[i] <= 0 or not c.covers(r.cloud, r.region, r.zone, r.instance_type):
                continue
            share = _share(c, table, r.instance_type)
            price = prices.get((r.cloud, r.region, r.instance_type))
            if share is None or price is None:
                unknown = unknown or share is None
                continue
            rate = price * (1 - share)
            take = min(rate * left[i], budget)
            left[i] -= take / rate if rate > 0 else left[i]
            budget -= take
        size = c.usd_per_hour or Decimal(0)
        used = size - budget
        row = _row(c, f"${size}/h", used, used / size if size else Decimal(0), budget)
        if unknown:
            row["note"] = "no discount known for some covered usage (gpuprov commitments rates refresh)"
        rows[c.id] = row
    return [rows[c.id] for c in active if c.id in rows]


def _row(c: Commitment, size: str, used: Any, utilization: Decimal, unused: Decimal) -> dict[str, Any]:
    return {
        "id": c.id,
        "kind": c.kind.value,
        "scope": c.scope,
        "size": size,
        "used": used,
        "used_unit": "instances" if c.kind.counted else "usd_per_hour",  # a Savings Plan: USD/h at its rates
        "utilization": utilization,
        "unused_hourly_usd": unused,
        "note": None,
    }
