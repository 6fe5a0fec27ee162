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
        "flags",
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
                ";".join(o.flags),
            ]
        )


def gpu_count(o: Offer) -> str:
    """ "8", or "1/8" for a share of one GPU."""
    if o.gpu_fraction is None:
        return str(o.gpus_per_instance)
    from fractions import Fraction

    return str(Fraction(o.gpu_fraction).limit_denominator(64))


def prices_table(offers: Sequence[Offer], title: str, width: int = 160) -> Any:
    from gpuprov.tables import Column, fit

    columns = (
        Column("cloud"),
        Column("region", fold=3, narrowest=9),
        Column("zone", fold=4, narrowest=9),
        Column("instance type", fold=1, narrowest=12),
        Column("GPUs", "right", fold=5, narrowest=7),
        Column("market", compact=short_market),
        Column("$/GPU-h", "right"),
        Column("$/instance-h", "right", drop=1),
        Column("flags", fold=2, narrowest=6, compact=lambda f: f.replace("suspect-", "")),
    )
    rows = [
        (
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
        for o in offers
    ]
    return fit(title, columns, rows, width)


def short_market(market: str) -> str:
    """A market's compact form for narrow tables: ``res. 3y``, ``on demand``."""
    return market.replace("reserved_", "res. ").replace("_", " ")


def plan_tables(doc: PlanDocument, width: int = 160) -> list[Any]:
    """Rich renderables for a plan document, fitted to ``width`` columns."""
    from gpuprov.tables import Column, fit

    hours = doc.horizon_hours
    title = f"plan {doc.plan_id}: {doc.gpus}× {doc.gpu!s}"
    if hours > 1:
        title += f", peak of {hours} hourly slots (instances at the busiest slot; $/h at that slot)"
    columns = (
        Column("workload", fold=3, narrowest=5, drop=2),
        Column("cloud"),
        Column("location", fold=2, narrowest=10),
        Column("instance type", fold=1, narrowest=12),
        Column("market", compact=short_market),
        Column("inst.", "right"),
        Column("GPUs", "right", drop=3),
        Column("$/h", "right"),
        Column("commitment", fold=0, narrowest=20, drop=1),
    )
    rows = [
        (
            str(a.workload),
            a.cloud,
            str(a.location),
            str(a.instance_type),
            a.market,
            str(a.instances),
            str(a.instances * a.gpus_per_instance),
            money(a.unit_hourly_usd * a.instances),
            "",
        )
        for a in doc.allocations
    ]
    for r in doc.reservations:
        rows.append(
            (
                ", ".join(sorted(r.gpus_used_by_slot)) or "idle",
                r.cloud,
                str(r.location),
                str(r.instance_type),
                r.market,
                str(r.instances),
                str(r.instances * r.gpus_per_instance),
                money(r.hourly_usd),
                f"commits {money(r.commitment_total_usd)} over {r.term_label}",
            )
        )
    alloc = fit(title, columns, rows, width)
    out: list[Any] = [alloc]
    if doc.commitments.recommended or doc.commitments.held:
        out.append(commitment_table(doc, width))
    return [*out, summary_table(doc, width)]  # doc.warnings are printed by the command, as warning lines


def summary_rows(doc: PlanDocument) -> list[tuple[str, str]]:
    """The plan's summary as (label, value) lines: costs, bound, commitments, baselines, binding rows."""
    hours = doc.horizon_hours
    c = doc.costs
    rows = [("hourly cost, billed" if hours == 1 else "hourly cost, billed (average)", money(c.hourly_usd))]
    rows.append(("monthly (730 h)", money(c.monthly_usd)))
    if hours > 1:
        rows.append((f"over the {hours} h horizon", money(c.horizon_usd)))
    rows.append(
        (
            "expected spot interruption overhead",
            f"{money(c.expected_interruption_usd / hours, Decimal('0.0001'))}/h (lost work; not billed)",
        )
    )
    rows.append(("objective (billed + overhead)", f"{money(c.objective_usd / hours)}/h"))
    rows.append(("proven lower bound on the objective / gap", f"{money(c.lower_bound_usd / hours)}/h / {c.gap:.2%}"))
    cm = doc.commitments
    if cm.held:
        rows.append(
            (
                "total / marginal (held commitments paid anyway)",
                f"{money(c.total_cost_usd)} / {money(c.marginal_cost_usd)} over the {hours} h horizon",
            )
        )
    if doc.reservations or cm.recommended or cm.held:
        rows.append(("commitment", str(cm.summary)))
    if cm.what_if is not None:
        w = cm.what_if
        verdict = "they still pay" if w.regret_horizon_usd <= 0 else "they cost more than they save"
        rows.append(
            (
                f"if demand is {w.demand_scale:.0%} of the plan's",
                f"{money(w.with_commitments_horizon_usd)} over the horizon holding the recommended commitments, "
                f"{money(w.without_commitments_horizon_usd)} without: {verdict} "
                f"({money(abs(w.regret_horizon_usd))} over the {doc.horizon_hours} h horizon)",
            )
        )
    for b in doc.baselines:
        label = str(b.description if b.where is None else f"{b.description}: {b.where}")
        if b.hourly_usd is None or b.saving_fraction is None:
            rows.append((label, f"not available: {b.reason or 'cannot be built'!s}"))
            continue
        rows.append((label, f"{money(b.hourly_usd)}/h  (plan saves {b.saving_fraction:.1%})"))
    if doc.solve.binding:
        rows.append(("binding", str("; ".join(doc.solve.binding))))
    rows.append(
        (
            "offers",
            f"{doc.solve.offers_considered} in the model; {doc.solve.offers_left_out} "
            "left out as dominated or provably unable to improve the plan",
        )
    )
    return rows


def summary_table(doc: PlanDocument, width: int = 160) -> Any:
    from gpuprov.tables import pairs

    return pairs(summary_rows(doc), width)


def commitment_table(doc: PlanDocument, width: int = 160) -> Any:
    """New commitments recommended (term, liability, break-even) and held ones (use, unused cost)."""
    from gpuprov.tables import Column, fit

    hours = doc.horizon_hours
    columns = (
        Column(""),
        Column("kind", fold=3, narrowest=8),
        Column("scope", fold=1, narrowest=12),
        Column("size", "right", fold=5, narrowest=5),
        Column("$/h", "right"),
        Column("term / dates", fold=2, narrowest=8),
        Column("liability", "right", fold=6, narrowest=9),
        Column("used", "right"),
        Column("break-even use", "right", fold=4, narrowest=5),
        Column("saving / unused", "right", fold=4, narrowest=9),
    )
    rows = []
    for r in doc.commitments.recommended:
        rows.append(
            (
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
        )
    for h in doc.commitments.held:
        rows.append(
            (
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
        )
    return fit(f"commitments (use over the {hours} h horizon)", columns, rows, width)


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
                "note": g.note,
            }
            for g in status.groups
        ],
        "source": source,
        "unasked": unasked,
        "commitments": list(status.commitments),
    }


