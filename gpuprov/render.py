"""Turning plans, offers and snapshots into tables, JSON and CSV. No computing, no I/O but ``out``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import IO, Any

from gpuprov.models import HOURS_PER_MONTH, Offer, Plan, SnapshotInfo

TWO = Decimal("0.01")


@dataclass(frozen=True)
class Baselines:
    all_on_demand_usd: Decimal | None
    all_on_demand_where: str | None
    best_single_offer_usd: Decimal | None
    best_single_offer: Offer | None
    reserved_plus_spot_usd: Decimal | None


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


def _num(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def offer_dict(o: Offer) -> dict[str, Any]:
    return {
        "cloud": o.cloud.value, "region": o.region, "zone": o.zone,
        "instance_type": o.instance_type, "gpu": o.gpu, "gpus_per_instance": o.gpus_per_instance,
        "gpu_memory_gib": o.gpu_memory_gib, "vcpus": o.vcpus, "memory_gib": _num(o.memory_gib),
        "market": o.market.value, "hourly_usd": _num(o.hourly_usd),
        "usd_per_gpu_hour": _num(o.usd_per_gpu_hour.quantize(Decimal("0.000001"))),
        "currency": o.currency,
    }


def snapshot_dict(s: SnapshotInfo) -> dict[str, Any]:
    return {"id": s.id, "source": s.source, "cloud": s.cloud.value,
            "fetched_at": s.fetched_at.isoformat(), "rows": s.row_count, "current": s.current}


def prices_json(offers: Sequence[Offer], snapshots: Sequence[SnapshotInfo], out: IO[str],
                discounts: dict[str, float] | None = None) -> None:
    json.dump({"snapshots": [snapshot_dict(s) for s in snapshots], "discounts": discounts or {},
               "offers": [offer_dict(o) for o in offers]}, out, indent=2)
    out.write("\n")


def prices_csv(offers: Sequence[Offer], out: IO[str]) -> None:
    writer = csv.writer(out, lineterminator="\n")
    cols = ["cloud", "region", "zone", "instance_type", "gpu", "gpus_per_instance", "market",
            "usd_per_gpu_hour", "hourly_usd"]
    writer.writerow(cols)
    for o in offers:
        writer.writerow([o.cloud.value, o.region, o.zone or "", o.instance_type, o.gpu,
                         o.gpus_per_instance, o.market.value,
                         o.usd_per_gpu_hour.quantize(Decimal("0.000001")), o.hourly_usd])


def prices_table(offers: Sequence[Offer], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col, just in (("cloud", "left"), ("region", "left"), ("zone", "left"),
                      ("instance type", "left"), ("GPUs", "right"), ("market", "left"),
                      ("$/GPU-h", "right"), ("$/instance-h", "right")):
        table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for o in offers:
        table.add_row(o.cloud.value, o.region, o.zone or "—", o.instance_type,
                      f"{o.gpus_per_instance}× {o.gpu}", o.market.value,
                      money(o.usd_per_gpu_hour, Decimal("0.0001")), money(o.hourly_usd, Decimal("0.0001")))
    return table


def _saving(plan_cost: Decimal, base: Decimal | None) -> dict[str, Any]:
    if base is None or base == 0:
        return {"usd": None, "fraction": None}
    return {"usd": _num((base - plan_cost).quantize(TWO)),
            "fraction": _num(((base - plan_cost) / base).quantize(Decimal("0.0001")))}


def plan_dict(plan_id: str, plan: Plan, baselines: Baselines,
              snapshots: Sequence[SnapshotInfo], gpus: int) -> dict[str, Any]:
    hours = plan.horizon_hours
    total = plan.total_cost_usd
    hourly = total / hours
    allocations = []
    for a in plan.allocations:
        peak = max(a.instances_by_slot)
        allocations.append({
            **_loc(a.offer), "workload": a.workload, "instances": peak,
            "instances_by_slot": list(a.instances_by_slot),
            "hourly_usd": _num(a.offer.hourly_usd * peak),
        })
    reserved = []
    for r in plan.reservations:
        entry = {**_loc(r.offer), "workload": "reserved", "instances": r.instances,
                 "instances_by_slot": [r.instances] * hours,
                 "used_by_slot": {k: [float(x) for x in v] for k, v in r.used_by_slot.items()},
                 "hourly_usd": _num(r.offer.hourly_usd * r.instances)}
        allocations.append(entry)
        reserved.append(entry)
    def per_hour(v: Decimal | None) -> Decimal | None:
        return None if v is None else v / hours

    return {
        "plan_id": plan_id,
        "gpu": plan.gpu,
        "gpus": gpus,
        "horizon_hours": hours,
        "demand": {k: list(v) for k, v in plan.demand.items()},
        "hourly_cost_usd": _num(hourly),
        "monthly_cost_usd": _num((hourly * HOURS_PER_MONTH).quantize(TWO)),
        "total_cost_usd": _num(total),
        "slot_cost_usd": [_num(c) for c in plan.slot_cost_usd],
        "lower_bound_usd": _num(plan.lower_bound_usd),
        "gap": _num(plan.gap.quantize(Decimal("0.000001"))),
        "status": plan.status,
        "solver": plan.solver,
        "offers_considered": plan.offers_considered,
        "offers_dropped_as_dominated": plan.offers_dropped,
        "binding_constraints": list(plan.binding),
        "allocations": allocations,
        "reserved": reserved,
        "baselines": {
            "all_on_demand_usd": _num(baselines.all_on_demand_usd),
            "all_on_demand_hourly_usd": _num(per_hour(baselines.all_on_demand_usd)),
            "all_on_demand_location": baselines.all_on_demand_where,
            "best_single_offer_usd": _num(baselines.best_single_offer_usd),
            "best_single_offer": (None if baselines.best_single_offer is None
                                  else offer_dict(baselines.best_single_offer)),
            "reserved_plus_spot_usd": _num(baselines.reserved_plus_spot_usd),
        },
        "savings": {
            "vs_all_on_demand": _saving(total, baselines.all_on_demand_usd),
            "vs_best_single_offer": _saving(total, baselines.best_single_offer_usd),
            "vs_reserved_plus_spot": _saving(total, baselines.reserved_plus_spot_usd),
        },
        "catalog": {
            "as_of": _oldest(snapshots),
            "snapshots": [snapshot_dict(s) for s in snapshots],
        },
    }


def _oldest(snapshots: Sequence[SnapshotInfo]) -> str | None:
    """The as-of time of the oldest price the plan rests on."""
    times = [s.fetched_at for s in snapshots]
    return min(times).isoformat() if times else None


def _loc(o: Offer) -> dict[str, Any]:
    return {"cloud": o.cloud.value, "region": o.region, "zone": o.zone,
            "instance_type": o.instance_type, "market": o.market.value, "gpu": o.gpu,
            "gpus_per_instance": o.gpus_per_instance, "unit_hourly_usd": _num(o.hourly_usd)}


def plan_tables(doc: dict[str, Any]) -> list[Any]:
    """Rich renderables for a plan document (the same dict the JSON output prints)."""
    from rich.table import Table

    alloc = Table(title=f"plan {doc['plan_id']}: {doc['gpus']}× {doc['gpu']}", title_justify="left")
    for col, just in (("workload", "left"), ("cloud", "left"), ("location", "left"),
                      ("instance type", "left"), ("market", "left"), ("inst.", "right"),
                      ("GPUs", "right"), ("$/h", "right")):
        alloc.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for a in doc["allocations"]:
        n = a["instances"]
        alloc.add_row(a["workload"], a["cloud"], a["zone"] or a["region"], a["instance_type"],
                      a["market"], str(n), str(n * a["gpus_per_instance"]),
                      f"${a['hourly_usd']:,.2f}")
    summary = Table(show_header=False, box=None)
    summary.add_column(justify="left", no_wrap=True)
    summary.add_column(justify="left")
    hours = doc["horizon_hours"]
    summary.add_row("hourly cost" if hours == 1 else "hourly cost (average)", f"${doc['hourly_cost_usd']:,.2f}")
    summary.add_row("monthly (730 h)", f"${doc['monthly_cost_usd']:,.2f}")
    if hours > 1:
        summary.add_row(f"over the {hours} h horizon", f"${doc['total_cost_usd']:,.2f}")
    summary.add_row("proven lower bound / gap",
                    f"${doc['lower_bound_usd'] / hours:,.2f}/h / {doc['gap']:.2%}")
    b, s = doc["baselines"], doc["savings"]
    for label, key, skey in (
        (f"all on-demand in {b['all_on_demand_location']}", "all_on_demand_usd", "vs_all_on_demand"),
        ("best single offer", "best_single_offer_usd", "vs_best_single_offer"),
        ("reserved base + spot rest", "reserved_plus_spot_usd", "vs_reserved_plus_spot"),
    ):
        if b[key] is None:
            summary.add_row(label, "not available")
            continue
        hourly = b[key] / hours
        summary.add_row(label, f"${hourly:,.2f}/h  (plan saves {s[skey]['fraction']:.1%})")
    if doc["binding_constraints"]:
        summary.add_row("binding", "; ".join(doc["binding_constraints"]))
    summary.add_row("offers", f"{doc['offers_considered']} in the model; {doc['offers_dropped_as_dominated']} "
                    "left out as dominated or provably unable to improve the plan")
    return [alloc, summary]


def slot_runs(doc: dict[str, Any]) -> list[tuple[int, int, dict[str, int]]]:
    """Runs of consecutive slots with the same GPUs per market: (first, last, {market: GPUs})."""
    hours = doc["horizon_hours"]
    per_slot: list[dict[str, int]] = []
    for t in range(hours):
        row: dict[str, int] = {}
        for a in doc["allocations"]:
            row[a["market"]] = row.get(a["market"], 0) + a["instances_by_slot"][t] * a["gpus_per_instance"]
        per_slot.append(row)
    runs: list[tuple[int, int, dict[str, int]]] = []
    for t, row in enumerate(per_slot):
        if runs and runs[-1][2] == row:
            runs[-1] = (runs[-1][0], t, row)
        else:
            runs.append((t, t, row))
    return runs


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def slot_label(doc: dict[str, Any], first: int, last: int) -> str:
    def one(t: int, end: bool) -> str:
        hour = (t + 1 if end else t) % 24
        if doc.get("slot_origin") == "week":
            return f"{_DAYS[(t // 24) % 7]} {hour:02d}:00"
        return f"{hour:02d}:00"
    return f"{one(first, False)}–{one(last, True)}"


def slot_chart(doc: dict[str, Any], width: int = 60) -> Any:
    """GPUs by market per run of slots, as coloured bars (local time of the policy)."""
    from rich.table import Table
    from rich.text import Text

    colours = {"reserved_1y": "blue", "reserved_3y": "cyan", "on_demand": "yellow", "spot": "green"}
    runs = slot_runs(doc)
    peak = max((sum(r.values()) for _a, _b, r in runs), default=0) or 1
    legend = Text(f"GPUs by market, {doc.get('timezone', 'UTC')} local time  ")
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
