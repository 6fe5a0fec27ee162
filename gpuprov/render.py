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


def prices_json(offers: Sequence[Offer], snapshots: Sequence[SnapshotInfo], out: IO[str]) -> None:
    json.dump({"snapshots": [snapshot_dict(s) for s in snapshots],
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
                 "used_by_slot": {k: list(v) for k, v in r.used_by_slot.items()},
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
            "instance_type": o.instance_type, "market": o.market.value,
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
    summary.add_column(justify="left")
    summary.add_column(justify="right")
    summary.add_row("hourly cost", f"${doc['hourly_cost_usd']:,.2f}")
    summary.add_row("monthly (730 h)", f"${doc['monthly_cost_usd']:,.2f}")
    summary.add_row("lower bound / gap",
                    f"${doc['lower_bound_usd']:,.2f} / {doc['gap']:.2%}")
    b, s = doc["baselines"], doc["savings"]
    for label, key, skey in (
        (f"all on-demand in {b['all_on_demand_location']}", "all_on_demand_usd", "vs_all_on_demand"),
        ("best single offer", "best_single_offer_usd", "vs_best_single_offer"),
        ("reserved base + spot rest", "reserved_plus_spot_usd", "vs_reserved_plus_spot"),
    ):
        if b[key] is None:
            summary.add_row(label, "not available")
            continue
        hourly = b[key] / doc["horizon_hours"]
        summary.add_row(label, f"${hourly:,.2f}/h  (plan saves {s[skey]['fraction']:.1%})")
    if doc["binding_constraints"]:
        summary.add_row("binding", "; ".join(doc["binding_constraints"]))
    summary.add_row("offers", f"{doc['offers_considered']} considered, "
                    f"{doc['offers_dropped_as_dominated']} dropped as dominated")
    return [alloc, summary]
