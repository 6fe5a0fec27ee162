"""What a fleet runs against what its plans want: the computing behind ``gpuprov status``.

The command reads the clouds (or the database's mirror), the saved plans and the commitments
held, calls ``summarize`` and renders the ``Status`` it returns; nothing here calls a cloud or
opens a store (the catalog's on-demand prices, needed only to value a held Savings Plan, come
through a callable).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuprov.errors import PlanFormatError, UsageError
from gpuprov.models import InstanceHandle, Market, WorkloadSite
from gpuprov.plandoc import PlanDocument

if TYPE_CHECKING:
    from commitments.records import Commitment

# what values a held Savings Plan: the catalog's cheapest on-demand price per (cloud, region,
# instance type), and the Savings Plans discounts by kind_term and family
OnDemandRates = tuple[Mapping[tuple[str, str, str], Decimal], Mapping[str, Mapping[str, Decimal]]]


@dataclass(frozen=True)
class Group:
    """The instances of one plan in one pool serving one workload (and with the same tag problem)."""

    plan: str
    site: WorkloadSite
    instances: int
    planned: int | None  # what the plan wants there in the current slot; None: the plan is not known
    hourly_usd: Decimal | None  # the instances at what they bill; None where that is not known
    problem: str | None  # gpuprov tags that did not parse
    note: str | None = None  # e.g. reserved instances billed on demand: their reservation is not bought


@dataclass(frozen=True)
class Status:
    instances: int
    groups: tuple[Group, ...]
    commitments: tuple[dict[str, Any], ...]  # commitments.usage rows, money as decimal strings

    @property
    def hourly_usd(self) -> Decimal:
        return sum((g.hourly_usd or Decimal(0) for g in self.groups), Decimal(0))


def plans_of(handles: Sequence[InstanceHandle], get: Callable[[str], PlanDocument]) -> dict[str, PlanDocument | None]:
    """The saved plans the instances name, by id in order; None for one that is gone or unreadable."""
    out: dict[str, PlanDocument | None] = {}
    for pid in sorted({h.plan_id for h in handles if h.plan_id}):
        try:
            out[pid] = get(pid)
        except (UsageError, PlanFormatError):
            out[pid] = None
    return out


def groups(
    handles: Sequence[InstanceHandle], plans: Mapping[str, PlanDocument | None], now: datetime
) -> tuple[Group, ...]:
    """The instances by plan, pool, workload and tag problem (in that order), each against what its
    plan wants in the slot ``now`` falls in."""
    from provisioner.apply import wanted

    found: dict[tuple[str, WorkloadSite, str], list[InstanceHandle]] = {}
    for h in handles:
        found.setdefault((h.plan_id, h.pool.workload_site, h.problem or ""), []).append(h)
    wants = {pid: wanted(doc, doc.slot_at(now)) for pid, doc in plans.items() if doc is not None}
    out = []
    for (pid, site, problem), hs in sorted(found.items()):
        price, want = None, None
        if pid in wants and not problem:
            w = wants[pid].get(hs[0].pool)
            if w is not None:
                price, want = w.unit_hourly_usd, w.count
        out.append(Group(pid, site, len(hs), want, None if price is None else price * len(hs), problem or None))
    return tuple(out)


def commitment_usage(
    held: Sequence[Commitment],
    handles: Sequence[InstanceHandle],
    now: datetime,
    on_demand: Callable[[], OnDemandRates],
) -> list[dict[str, Any]]:
    """Per held commitment active now, what the running fleet (its instances that are not spot)
    uses of it and the cost of the unused part (commitments/usage.py); money as decimal strings.
    Empty when none is active; ``on_demand`` is called only when a Savings Plan is to be valued."""
    from commitments.records import Kind
    from commitments.usage import Running, usage

    active = [c for c in held if c.active(now)]
    if not active:
        return []
    running = [
        Running(h.cloud.value, h.region, h.zone, h.instance_type) for h in handles if h.market is not Market.SPOT
    ]
    prices: Mapping[tuple[str, str, str], Decimal] = {}
    discounts: Mapping[str, Mapping[str, Decimal]] = {}
    if any(c.kind is Kind.SAVINGS_PLAN for c in active) and running:
        prices, discounts = on_demand()
    rows = usage(active, running, prices, now, discounts)
    for r in rows:
        for name in ("used", "utilization", "unused_hourly_usd"):
            r[name] = str(r[name]) if isinstance(r[name], Decimal) else r[name]
    return rows


def summarize(
    handles: Sequence[InstanceHandle],
    plans: Mapping[str, PlanDocument | None],
    now: datetime,
    held: Callable[[], Sequence[Commitment]],
    on_demand: Callable[[], OnDemandRates],
) -> Status:
    """``gpuprov status``: the groups against their plans and the commitments' use, at ``now``."""
    records = held()
    found = billed(groups(handles, plans, now), plans, records, now)
    return Status(len(handles), found, tuple(commitment_usage(records, handles, now, on_demand)))


def billed(
    found: Sequence[Group], plans: Mapping[str, PlanDocument | None], held: Sequence[Commitment], now: datetime
) -> tuple[Group, ...]:
    """Reserved instances bill at the reservation's rate only for the part of it that is held
    (commitments/purchase.py); the rest are on-demand instances and are priced and noted so."""
    from dataclasses import replace

    from commitments.purchase import to_buy

    missing: dict[tuple[str, Any], int] = {}
    reservations: dict[tuple[str, Any], Any] = {}
    for pid, doc in plans.items():
        if doc is None or not doc.reservations:
            continue
        for b in to_buy(doc, held, now):
            missing[(pid, b.reservation.site)] = b.missing
        for r in doc.reservations:
            reservations[(pid, r.site)] = r
    left = {k: r.instances - missing.get(k, 0) for k, r in reservations.items()}  # held, not yet counted
    out = []
    for g in found:
        key = (g.plan, g.site.site)
        res = reservations.get(key)
        if res is None or g.problem or not missing.get(key):
            out.append(g)
            continue
        covered = min(g.instances, max(0, left[key]))
        left[key] -= covered
        extra = g.instances - covered
        if not extra:
            out.append(g)
            continue
        od = res.on_demand_unit_hourly_usd
        price = None if od is None else res.unit_hourly_usd * covered + od * extra
        out.append(
            replace(
                g,
                hourly_usd=price,
                note=f"{extra} billed on demand: reservation not bought"
                + ("" if od is not None else " (on-demand price unknown)"),
            )
        )
    return tuple(out)
