"""Plan documents for tests of the readers (apply, terraform, status, rebalance, chart).

``planned(case)`` runs the real planner (``gpuprov.planning``, the code ``gpuprov plan`` runs)
on the bundled price snapshot: the readers are tested on what the writer really produces.
``handmade(...)`` builds a small document through the same typed model and validator, for unit
tests of one rendering rule that no bundled price would exercise on its own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from gpuprov import plandoc as pd
from gpuprov import planning
from gpuprov.models import Market, Offer, SnapshotInfo

CREATED = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@lru_cache(maxsize=1)
def bundled() -> tuple[tuple[Offer, ...], tuple[SnapshotInfo, ...]]:
    from pricing.snapshot import load_bundled

    offers: list[Offer] = []
    snaps = []
    for i, snap in enumerate(load_bundled(), start=1):
        offers += snap.offers
        snaps.append(
            SnapshotInfo(
                id=i,
                source=snap.source,
                cloud=snap.cloud,
                fetched_at=snap.as_of,
                row_count=len(snap.offers),
                current=True,
            )
        )
    return tuple(offers), tuple(snaps)


POLICY_THREE_CLOUDS = """
name: three-clouds
gpu: a100
gpus: 48
timezone: Europe/Berlin
horizon_hours: 24
workloads:
  training: {max_spot_fraction: 0.5, node_gpus: 8, gang: true}
  inference: {max_spot_fraction: 0.25, spread_zones: 2}
schedule:
  default: {training: 50%, inference: 50%}
  windows:
    - {name: day, start: "08:00", end: "20:00", demand: {training: 25%, inference: 75%}}
caps:
  regions:
    - {cloud: aws, region: "*", max_instances: 2}
    - {cloud: gcp, region: "*", max_instances: 2}