def status_table(status: Status, owner: str, source: str, width: int = 160) -> Any:
    """``gpuprov status``: the groups, running against planned, with their hourly cost."""
    from gpuprov.tables import Column, fit

    columns = (
        Column("plan", fold=5, narrowest=6),
        Column("cloud"),
        Column("location", fold=3, narrowest=10),
        Column("instance type", fold=2, narrowest=12),
        Column("market", compact=short_market),
        Column("workload", fold=4, narrowest=6),
        Column("running", "right"),
        Column("planned", "right"),
        Column("$/h", "right"),
        Column("note", fold=1, narrowest=10),
    )
    rows = [
        (
            g.plan or "?",
            g.site.cloud,
            g.site.location,
            g.site.instance_type,
            g.site.market,
            g.site.workload or "?",
            str(g.instances),
            "?" if g.planned is None else str(g.planned),
            "?" if g.hourly_usd is None else f"${g.hourly_usd:,.2f}",
            "; ".join(x for x in (g.problem, g.note) if x),
        )
        for g in status.groups
    ]
    title = f"fleet {owner}: {status.instances} instances, ${status.hourly_usd:,.2f}/h ({source})"
    return fit(title, columns, rows, width)


def commitment_usage_table(rows: Sequence[dict[str, Any]], width: int = 160) -> Any:
    """``gpuprov status``: what the fleet uses now of each commitment held (``status.commitment_usage``)."""
    from gpuprov.tables import Column, fit

    unused = sum((Decimal(r["unused_hourly_usd"]) for r in rows), Decimal(0))
    columns = (
        Column("id", fold=2, narrowest=10),
        Column("kind", fold=3, narrowest=8),
        Column("scope", fold=1, narrowest=12),
        Column("size", "right"),
        Column("used now", "right"),
        Column("unused $/h", "right"),
        Column("note", fold=0, narrowest=10),
    )
    cells = []
    for r in rows:
        used = r["used"] if isinstance(r["used"], int) else f"${Decimal(r['used']):,.2f}/h"
        cells.append(
            (
                r["id"],
                r["kind"],
                r["scope"],
                r["size"],
                str(used),
                f"${Decimal(r['unused_hourly_usd']):,.2f}",
                r["note"] or "",
            )
        )
    return fit(f"{len(rows)} commitments held: ${unused:,.2f}/h unused now", columns, cells, width)


