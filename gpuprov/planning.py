"""From what the user asked (flags or a policy) and the catalog's offers to a plan document.

Composition only: the CLI and the rebalancer call this; it calls policies and the optimizer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuprov import render
from gpuprov.models import Offer, Plan, SnapshotInfo, Workload
from gpuprov.optimizer import baselines
from gpuprov.optimizer.problem import PlanRequest
from gpuprov.optimizer.reduce import prepare
from gpuprov.optimizer.solve import solve


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


def flags_request(gpu: str, gpus: int, workload: Workload, offers: Sequence[Offer], solver: str,
                  gap: float, time_limit_s: float) -> PlanRequest:
    return PlanRequest(gpu=gpu, workloads=(workload,), demand={workload.name: (gpus,)}, offers=offers,
                       gap=gap, solver=solver, time_limit_s=time_limit_s)


def policy_request(policy: Any, gpu: str, offers: Sequence[Offer], solver: str, gap: float,
                   time_limit_s: float) -> PlanRequest:
    from policies import constraints

    allowed = [o for o in offers if constraints.allowed(policy, o)]
    return PlanRequest(
        gpu=gpu, workloads=constraints.workloads(policy), demand=constraints.demand(policy),
        offers=allowed, offer_caps=constraints.offer_caps(policy, allowed),
        region_caps=constraints.region_caps(policy), budget_per_hour=policy.budget_per_hour,
        interruptions_per_hour=dict(policy.interruptions_per_hour), gap=gap, solver=solver,
        time_limit_s=time_limit_s)


def plan_id(inputs: dict[str, Any], snapshots: Sequence[SnapshotInfo]) -> str:
    """A content id: the same inputs on the same snapshots give the same id."""
    payload = {"inputs": inputs, "snapshots": sorted(s.id for s in snapshots)}
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def policy_inputs(policy: Any) -> dict[str, Any]:
    return {"policy": asdict(policy)}


def policy_context(policy: Any) -> dict[str, Any]:
    """Plan-document keys that say when each slot is and what the windows are."""
    from policies.schedule import window_starts

    windows = []
    starts = window_starts(policy)
    by_name = {w.name: w for w in policy.windows}
    for name, slot in starts:
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


def document(pid: str, solved: Solved, snapshots: Sequence[SnapshotInfo], gpus: int,
             context: dict[str, Any], created: datetime) -> dict[str, Any]:
    doc = render.plan_dict(pid, solved.plan, solved.baselines, snapshots, gpus)
    doc.update(context)
    doc["created_at"] = created.isoformat()
    doc["objective_usd"] = float(solved.plan.objective_usd or Decimal(0))
    doc["notes"] = list(solved.plan.notes)
    return doc
