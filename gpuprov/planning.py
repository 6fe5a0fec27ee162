"""From what the user asked (flags or a policy) and the catalog's offers to a plan document.

Composition only: the CLI and the rebalancer call this; it calls policies and the optimizer.
A plan document carries its ``request``: everything needed to solve it again (for
capacity failover and rebalancing) with new prices or without a pool.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuprov import render
from gpuprov.models import Offer, Plan, SnapshotInfo, Workload
from gpuprov.optimizer import baselines
from gpuprov.optimizer.problem import PlanRequest
from gpuprov.optimizer.reduce import prepare
from gpuprov.optimizer.solve import solve

Pool4 = tuple[str, str, str, str]


@dataclass(frozen=True)
class Solved:
    request: PlanRequest
    plan: Plan
    baselines: render.Baselines


def run(request: PlanRequest) -> Solved:
    plan = solve(request)
    usable = prepare(request).offers
    aod = baselines.all_on_demand(request, usable)
    single = baselines.best_single_offer(request, usable)
    base = render.Baselines(
        all_on_demand_usd=aod[0] if aod else None, all_on_demand_where=aod[1] if aod else None,
        best_single_offer_usd=single[0] if single else None,
        best_single_offer=single[1] if single else None,
        reserved_plus_spot_usd=baselines.reserved_plus_spot(request, usable))
    return Solved(request, plan, base)


def slot_at(doc: dict[str, Any] | Any, when: datetime) -> int:
    """The slot of a plan document an aware UTC instant falls in (local time of the plan)."""
    from zoneinfo import ZoneInfo

    local = when.astimezone(ZoneInfo(doc.get("timezone") or "UTC"))
    if doc.get("slot_origin") == "week":
        return local.weekday() * 24 + local.hour
    if doc.get("slot_origin") == "day":
        return local.hour
    return 0


def _workload_spec(w: Workload) -> dict[str, Any]:
    return {"name": w.name, "max_spot_fraction": str(w.max_spot_fraction), "node_gpus": w.node_gpus,
            "gang": w.gang, "spread_zones": w.spread_zones,
            "lost_hours_per_interruption": str(w.lost_hours_per_interruption)}


def flags_spec(gpu_names: Sequence[str], gpus: int, workload: Workload, clouds: Collection[str] | None,
               markets: Collection[str] | None, regions: Sequence[str] | None, solver: str, gap: float,
               time_limit_s: float) -> dict[str, Any]:
    return {
        "gpu_names": list(gpu_names), "workloads": [_workload_spec(workload)],
        "demand": {workload.name: [gpus]},
        "clouds_allow": sorted(clouds or []), "clouds_deny": [], "regions_allow": list(regions or []),
        "regions_deny": [], "markets": None if markets is None else sorted(markets),
        "offer_caps": [], "region_caps": [], "budget_per_hour": None, "interruptions_per_hour": {},
        "solver": solver, "gap": gap, "time_limit_s": time_limit_s,
    }


def policy_spec(policy: Any, gpu_names: Sequence[str], solver: str, gap: float, time_limit_s: float) -> dict[str, Any]:
    from policies import constraints

    return {
        "gpu_names": list(gpu_names), "workloads": [_workload_spec(w) for w in constraints.workloads(policy)],
        "demand": {k: list(v) for k, v in constraints.demand(policy).items()},
        "clouds_allow": list(policy.clouds_allow), "clouds_deny": list(policy.clouds_deny),
        "regions_allow": list(policy.regions_allow), "regions_deny": list(policy.regions_deny),
        "markets": None if policy.markets is None else list(policy.markets),
        "offer_caps": [{"cloud": c.cloud, "region": c.region, "zone": c.zone, "instance_type": c.instance_type,
                        "market": c.market, "max_instances": c.max_instances} for c in policy.offer_caps],
        "region_caps": [{"cloud": c.cloud, "region": c.region, "max_instances": c.max_instances}
                        for c in policy.region_caps],
        "budget_per_hour": None if policy.budget_per_hour is None else str(policy.budget_per_hour),
        "interruptions_per_hour": {k: str(v) for k, v in policy.interruptions_per_hour.items()},
        "solver": solver, "gap": gap, "time_limit_s": time_limit_s,
    }


def _match(value: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, g) for g in globs)


def allowed(spec: dict[str, Any], o: Offer) -> bool:
    cloud = o.cloud.value
    if o.gpu not in spec["gpu_names"]:
        return False
    if spec["clouds_allow"] and cloud not in spec["clouds_allow"]:
        return False
    if cloud in spec["clouds_deny"] or _match(o.region, spec["regions_deny"]):
        return False
    if spec["regions_allow"] and not _match(o.region, spec["regions_allow"]):
        return False
    return spec["markets"] is None or o.market.value in spec["markets"]


def request_from_spec(spec: dict[str, Any], offers: Sequence[Offer],
                      unavailable: Collection[Pool4] = ()) -> PlanRequest:
    usable = [o for o in offers if allowed(spec, o)]
    caps: dict[tuple[str, str, str, str, str], int] = {}
    for o in usable:
        for c in spec["offer_caps"]:
            pairs = ((o.cloud.value, c["cloud"]), (o.region, c["region"]), (o.zone or "", c["zone"]),
                     (o.instance_type, c["instance_type"]), (o.market.value, c["market"]))
            if all(fnmatch.fnmatchcase(v, g) for v, g in pairs):
                caps[o.key] = min(caps.get(o.key, c["max_instances"]), c["max_instances"])
    workloads = tuple(Workload(name=w["name"], max_spot_fraction=Decimal(w["max_spot_fraction"]),
                               node_gpus=w["node_gpus"], gang=w["gang"], spread_zones=w["spread_zones"],
                               lost_hours_per_interruption=Decimal(w["lost_hours_per_interruption"]))
                      for w in spec["workloads"])
    names = spec["gpu_names"]
    return PlanRequest(
        gpu=names[0] if len(names) == 1 else "/".join(names), workloads=workloads,
        demand={k: tuple(v) for k, v in spec["demand"].items()}, offers=usable, offer_caps=caps,
        region_caps={(c["cloud"], c["region"]): c["max_instances"] for c in spec["region_caps"]},
        budget_per_hour=None if spec["budget_per_hour"] is None else Decimal(spec["budget_per_hour"]),
        interruptions_per_hour={k: Decimal(v) for k, v in spec["interruptions_per_hour"].items()},
        gap=spec["gap"], solver=spec["solver"], time_limit_s=spec["time_limit_s"],
        unavailable=frozenset(tuple(p) for p in unavailable))  # type: ignore[misc]


def plan_id(spec: dict[str, Any], snapshots: Sequence[SnapshotInfo], context: dict[str, Any],
            unavailable: Collection[Pool4] = (), extra: dict[str, Any] | None = None) -> str:
    """A content id: the same request on the same snapshots gives the same id."""
    payload = {"spec": spec, "context": context, "snapshots": sorted(s.id for s in snapshots),
               "unavailable": sorted(list(p) for p in unavailable), "extra": extra or {}}
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def flags_context(workload: Workload) -> dict[str, Any]:
    return {"policy": None, "timezone": "UTC", "slot_origin": "constant", "windows": [],
            "workloads": {workload.name: {"gang": workload.gang, "node_gpus": workload.node_gpus,
                                          "max_spot_fraction": float(workload.max_spot_fraction),
                                          "spread_zones": workload.spread_zones}},
            "max_price_age_hours": 24.0}


def policy_context(policy: Any) -> dict[str, Any]:
    """Plan-document keys that say when each slot is and what the windows are."""
    from policies.schedule import window_starts

    windows = []
    by_name = {w.name: w for w in policy.windows}
    for name, slot in window_starts(policy):
        w = by_name[name]
        length = (w.end_hour - w.start_hour) % 24 or 24
        windows.append({"name": name, "start_slot": slot, "end_slot": (slot + length) % policy.horizon_hours})
    return {
        "policy": policy.name,
        "timezone": policy.timezone,
        "slot_origin": "day" if policy.horizon_hours == 24 else "week",
        "windows": windows,
        "workloads": {name: {"gang": w.gang, "node_gpus": w.node_gpus,
                             "max_spot_fraction": float(w.max_spot_fraction), "spread_zones": w.spread_zones}
                      for name, w in policy.workloads.items()},
        "max_price_age_hours": float(policy.max_price_age_hours),
    }


def document(pid: str, solved: Solved, snapshots: Sequence[SnapshotInfo], gpus: int, spec: dict[str, Any],
             context: dict[str, Any], created: datetime, unavailable: Collection[Pool4] = ()) -> dict[str, Any]:
    doc = render.plan_dict(pid, solved.plan, solved.baselines, snapshots, gpus)
    doc.update(context)
    doc["request"] = spec
    doc["excluded_pools"] = sorted(list(p) for p in unavailable)
    doc["created_at"] = created.isoformat()
    doc["objective_usd"] = float(solved.plan.objective_usd or Decimal(0))
    doc["notes"] = list(solved.plan.notes)
    return doc


def replan(doc: dict[str, Any], offers: Sequence[Offer], snapshots: Sequence[SnapshotInfo],
           unavailable: Collection[Pool4], created: datetime,
           rebalance: dict[str, Any] | None = None) -> dict[str, Any]:
    """Solve a plan's request again, on these offers and without these pools.

    ``rebalance`` (from the rebalancer) holds ``slot``, ``incumbent`` {pool5: n},
    ``migration_hours`` {workload: h} and ``reserved`` {pool4: n}: see PlanRequest."""
    from dataclasses import replace

    spec = doc["request"]
    context: dict[str, Any] = {k: doc[k] for k in ("policy", "timezone", "slot_origin", "windows", "workloads",
                                                   "max_price_age_hours") if k in doc}
    request = request_from_spec(spec, offers, unavailable)
    extra: dict[str, Any] = {}
    if rebalance is not None:
        request = replace(request, current_slot=rebalance["slot"], incumbent=rebalance["incumbent"],
                          migration_hours=rebalance["migration_hours"], reserved_fixed=rebalance["reserved"])
        extra = {"slot": rebalance["slot"],
                 "incumbent": sorted([list(k), v] for k, v in rebalance["incumbent"].items()),
                 "reserved": sorted([list(k), v] for k, v in rebalance["reserved"].items()),
                 "migration_hours": {k: str(v) for k, v in rebalance["migration_hours"].items()}}
    solved = run(request)
    pid = plan_id(spec, snapshots, context, unavailable, extra)
    return document(pid, solved, snapshots, doc["gpus"], spec, context, created, unavailable)
