"""Planned against billed, hour by hour, every dollar of the difference under one cause (pure).

Planned, for each hour a plan was in force: its slot's instances (``PlanDocument.placements``:
on-demand, spot, and the reserved instances each workload uses) at the unit price the plan was
made with; a held commitment it fills (a reservation, committed use) prices the instances it
covers at its own rate and its idle part as an hourly line; a reservation the plan buys, its
idle part likewise. What the plan's ``slot_usd`` holds beyond these (a Savings Plan's coverage) is
one line, ``unitemized_plan_cost``.

Billed: the fleet's charges (gpuprov-tagged) spread over the hours their charge period covers,
summed per resource and hour; a resource-hour's presence is its consumed hours (1 for an hour
charged in full, 0.3 for 18 minutes). In-scope commitments' unused rows and purchases.

Matching, per hour, cloud, region, instance type, workload and market (the market gpuprov
launched it as, from its tag): billed resources and planned instances are paired cheapest with
cheapest. A pair's difference splits into the price (billed − presence × planned unit: under
``spot_price_difference`` for spot, ``unbought_reservations`` for a reserved instance billed
without a commitment, ``price_change`` otherwise) and the absence ((presence − 1) × planned unit:
``fleet_short_of_plan``). A billed resource without a planned partner is ``off_plan_instances``;
a planned instance without a billed one ``fleet_short_of_plan``; an idle commitment part is
``commitment_unused`` (billed unused rows, less the idle part the plan expected; for a reservation
the bill shows no sign of having been bought, the expected idle part goes to
``unbought_reservations``); a tagged charge that is no instance hour (a disk, an address)
``other_fleet_charges``. Hours of a cloud the imported bills do not cover are left out on both
sides. The causes add up to effective − planned exactly, by construction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from gpuprov.billing.charges import Charge
from gpuprov.billing.timeline import Span, plan_at
from gpuprov.plandoc import PlanDocument

HOUR = timedelta(hours=1)
ZERO = Decimal(0)
CAUSES = (
    "price_change",
    "spot_price_difference",
    "off_plan_instances",
    "unbought_reservations",
    "commitment_unused",
    "fleet_short_of_plan",
    "other_fleet_charges",
    "commitment_purchases",
    "unitemized_plan_cost",
)
HOUR_UNITS = frozenset({"hour", "hours", "hr", "hrs", "h"})
COMMITMENTS = "(commitments)"


@dataclass(frozen=True)
class Line:
    """One amount of one hour: planned, or billed (billed, effective and list cost), under a cause."""

    hour: datetime
    plan_id: str | None
    workload: str
    market: str
    cause: str
    planned: Decimal = ZERO
    billed: Decimal = ZERO
    effective: Decimal = ZERO
    list_cost: Decimal = ZERO

    @property
    def difference(self) -> Decimal:
        return self.effective - self.planned


@dataclass
class _Use:
    """One resource in one hour, its charges summed."""

    cloud: str
    region: str
    instance_type: str | None
    workload: str
    market: str
    kind: str
    presence: Decimal = ZERO
    billed: Decimal = ZERO
    effective: Decimal = ZERO
    list_cost: Decimal = ZERO
    committed: bool = False

    @property
    def unit(self) -> Decimal:
        return self.effective / self.presence if self.presence else self.effective


@dataclass
class Inputs:
    hours: Sequence[datetime]  # the hour starts of the range (UTC)
    timeline: Sequence[Span]
    plans: Mapping[str, PlanDocument]
    fleet: Sequence[Charge]  # the fleet's instance and tagged charges
    commitments: Sequence[Charge]  # unused rows and purchases of the commitments in scope
    covered: Callable[[str, datetime], bool]  # whether a cloud's bill covers an hour
    notes: list[str] = field(default_factory=list)


def hour_of(when: datetime) -> datetime:
    return when.replace(minute=0, second=0, microsecond=0)


def spread(c: Charge) -> Iterator[tuple[datetime, Decimal, Decimal]]:
    """(hour, share of the charge, hours of its period in that hour) for each hour it covers."""
    seconds = Decimal(int((c.end - c.start).total_seconds()))
    if seconds <= 0:
        yield hour_of(c.start), Decimal(1), ZERO
        return
    h = hour_of(c.start)
    while h < c.end:
        overlap = Decimal(int((min(c.end, h + HOUR) - max(c.start, h)).total_seconds()))
        if overlap > 0:
            yield h, overlap / seconds, overlap / 3600
        h += HOUR


def _market(c: Charge) -> str:
    if c.market:
        return c.market
    if c.pricing_category == "Dynamic":
        return "spot"
    return "on_demand"


def _uses(fleet: Sequence[Charge], wanted: set[datetime]) -> dict[datetime, dict[str, _Use]]:
    out: dict[datetime, dict[str, _Use]] = defaultdict(dict)
    for c in fleet:
        rid = c.resource_id or f"row {c.source_row}"
        for h, share, hours in spread(c):
            if h not in wanted:
                continue
            u = out[h].get(rid)
            if u is None:
                u = out[h][rid] = _Use(
                    cloud=c.cloud or "",
                    region=c.region or "",
                    instance_type=c.instance_type,
                    workload=c.workload or "",
                    market=_market(c),
                    kind=c.kind,
                )
            if c.kind == "instance" and u.instance_type is None:
                u.instance_type, u.kind = c.instance_type, "instance"
            u.billed += c.billed * share
            u.effective += c.effective * share
            u.list_cost += (c.list_cost or ZERO) * share
            unit = (c.consumed_unit or "").strip().lower()
            here = c.consumed_quantity * share if c.consumed_quantity is not None and unit in HOUR_UNITS else hours
            u.presence = min(Decimal(1), max(u.presence, here))
            u.committed = u.committed or c.pricing_category == "Committed"
    return out


Key = tuple[str, str, str, str, str]  # cloud, region, instance type, workload, market


def _planned(
    doc: PlanDocument, hour: datetime, covered: Callable[[str, datetime], bool]
) -> tuple[dict[Key, list[Decimal]], list[tuple[str, str, str, Decimal, str]], Decimal | None]:
    """The plan's instances this hour by key (one unit price per instance), its idle commitment
    lines (cloud, region, instance type, USD, "held" | "reservation"), and what its slot costs
    beyond them (None where some of its clouds are not covered)."""
    slot = doc.slot_at(hour)
    units: dict[Key, list[Decimal]] = defaultdict(list)
    itemized = ZERO
    all_covered = True
    for a in doc.placements():
        n = a.instances_by_slot[slot]
        if not covered(a.cloud, hour):
            all_covered = all_covered and n == 0
            continue
        units[(a.cloud, a.region, a.instance_type, a.workload, a.market)] += [a.unit_hourly_usd] * n
        itemized += a.unit_hourly_usd * n
    idle: list[tuple[str, str, str, Decimal, str]] = []
    for r in doc.reservations:
        if not covered(r.cloud, hour):
            all_covered = False
            continue
        used = sum(
            p.instances_by_slot[slot]
            for p in doc.placements()
            if p.market == r.market and p.site == r.site and p.region == r.region
        )
        amount = r.unit_hourly_usd * max(0, r.instances - used)
        idle.append((r.cloud, r.region, r.instance_type, amount, "reservation"))
        itemized += amount
    specs = {h.id: h for h in doc.request.held}
    for held in doc.commitments.held:
        spec = specs.get(held.id)
        if spec is None or not spec.starts <= hour < spec.ends:
            continue
        if not covered(held.cloud, hour):
            all_covered = False
            continue
        if held.count is None or spec.instance_type is None or spec.region is None:
            continue  # a Savings Plan: in the unitemized part
        k = int(held.used_by_slot[slot])
        unit = spec.hourly_usd
        for key in sorted(units):
            cloud, region, itype, _w, market = key
            if k <= 0:
                break
            if (cloud, region, itype, market) != (held.cloud, spec.region, spec.instance_type, "on_demand"):
                continue
            prices = sorted(units[key], reverse=True)
            swap = min(k, len(prices))
            itemized -= sum(prices[:swap], ZERO) - unit * swap
            units[key] = prices[swap:] + [unit] * swap
            k -= swap
        idle_n = held.count - int(held.used_by_slot[slot])
        idle.append((held.cloud, spec.region, spec.instance_type, unit * max(0, idle_n), "held"))
        itemized += unit * max(0, idle_n)
    rest = doc.costs.slot_usd[slot] - itemized if all_covered else None
    return units, idle, rest


def reconcile(inp: Inputs) -> list[Line]:
    hours = set(inp.hours)
    uses = _uses(inp.fleet, hours)
    unused: dict[datetime, list[tuple[Charge, Decimal]]] = defaultdict(list)
    for c in inp.commitments:
        for h, share, _hours in spread(c):
            if h in hours:
                unused[h].append((c, share))
    lines: list[Line] = []
    for hour in sorted(hours):
        pid = plan_at(inp.timeline, hour)
        doc = inp.plans.get(pid) if pid else None
        here = {rid: u for rid, u in uses.get(hour, {}).items() if inp.covered(u.cloud, hour)}
        for c, share in unused.get(hour, ()):
            if not inp.covered(c.cloud or "", hour):
                continue
            cause = "commitment_purchases" if c.charge_category == "Purchase" else "commitment_unused"
            lines.append(
                Line(
                    hour,
                    pid,
                    COMMITMENTS,
                    "commitment",
                    cause,
                    billed=c.billed * share,
                    effective=c.effective * share,
                    list_cost=(c.list_cost or ZERO) * share,
                )
            )
        if doc is None:
            for u in here.values():
                cause = "off_plan_instances" if u.kind == "instance" else "other_fleet_charges"
                lines.append(_billed(hour, pid, u, cause))
            continue
        units, idle, rest = _planned(doc, hour, inp.covered)
        by_key: dict[Key, list[_Use]] = defaultdict(list)
        for u in here.values():
            if u.kind != "instance" or u.instance_type is None:
                lines.append(_billed(hour, pid, u, "other_fleet_charges"))
                continue
            by_key[(u.cloud, u.region, u.instance_type, u.workload, u.market)].append(u)
        for key in sorted(set(units) | set(by_key)):
            planned = sorted(units.get(key, []))
            billed = sorted(by_key.get(key, []), key=lambda u: (u.unit, u.effective))
            for i, u in enumerate(billed):
                if i >= len(planned):
                    lines.append(_billed(hour, pid, u, "off_plan_instances"))
                    continue
                unit = planned[i]
                if u.market == "spot":
                    cause = "spot_price_difference"
                elif u.market.startswith("reserved") and not u.committed:
                    cause = "unbought_reservations"
                else:
                    cause = "price_change"
                lines.append(_billed(hour, pid, u, cause, planned=u.presence * unit))
                if u.presence < 1:
                    lines.append(
                        Line(hour, pid, key[3], key[4], "fleet_short_of_plan", planned=(1 - u.presence) * unit)
                    )
            for unit in planned[len(billed) :]:
                lines.append(Line(hour, pid, key[3], key[4], "fleet_short_of_plan", planned=unit))
        bought = _bought(here.values(), unused.get(hour, ()))
        for cloud, region, itype, amount, what in idle:
            if not amount:
                continue
            sign = (cloud, region, itype) in bought or (cloud, region, None) in bought
            cause = "commitment_unused" if what == "held" or sign else "unbought_reservations"
            lines.append(Line(hour, pid, COMMITMENTS, "commitment", cause, planned=amount))
        if rest:
            lines.append(Line(hour, pid, COMMITMENTS, "commitment", "unitemized_plan_cost", planned=rest))
    return lines


def _billed(hour: datetime, pid: str | None, u: _Use, cause: str, planned: Decimal = ZERO) -> Line:
    return Line(hour, pid, u.workload or "(untagged)", u.market, cause, planned, u.billed, u.effective, u.list_cost)


def _bought(uses: Iterable[_Use], unused: Sequence[tuple[Charge, Decimal]]) -> set[tuple[str, str, str | None]]:
    """Where this hour's bill shows a commitment bought: committed instance charges, unused rows."""
    out: set[tuple[str, str, str | None]] = set()
    for u in uses:
        if u.committed and u.instance_type:
            out.add((u.cloud, u.region, u.instance_type))
    for c, _share in unused:
        out.add((c.cloud or "", c.region or "", None))
    return out
