"""Turning plans, offers and snapshots into tables, JSON and CSV. No computing, no I/O but ``out``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

from gpuprov.models import Offer, SnapshotInfo
from gpuprov.plandoc import PlanDocument

if TYPE_CHECKING:
    from gpuprov.status import Status

TWO = Decimal("0.01")


def money(value: Decimal | None, places: Decimal = TWO) -> str:
    return "—" if value is None else f"${value.quantize(places):,}"


def age(snapshot: SnapshotInfo, now: datetime) -> str:
    hours = (now - snapshot.fetched_at).total_seconds() / 3600
    if hours < 48:
        return f"{hours:.0f} h old"
    return f"{hours / 24:.0f} days old"


def catalog_header(snapshots: Sequence[SnapshotInfo], now: datetime) -> str:
    parts = [f"{s.cloud} {s.fetched_at:%Y-%m-%d} ({age(s, now)})" for s in snapshots]
    return "prices: " + ("; ".join(parts) if parts else "no snapshot")


def offer_dict(o: Offer) -> dict[str, Any]:
    return {
        "cloud": o.cloud.value,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance_type,
        "gpu": o.gpu,
        "gpus_per_instance": o.gpus_per_instance,
        "gpu_memory_gib": o.gpu_memory_gib,
        "vcpus": o.vcpus,
        "memory_gib": str(o.memory_gib),
        "market": o.market.value,
        "hourly_usd": str(o.hourly_usd),
        "usd_per_gpu_hour": str(o.usd_per_gpu_hour.quantize(Decimal("0.000001"))),
        "currency": o.currency,
        "flags": list(o.flags),
        "gpu_fraction": None if o.gpu_fraction is None else str(o.gpu_fraction),
        "interruptions_per_hour": None if o.interruptions_per_hour is None else str(o.interruptions_per_hour),
        "interruption_source": o.interruption_source,
        "as_of": None if o.as_of is None else o.as_of.isoformat(),
    }


def snapshot_dict(s: SnapshotInfo) -> dict[str, Any]:
    return {
        "id": s.id,
        "source": s.source,
        "cloud": s.cloud.value,
        "fetched_at": s.fetched_at.isoformat(),
        "rows": s.row_count,
        "current": s.current,
    }


def prices_json(
    offers: Sequence[Offer], snapshots: Sequence[SnapshotInfo], out: IO[str], discounts: dict[str, float] | None = None
) -> None:
    json.dump(
        {
            "snapshots": [snapshot_dict(s) for s in snapshots],
            "discounts": discounts or {},
            "offers": [offer_dict(o) for o in offers],
        },
        out,
        indent=2,
    )
    out.write("\n")


def prices_csv(offers: Sequence[Offer], out: IO[str]) -> None:
    writer = csv.writer(out, lineterminator="\n")
    cols = [
        "cloud",
        "region",
        "zone",
        "instance_type",
        "gpu",
        "gpus_per_instance",
        "market",
        "usd_per_gpu_hour",
        "hourly_usd",
    ]
    writer.writerow(cols)
    for o in offers:
        writer.writerow(
            [
                o.cloud.value,
                o.region,
                o.zone or "",
                o.instance_type,
                o.gpu,
                o.gpus_per_instance,
                o.market.value,
                o.usd_per_gpu_hour.quantize(Decimal("0.000001")),
                o.hourly_usd,
            ]
        )


def gpu_count(o: Offer) -> str:
    """ "8", or "1/8" for a share of one GPU."""
    if o.gpu_fraction is None:
        return str(o.gpus_per_instance)
    from fractions import Fraction

    return str(Fraction(o.gpu_fraction).limit_denominator(64))


def prices_table(offers: Sequence[Offer], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col, just in (
        ("cloud", "left"),
        ("region", "left"),
        ("zone", "left"),
        ("instance type", "left"),
        ("GPUs", "right"),
        ("market", "left"),
        ("$/GPU-h", "right"),
        ("$/instance-h", "right"),
        ("flags", "left"),
    ):
        table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for o in offers:
        table.add_row(
            o.cloud.value,
            o.region,
            o.zone or "—",
            o.instance_type,
            f"{gpu_count(o)}× {o.gpu}",
            o.market.value,
            money(o.usd_per_gpu_hour, Decimal("0.0001")),
            money(o.hourly_usd, Decimal("0.0001")),
            ("⚠ " + ", ".join(o.flags)) if o.flags else "",
        )
    return table


def plan_tables(doc: PlanDocument) -> list[Any]:
    """Rich renderables for a plan document."""
    from rich.table import Table

    hours = doc.horizon_hours
    title = f"plan {doc.plan_id}: {doc.gpus}× {doc.gpu!s}"
    if hours > 1:
        title += f", peak of {hours} hourly slots (instances at the busiest slot; $/h at that slot)"
    alloc = Table(title=title, title_justify="left")
    for col, just in (
        ("workload", "left"),
        ("cloud", "left"),
        ("location", "left"),
        ("instance type", "left"),
        ("market", "left"),
        ("inst.", "right"),
        ("GPUs", "right"),
        ("$/h", "right"),
        ("commitment", "left"),
    ):
        alloc.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for a in doc.allocations:
        n = a.instances
        alloc.add_row(
            str(a.workload),
            a.cloud,
            str(a.location),
            str(a.instance_type),
            a.market,
            str(n),
            str(n * a.gpus_per_instance),
            money(a.unit_hourly_usd * n),
            "",
        )
    for r in doc.reservations:
        users = ", ".join(sorted(r.gpus_used_by_slot)) or "idle"
        alloc.add_row(
            str(users),
            r.cloud,
            str(r.location),
            str(r.instance_type),
            r.market,
            str(r.instances),
            str(r.instances * r.gpus_per_instance),
            money(r.hourly_usd),
            f"commits {money(r.commitment_total_usd)} over {r.term_label}",
        )
    c = doc.costs
    summary = Table(show_header=False, box=None)
    summary.add_column(justify="left", no_wrap=True)
    summary.add_column(justify="left")
    summary.add_row("hourly cost, billed" if hours == 1 else "hourly cost, billed (average)", money(c.hourly_usd))
    summary.add_row("monthly (730 h)", money(c.monthly_usd))
    if hours > 1:
        summary.add_row(f"over the {hours} h horizon", money(c.horizon_usd))
    summary.add_row(
        "expected spot interruption overhead",
        f"{money(c.expected_interruption_usd / hours, Decimal('0.0001'))}/h (lost work; not billed)",
    )
    summary.add_row("objective (billed + overhead)", f"{money(c.objective_usd / hours)}/h")
    summary.add_row("proven lower bound on the objective / gap", f"{money(c.lower_bound_usd / hours)}/h / {c.gap:.2%}")
    cm = doc.commitments
    if cm.held:
        summary.add_row(
            "total / marginal (held commitments paid anyway)",
            f"{money(c.total_cost_usd)} / {money(c.marginal_cost_usd)} over the {hours} h horizon",
        )
    if doc.reservations or cm.recommended or cm.held:
        summary.add_row("commitment", str(cm.summary))
    if cm.what_if is not None:
        w = cm.what_if
        verdict = "they still pay" if w.regret_horizon_usd <= 0 else "they cost more than they save"
        summary.add_row(
            f"if demand is {w.demand_scale:.0%} of the plan's",
            f"{money(w.with_commitments_horizon_usd)} over the horizon holding the recommended commitments, "
            f"{money(w.without_commitments_horizon_usd)} without: {verdict} "
            f"({money(abs(w.regret_horizon_usd))} over the {doc.horizon_hours} h horizon)",
        )
    for b in doc.baselines:
        label = str(b.description if b.where is None else f"{b.description}: {b.where}")
        if b.hourly_usd is None or b.saving_fraction is None:
            summary.add_row(label, f"not available: {b.reason or 'cannot be built'!s}")
            continue
        summary.add_row(label, f"{money(b.hourly_usd)}/h  (plan saves {b.saving_fraction:.1%})")
    if doc.solve.binding:
        summary.add_row("binding", str("; ".join(doc.solve.binding)))
    summary.add_row(
        "offers",
        f"{doc.solve.offers_considered} in the model; {doc.solve.offers_left_out} "
        "left out as dominated or provably unable to improve the plan",
    )
    out: list[Any] = [alloc]
    if cm.recommended or cm.held:
        out.append(commitment_table(doc))
    return [*out, summary]  # doc.warnings are printed by the command, as warning lines


def commitment_table(doc: PlanDocument) -> Any:
    """New commitments recommended (term, liability, break-even) and held ones (use, unused cost)."""
    from rich.table import Table

    hours = doc.horizon_hours
    table = Table(title=f"commitments (use over the {hours} h horizon)", title_justify="left")
    for col, just in (
        ("", "left"),
        ("kind", "left"),
        ("scope", "left"),
        ("size", "right"),
        ("$/h", "right"),
        ("term / dates", "left"),
        ("liability", "right"),
        ("used", "right"),
        ("break-even use", "right"),
        ("saving / unused", "right"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in doc.commitments.recommended:
        table.add_row(
            "buy",
            r.kind,
            r.scope,
            f"{r.count} inst." if r.count is not None else f"{money(r.usd_per_hour or Decimal(0))}/h",
            money(r.hourly_usd),
            f"{r.term_hours // 8760} year" + ("s" if r.term_hours > 8760 else ""),
            money(r.total_usd),
            f"{r.utilization:.0%}",
            "-" if r.break_even_utilization is None else f"{r.break_even_utilization:.0%}",
            f"saves {money(r.horizon_saving_usd)}",
        )
    for h in doc.commitments.held:
        table.add_row(
            "held",
            h.kind,
            h.scope,
            f"{h.count} inst." if h.count is not None else f"{money(h.usd_per_hour or Decimal(0))}/h",
            money(h.hourly_usd),
            f"{h.starts:%Y-%m-%d} to {h.ends:%Y-%m-%d} ({h.active_hours} h of the horizon)",
            f"{money(h.horizon_usd)} in horizon",
            f"{h.utilization:.0%}",
            "-",
            f"unused {money(h.unused_horizon_usd)}",
        )
    return table


def status_dict(status: Status, owner: str, source: str, unasked: dict[str, str]) -> dict[str, Any]:
    """``gpuprov status --output json``: money as decimal strings."""
    return {
        "owner": owner,
        "instances": status.instances,
        "hourly_usd": str(status.hourly_usd),
        "groups": [
            {
                "plan": g.plan,
                "cloud": g.site.cloud,
                "location": g.site.location,
                "instance_type": g.site.instance_type,
                "market": g.site.market,
                "workload": g.site.workload,
                "instances": g.instances,
                "planned": g.planned,
                "hourly_usd": None if g.hourly_usd is None else str(g.hourly_usd),
                "problem": g.problem,
            }
            for g in status.groups
        ],
        "source": source,
        "unasked": unasked,
        "commitments": list(status.commitments),
    }


def status_table(status: Status, owner: str, source: str) -> Any:
    """``gpuprov status``: the groups, running against planned, with their hourly cost."""
    from rich.table import Table

    table = Table(
        title=f"fleet {owner}: {status.instances} instances, ${status.hourly_usd:,.2f}/h ({source})",
        title_justify="left",
    )
    for col in (
        "plan",
        "cloud",
        "location",
        "instance type",
        "market",
        "workload",
        "running",
        "planned",
        "$/h",
        "note",
    ):
        table.add_column(col, no_wrap=True)
    for g in status.groups:
        table.add_row(
            g.plan or "?",
            g.site.cloud,
            g.site.location,
            g.site.instance_type,
            g.site.market,
            g.site.workload or "?",
            str(g.instances),
            "?" if g.planned is None else str(g.planned),
            "?" if g.hourly_usd is None else f"${g.hourly_usd:,.2f}",
            g.problem or "",
        )
    return table


def commitment_usage_table(rows: Sequence[dict[str, Any]]) -> Any:
    """``gpuprov status``: what the fleet uses now of each commitment held (``status.commitment_usage``)."""
    from rich.table import Table

    unused = sum((Decimal(r["unused_hourly_usd"]) for r in rows), Decimal(0))
    table = Table(title=f"{len(rows)} commitments held: ${unused:,.2f}/h unused now", title_justify="left")
    for col in ("id", "kind", "scope", "size", "used now", "unused $/h", "note"):
        table.add_column(col)
    for r in rows:
        used = r["used"] if isinstance(r["used"], int) else f"${Decimal(r['used']):,.2f}/h"
        table.add_row(
            r["id"],
            r["kind"],
            r["scope"],
            r["size"],
            str(used),
            f"${Decimal(r['unused_hourly_usd']):,.2f}",
            r["note"] or "",
        )
    return table


def gpus_by_market(doc: PlanDocument) -> list[dict[str, int]]:
    """GPUs in use per market in each slot (reservations: the GPUs in use, not the ones held)."""
    per_slot: list[dict[str, int]] = [{} for _ in range(doc.horizon_hours)]
    for a in doc.allocations:
        for t, n in enumerate(a.instances_by_slot):
            if n:
                per_slot[t][a.market] = per_slot[t].get(a.market, 0) + n * a.gpus_per_instance
    for r in doc.reservations:
        for t in range(doc.horizon_hours):
            used = sum(v[t] for v in r.gpus_used_by_slot.values())
            if used:
                per_slot[t][r.market] = per_slot[t].get(r.market, 0) + used
    return per_slot


def slot_runs(doc: PlanDocument) -> list[tuple[int, int, dict[str, int]]]:
    """Runs of consecutive slots with the same GPUs per market: (first, last, {market: GPUs})."""
    runs: list[tuple[int, int, dict[str, int]]] = []
    for t, row in enumerate(gpus_by_market(doc)):
        if runs and runs[-1][2] == row:
            runs[-1] = (runs[-1][0], t, row)
        else:
            runs.append((t, t, row))
    return runs


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def slot_label(doc: PlanDocument, first: int, last: int) -> str:
    def one(t: int, end: bool) -> str:
        hour = (t + 1 if end else t) % 24
        if doc.slot_origin == "week":
            return f"{_DAYS[(t // 24) % 7]} {hour:02d}:00"
        return f"{hour:02d}:00"

    return f"{one(first, False)}–{one(last, True)}"


def slot_chart(doc: PlanDocument, width: int = 60) -> Any:
    """GPUs by market per run of slots, as coloured bars (local time of the policy)."""
    from rich.table import Table
    from rich.text import Text

    colours = {"reserved_1y": "blue", "reserved_3y": "cyan", "on_demand": "yellow", "spot": "green"}
    runs = slot_runs(doc)
    peak = max((sum(r.values()) for _a, _b, r in runs), default=0) or 1
    legend = Text(f"GPUs by market, {doc.timezone} local time  ")
    for label, market in (("reserved", "reserved_1y"), ("on demand", "on_demand"), ("spot", "spot")):
        legend.append("█ ", style=colours[market]).append(f"{label}  ")
    table = Table(title=legend, title_justify="left", box=None)
    table.add_column("hours", no_wrap=True)
    table.add_column("GPUs", justify="right")
    table.add_column("by market", no_wrap=True)
    for first, last, row in runs:
        bar = Text()
        for market in ("reserved_1y", "reserved_3y", "on_demand", "spot"):
            n = row.get(market, 0)
            if n:
                bar.append("█" * max(1, round(n / peak * width)), style=colours[market])
        detail = ", ".join(f"{m} {n}" for m, n in row.items() if n)
        table.add_row(slot_label(doc, first, last), str(sum(row.values())), bar + Text(f"  {detail}"))
    return table
