"""The bill report for people (rich tables) and machines (JSON: decimal strings, ISO times)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpuprov.billing.reconcile import CAUSES
from gpuprov.billing.report import Amounts, Report

LABELS = {
    "price_change": "price change (on demand, reserved)",
    "spot_price_difference": "spot price difference",
    "off_plan_instances": "off-plan instances",
    "unbought_reservations": "reservations not bought, billed on demand",
    "commitment_unused": "commitment unused (beyond what the plan expected)",
    "fleet_short_of_plan": "planned instances not billed",
    "other_fleet_charges": "other charges of the fleet (disks, addresses)",
    "commitment_purchases": "commitment purchases (billed, not effective)",
    "unitemized_plan_cost": "plan cost not itemized (Savings Plans)",
}
CENT = Decimal("0.01")
FOUR = Decimal("0.0001")


def usd(value: Decimal) -> str:
    return format(value.quantize(CENT), "f")


def _amounts(a: Amounts) -> dict[str, Any]:
    return {
        "planned_usd": usd(a.planned),
        "billed_usd": usd(a.billed),
        "effective_usd": usd(a.effective),
        "list_usd": usd(a.list_cost),
        "difference_usd": usd(a.difference),
        "causes": {c: usd(a.causes[c]) for c in CAUSES if c in a.causes and a.causes[c].quantize(CENT)},
    }


def as_dict(r: Report) -> dict[str, Any]:
    """Amounts in USD over the report's hours, to the cent; ``difference_usd`` = effective − planned."""
    return {
        "owner": r.owner,
        "plan": r.plan_id,
        "from": r.start.isoformat(),
        "to": r.end.isoformat(),
        "hours": r.hours,
        "by": r.by,
        "totals": _amounts(r.totals),
        "groups": [{"key": k, **_amounts(a)} for k, a in r.groups.items()],
        "commitments": [
            {
                "id": c.id,
                "held_as": c.held_as,
                "type": c.type,
                "used_usd": usd(c.used_usd),
                "unused_usd": usd(c.unused_usd),
                "utilization": None if c.utilization is None else format(c.utilization.quantize(FOUR), "f"),
                "from": c.first.isoformat(),
                "to": c.last.isoformat(),
            }
            for c in r.commitments
        ],
        "unknown_to_fleet": [
            {
                "resource_id": s.resource_id,
                "cloud": s.cloud,
                "instance_type": s.instance_type,
                "plan": s.plan_id,
                "hours": format(s.hours.normalize(), "f"),
                "effective_usd": usd(s.effective_usd),
            }
            for s in r.unknown_to_fleet
        ],
        "missing_from_bill": [
            {
                "instance_id": s.resource_id,
                "cloud": s.cloud,
                "instance_type": s.instance_type,
                "plan": s.plan_id,
                "launched_at": None if s.launched_at is None else s.launched_at.isoformat(),
            }
            for s in r.missing_from_bill
        ],
        "coverage": {c: [[a.isoformat(), b.isoformat()] for a, b in v] for c, v in sorted(r.coverage.items())},
        "notes": r.notes,
    }


def tables(r: Report) -> list[Any]:
    from rich.table import Table

    from gpuprov.render import money

    head = f"fleet {r.owner}" + (f", plan {r.plan_id}" if r.plan_id else "")
    out = []
    t = Table(
        title=f"planned vs billed, {head}: {r.start:%Y-%m-%d %H:%M} to {r.end:%Y-%m-%d %H:%M} UTC ({r.hours:,} h), USD",
        title_justify="left",
    )
    for col in (f"by {r.by}", "planned", "billed", "effective", "list", "effective - planned"):
        t.add_column(col, justify="left" if col.startswith("by") else "right")
    for key, a in r.groups.items():
        t.add_row(key, money(a.planned), money(a.billed), money(a.effective), money(a.list_cost), money(a.difference))
    a = r.totals
    t.add_row("total", money(a.planned), money(a.billed), money(a.effective), money(a.list_cost), money(a.difference))
    out.append(t)
    c = Table(title="effective - planned, by cause (USD)", title_justify="left")
    c.add_column("cause")
    c.add_column("USD", justify="right")
    for cause in CAUSES:
        amount = r.totals.causes.get(cause, Decimal(0))
        if amount.quantize(CENT):
            c.add_row(LABELS[cause], money(amount))
    c.add_row("total", money(r.totals.difference))
    out.append(c)
    if r.commitments:
        u = Table(title="commitment utilization (EffectiveCost of the Used and Unused rows)", title_justify="left")
        for col in ("commitment", "held as", "used $", "unused $", "utilization"):
            u.add_column(col)
        for cu in r.commitments:
            u.add_row(
                cu.id[-60:],
                cu.held_as or "-",
                money(cu.used_usd),
                money(cu.unused_usd),
                "-" if cu.utilization is None else f"{cu.utilization:.1%}",
            )
        out.append(u)
    for title, rows in (
        ("billed instances with the fleet's tags that its journal never launched", r.unknown_to_fleet),
        ("instances the fleet launched that the bill does not show", r.missing_from_bill),
    ):
        if not rows:
            continue
        s = Table(title=f"{len(rows)} {title}", title_justify="left")
        for col in ("instance", "cloud", "type", "plan", "hours", "effective $"):
            s.add_column(col)
        for x in rows[:20]:
            s.add_row(
                x.resource_id[-60:],
                x.cloud or "-",
                x.instance_type or "-",
                x.plan_id or "-",
                format(x.hours.normalize(), "f") if x.hours else "-",
                money(x.effective_usd) if x.effective_usd else "-",
            )
        out.append(s)
    return out