"""


def _flags(
    gpus: int,
    gpu_type: str,
    node: int | None = None,
    clouds: list[str] | None = None,
    markets: list[str] | None = None,
    spot: str | None = None,
) -> tuple[pd.RequestSpec, planning.Context]:
    from pricing.gpus import resolve

    workload = planning.flags_workload(node, None if spot is None else Decimal(spot))
    spec = planning.flags_spec(resolve(gpu_type), gpus, workload, clouds, markets, None, "cbc", 0.001, 60.0)
    return spec, planning.flags_context()


def _policy(name_or_text: str, **overrides: Any) -> tuple[pd.RequestSpec, planning.Context, int]:
    from policies import constraints, loader
    from pricing.gpus import resolve

    if "\n" in name_or_text:
        pol = loader.parse(name_or_text, "test-policy.yaml")
    else:
        pol = loader.load(name_or_text)
    pol = constraints.apply(pol, constraints.Overrides(**overrides))
    assert pol.gpu is not None and pol.gpus is not None
    return planning.policy_spec(pol, resolve(pol.gpu), "cbc", 0.001, 60.0), planning.policy_context(pol), pol.gpus


CASES = {
    "flags_any": lambda: (*_flags(64, "a100"), 64),
    "flags_aws_gang": lambda: (*_flags(64, "a100", node=8, clouds=["aws"]), 64),
    "flags_gcp": lambda: (*_flags(16, "l4", clouds=["gcp"], markets=["on_demand", "spot"]), 16),
    "day_night": lambda: _policy("day-night", gpu="a100", gpus=64),
    "weekday_weekend": lambda: _policy("weekday-weekend", gpu="h100", gpus=128),
    "three_clouds": lambda: _policy(POLICY_THREE_CLOUDS),
}


@cache
def planned(case: str) -> pd.PlanDocument:
    spec, context, gpus = CASES[case]()
    offers, snaps = bundled()
    request = planning.request_from_spec(spec, offers)
    solved = planning.run(request)
    pid = planning.plan_id(spec, snaps, context)
    return planning.document(pid, solved, snaps, gpus, spec, context, CREATED)


GOLDEN_PLANS = Path(__file__).resolve().parent / "terraform" / "golden-plans"


@cache
def golden_plan(case: str) -> pd.PlanDocument:
    """The stored plan document of ``case`` that the Terraform goldens are rendered from.

    The planner may return any of several equally cheap plans within the gap (which one depends
    on how far the time-boxed parts got), so the goldens render a stored document, written by the
    planner with ``GPUPROV_UPDATE_GOLDEN=1``; ``planned`` is still what the planner writes now."""
    import os

    path = GOLDEN_PLANS / f"{case}.json"
    if os.environ.get("GPUPROV_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pd.to_json(planned(case)) + "\n", encoding="utf-8")
    return pd.from_json(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------- hand-made, for unit tests


def alloc(
    cloud: str,
    market: str,
    by_slot: list[int],
    *,
    workload: str = "inference",
    itype: str = "g6.xlarge",
    region: str = "us-east-1",
    zone: str | None = "use1-az1",
    gpus: int = 1,
    unit: str = "1.0",
    gpu: str = "L4",
) -> dict[str, Any]:
    return {
        "cloud": cloud,
        "region": region,
        "zone": zone,
        "instance_type": itype,
        "market": market,
        "workload": workload,
        "gpus_per_instance": gpus,
        "unit_hourly_usd": unit,
        "gpu": gpu,
        "instances_by_slot": by_slot,
    }


WORKLOADS = (pd.WorkloadSpec("inference", Decimal("0.5"), 1), pd.WorkloadSpec("training", Decimal("0.5"), 8, gang=True))


def handmade(
    allocs: list[dict[str, Any]],
    *,
    windows: list[dict[str, Any]] | None = None,
    horizon: int = 24,
    tz: str = "UTC",
    origin: str = "day",
    workloads: tuple[pd.WorkloadSpec, ...] = WORKLOADS,
    plan_id: str = "p1",
) -> pd.PlanDocument:
    """A validated document from compact allocation dicts; a reserved-market entry becomes a
    reservation used by its workload (whole instances) in the slots its counts say."""
    flex, resv = [], []
    names = {w.name for w in workloads}
    workloads = workloads + tuple(pd.WorkloadSpec(n) for n in sorted({a["workload"] for a in allocs} - names))
    keys = ("cloud", "region", "zone", "instance_type", "market", "gpus_per_instance")
    for a in allocs:
        fields = {k: a[k] for k in keys}
        fields["gpu"] = a.get("gpu", "L4")
        fields["unit_hourly_usd"] = Decimal(str(a["unit_hourly_usd"]))
        if Market(a["market"]).is_reserved:
            n = max(a["instances_by_slot"])
            term = pd.TERM_HOURS[a["market"]]
            resv.append(
                pd.Reservation(
                    **fields,
                    instances=n,
                    term_hours=term,
                    hourly_usd=fields["unit_hourly_usd"] * n,
                    commitment_total_usd=fields["unit_hourly_usd"] * n * term,
                    gpus_used_by_slot={
                        a["workload"]: tuple(c * a["gpus_per_instance"] for c in a["instances_by_slot"])
                    },
                )
            )
        else:
            flex.append(
                pd.Allocation(**fields, workload=a["workload"], instances_by_slot=tuple(a["instances_by_slot"]))
            )
    hourly = sum((x.unit_hourly_usd * sum(x.instances_by_slot) for x in flex), Decimal(0)) / horizon + sum(
        (r.hourly_usd for r in resv), Decimal(0)
    )
    zero = Decimal(0)
    doc = pd.PlanDocument(
        schema_version=pd.SCHEMA_VERSION,
        plan_id=plan_id,
        created_at=CREATED,
        horizon_start=CREATED.replace(minute=0, second=0, microsecond=0),
        gpu="L4",
        gpus=8,
        policy="test",
        timezone=tz,
        slot_origin=origin,
        horizon_hours=horizon,
        max_price_age_hours=Decimal(24),  # type: ignore[arg-type]
        windows=tuple(pd.Window(**w) for w in windows or []),
        request=pd.RequestSpec(
            gpu_names=("L4",), workloads=workloads, demand={w.name: (0,) * horizon for w in workloads}
        ),
        allocations=tuple(flex),
        reservations=tuple(resv),
        costs=pd.Costs(
            hourly_usd=hourly,
            monthly_usd=(hourly * 730).quantize(Decimal("0.01")),
            horizon_usd=hourly * horizon,
            slot_usd=(hourly,) * horizon,
            expected_interruption_usd=zero,
            objective_usd=hourly * horizon,
            lower_bound_usd=hourly * horizon,
            gap=zero,
            total_cost_usd=hourly * horizon,
            marginal_cost_usd=hourly * horizon,
        ),
        commitments=pd.Commitments(
            recommended=(),
            held=(),
            recommended_hourly_usd=zero,
            recommended_total_usd=zero,
            held_horizon_usd=zero,
            summary="",
        ),
        baselines=(),
        solve=pd.SolveInfo("cbc", "Optimal", 0, 0),
        catalog_as_of=CREATED,
        snapshots=(pd.SnapshotRef(1, "test", "aws", CREATED, 1, True),),
    )  # type: ignore[arg-type]
    pd.check(doc)
    return doc


def layout(doc: dict[str, Any]) -> pd.PlanDocument:
    """A hand-drawn layout (tests/terraform/layouts/*.json: allocations, windows, workloads) as a
    validated document; allocations of workload "reserved" stand for reservations nothing uses."""
    workloads = tuple(
        pd.WorkloadSpec(
            name,
            Decimal(str(w.get("max_spot_fraction", "0.5"))),
            w.get("node_gpus"),
            gang=w.get("gang") is True,
            spread_zones=w.get("spread_zones", 1),
        )
        for name, w in sorted(doc.get("workloads", {}).items())
    )
    return handmade(
        doc["allocations"],
        windows=doc.get("windows"),
        horizon=doc["horizon_hours"],
        tz=doc.get("timezone", "UTC"),
        origin=doc.get("slot_origin", "day") if doc["horizon_hours"] > 1 else "constant",
        workloads=workloads,
        plan_id=doc["plan_id"],
    )