def idle_reserved(doc: PlanDocument) -> list[int]:
    """Per slot, reserved GPUs held (and paid) that no workload uses."""
    out = [0] * doc.horizon_hours
    for r in doc.reservations:
        held = r.instances * r.gpus_per_instance
        for t in range(doc.horizon_hours):
            out[t] += held - sum(v[t] for v in r.gpus_used_by_slot.values())
    return out


def gpus_by_market(doc: PlanDocument) -> list[dict[str, int]]:
    """GPUs per market in each slot (reservations: the GPUs in use; under ``reserved idle``, those
    held but unused)."""
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
    for t, idle in enumerate(idle_reserved(doc)):
        if idle:
            per_slot[t]["reserved idle"] = idle
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
        if end:  # a run ends where its last slot ends: the next slot's start (Fri 20:00–Mon 00:00)
            t += 1
        hour = t % 24
        if doc.slot_origin == "week":
            return f"{_DAYS[(t // 24) % 7]} {hour:02d}:00"
        return f"{hour:02d}:00"

    return f"{one(first, False)}–{one(last, True)}"


def slot_chart(doc: PlanDocument, width: int = 60) -> Any:
    """GPUs by market per run of slots, as coloured bars (local time of the policy)."""
    from rich.table import Table
    from rich.text import Text

    colours = {
        "reserved_1y": "blue",
        "reserved_3y": "cyan",
        "on_demand": "yellow",
        "spot": "green",
        "reserved idle": "grey50",
    }
    runs = slot_runs(doc)
    peak = max((sum(r.values()) for _a, _b, r in runs), default=0) or 1
    legend = Text(f"GPUs by market, {doc.timezone} local time  ")
    shown = {m for _a, _b, r in runs for m in r}
    for label, market in (
        ("reserved 1y", "reserved_1y"),
        ("reserved 3y", "reserved_3y"),
        ("on demand", "on_demand"),
        ("spot", "spot"),
        ("reserved, held but idle", "reserved idle"),
    ):
        if market in shown:
            legend.append("█ ", style=colours[market]).append(f"{label}  ")
    table = Table(title=legend, title_justify="left", box=None)
    table.add_column("hours", no_wrap=True)
    table.add_column("GPUs", justify="right")
    table.add_column("by market", no_wrap=True)
    for first, last, row in runs:
        bar = Text()
        for market in ("reserved_1y", "reserved_3y", "on_demand", "spot", "reserved idle"):
            n = row.get(market, 0)
            if n:
                bar.append("█" * max(1, round(n / peak * width)), style=colours[market])
        detail = ", ".join(f"{m} {n}" for m, n in row.items() if n)
        table.add_row(slot_label(doc, first, last), str(sum(row.values())), bar + Text(f"  {detail}"))
    return table
