"""apply: the diff, idempotency, guards, capacity failover, status and destroy (fake clouds)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.errors import GuardError
from gpuprov.models import Cloud, Market
from gpuprov.plandoc import PlanDocument, WorkloadSpec, from_json
from gpuprov.store.state import StateStore
from provisioner.apply import diff, execute, unit_prices, wanted
from provisioner.base import InstanceHandle, launch_token
from provisioner.drivers.fake import FakeDriver
from tests.plans import alloc, handmade, planned

runner = CliRunner()
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def doc(counts: dict[tuple[str, str, str], list[int]], plan_id: str = "plan-a") -> PlanDocument:
    """A hand-made document for unit tests of the diff (the planner's own are tested below)."""
    horizon = 1 if len(next(iter(counts.values()))) == 1 else 24  # slots past the given ones repeat the last
    allocs = [
        alloc(
            "aws",
            market,
            [*by_slot, *[by_slot[-1]] * (horizon - len(by_slot))],
            workload=workload,
            itype="p4d.24xlarge",
            zone=zone,
            gpus=8,
            unit="10.0",
        )
        for (zone, market, workload), by_slot in counts.items()
    ]
    return handmade(
        allocs,
        horizon=horizon,
        origin="constant" if horizon == 1 else "day",
        workloads=(WorkloadSpec("training"),),
        plan_id=plan_id,
    )


def placed(d: PlanDocument, slot: int = 0) -> int:
    return sum(a.instances_by_slot[slot] for a in d.placements())


def run_once(d: PlanDocument, slot: int, drv: FakeDriver, state: StateStore, *, before: Any = None, **kw: Any) -> Any:
    plan_diff = diff(d, slot, drv.describe("fleet"), "fleet", unit_prices([before]) if before else None)
    execute(plan_diff, {Cloud.AWS: drv}, state, "fleet", lambda: NOW, **kw)
    return plan_diff


def test_apply_twice_launches_once(_isolated_db: str) -> None:
    drv, state = FakeDriver(Cloud.AWS), StateStore(_isolated_db)
    plan = doc({("use1-az1", "spot", "training"): [3, 1], ("use1-az2", "on_demand", "training"): [2, 2]})
    first = run_once(plan, 0, drv, state)
    assert len(first.launch) == 5
    second = run_once(plan, 0, drv, state)
    assert second.empty and len(second.keep) == 5
    tokens = sorted(h.token for h in drv.describe("fleet"))
    pool = ("aws", "us-east-1", "use1-az1", "p4d.24xlarge", "spot", "training")
    assert {launch_token("plan-a", pool, k, "fleet") for k in range(3)} <= set(tokens)
    assert all(e.state == "done" for e in state.journal("fleet"))


def test_next_slot_scales_down_and_a_new_plan_keeps_what_it_can(_isolated_db: str) -> None:
    drv, state = FakeDriver(Cloud.AWS), StateStore(_isolated_db)
    plan = doc({("use1-az1", "spot", "training"): [3, 1]})
    run_once(plan, 0, drv, state)
    down = run_once(plan, 1, drv, state)
    assert (len(down.terminate), len(down.keep)) == (2, 1)
    kept_token = drv.describe("fleet")[0].token
    assert kept_token == launch_token(
        "plan-a", ("aws", "us-east-1", "use1-az1", "p4d.24xlarge", "spot", "training"), 0, "fleet"
    )
    newer = doc({("use1-az1", "spot", "training"): [2], ("use1-az3", "on_demand", "training"): [1]}, "plan-b")
    step = run_once(newer, 0, drv, state)
    assert len(step.keep) == 1 and len(step.launch) == 2 and not step.terminate  # the old instance stays
    assert len(drv.describe("fleet")) == 3


def test_instances_of_unplanned_pools_are_terminated(_isolated_db: str) -> None:
    drv, state = FakeDriver(Cloud.AWS), StateStore(_isolated_db)
    run_once(doc({("use1-az1", "spot", "training"): [2]}), 0, drv, state)
    step = run_once(doc({("use1-az2", "spot", "training"): [2]}, "plan-b"), 0, drv, state)
    assert len(step.terminate) == 2 and len(step.launch) == 2
    assert {h.zone for h in drv.describe("fleet")} == {"use1-az2"}


def test_circuit_breaker_and_budget(_isolated_db: str) -> None:
    drv, state = FakeDriver(Cloud.AWS), StateStore(_isolated_db)
    plan = doc({("use1-az1", "spot", "training"): [4]})
    with pytest.raises(GuardError, match="circuit breaker"):
        run_once(plan, 0, drv, state, max_launch=3)
    with pytest.raises(GuardError, match="over the"):
        run_once(plan, 0, drv, state, budget_per_hour=Decimal(39))
    assert drv.describe("fleet") == []
    run_once(plan, 0, drv, state, budget_per_hour=Decimal(40))
    assert len(drv.describe("fleet")) == 4


def test_budget_makes_a_swap_break_before_make(_isolated_db: str) -> None:
    drv, state = FakeDriver(Cloud.AWS), StateStore(_isolated_db)
    a, b = doc({("use1-az1", "spot", "training"): [2]}), doc({("use1-az2", "spot", "training"): [2]}, "plan-b")
    run_once(a, 0, drv, state)
    drv.calls.clear()
    run_once(b, 0, drv, state, budget_per_hour=Decimal(20), before=a)
    order = [c for c in drv.calls if c != "describe"]
    assert order[0] == "terminate" and order.count("launch") == 2  # 40/h both ways would break the budget
    drv.calls.clear()
    run_once(doc({("use1-az3", "spot", "training"): [2]}, "plan-c"), 0, drv, state, before=b)
    order = [c for c in drv.calls if c != "describe"]
    assert order == ["launch", "launch", "terminate"]  # no budget: make before break


def test_reservations_are_wanted_in_every_slot() -> None:
    plan = doc({("use1-az1", "reserved_1y", "reserved"): [2, 2], ("use1-az1", "spot", "training"): [1, 0]})
    assert {p[4]: w.count for p, w in wanted(plan, 1).items()} == {"reserved_1y": 2, "spot": 0}


# -- through the CLI, with fake clouds --------------------------------------------------------------
def saved_plan(*args: str) -> PlanDocument:
    r = runner.invoke(app, ["plan", *args, "--save", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    return from_json(r.stdout)


def test_cli_apply_is_a_dry_run_without_yes_and_refuses_stale_prices(fake_clouds: dict[Cloud, FakeDriver]) -> None:
    plan = saved_plan("--gpus", "32", "--type", "a100", "--clouds", "aws")
    r = runner.invoke(app, ["apply", plan.plan_id])
    assert r.exit_code == 0 and "would launch" in r.stdout and "--allow-stale" in r.stderr
    assert all(d.describe("default") == [] for d in fake_clouds.values())
    r = runner.invoke(app, ["apply", plan.plan_id, "--yes"])
    assert r.exit_code == 4 and r.stderr.startswith("error: plan") and "days old" in r.stderr


def test_cli_apply_status_destroy(fake_clouds: dict[Cloud, FakeDriver]) -> None:
    plan = saved_plan("--gpus", "32", "--type", "a100", "--clouds", "aws")
    # the plan buys reservations: until they are bought its reserved instances run (and bill) on demand
    r = runner.invoke(app, ["apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    first = json.loads(r.stdout)
    want = placed(plan)
    assert first["launch"] == want and len(fake_clouds[Cloud.AWS].describe("default")) == want
    r = runner.invoke(app, ["apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "-o", "json"])
    assert json.loads(r.stdout)["launch"] == 0
    r = runner.invoke(app, ["status", "-o", "json"])
    status = json.loads(r.stdout)
    assert status["instances"] == want
    billed = sum((a.unit_hourly_usd * a.instances for a in plan.allocations), Decimal(0)) + sum(
        (r.on_demand_unit_hourly_usd or Decimal(0)) * r.instances for r in plan.reservations
    )
    assert Decimal(status["hourly_usd"]) == billed
    assert all(g["planned"] == g["instances"] for g in status["groups"])
    r = runner.invoke(app, ["destroy"])
    assert r.exit_code == 0 and f"would terminate {want}" in r.stdout
    r = runner.invoke(app, ["destroy", "--yes"])
    assert r.exit_code == 0 and fake_clouds[Cloud.AWS].describe("default") == []
    r = runner.invoke(app, ["destroy", "--yes"])
    assert r.exit_code == 0 and "terminated 0" in r.stdout


def test_cli_capacity_failover_moves_to_another_pool(fake_clouds: dict[Cloud, FakeDriver]) -> None:
    plan = saved_plan("--gpus", "16", "--type", "a100-80gb", "--node-gpus", "8", "--markets", "on_demand")
    first = plan.placements()[0]
    refused = (first.location, first.instance_type, first.market)
    cloud = Cloud(first.cloud)
    fake_clouds[cloud] = FakeDriver(cloud, capacity={refused: 0})
    r = runner.invoke(app, ["apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    assert "planning again without that pool" in r.stderr
    live = [h for d in fake_clouds.values() for h in d.describe("default")]
    assert sum(8 for _ in live) >= 16
    assert all((h.zone or h.region, h.instance_type, h.market.value) != refused for h in live)
    state = StateStore()
    assert (cloud.value, *refused) in state.unavailable(datetime.now(UTC))
    r = runner.invoke(app, ["plans", "-o", "json"])
    assert len(json.loads(r.stdout)) == 2  # the re-solved plan is saved


def test_cli_failover_that_runs_out_of_pools_says_what_it_tried(
    fake_clouds: dict[Cloud, FakeDriver], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = saved_plan(
        "--gpus",
        "8",
        "--type",
        "a100-80gb",
        "--node-gpus",
        "8",
        "--markets",
        "on_demand",
        "--clouds",
        "azure",
        "--region",
        "eastus*",
    )
    fake_clouds[Cloud.AZURE] = FakeDriver(
        Cloud.AZURE, capacity={(o["region"], o["instance_type"], "on_demand"): 0 for o in _azure_8gpu_offers()}
    )
    r = runner.invoke(app, ["apply", plan.plan_id, "--yes", "--allow-stale", "--buy-later"])
    assert r.exit_code == 4
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: no plan fits the capacity left; tried: azure/eastus")
    assert "azure/eastus2/" in errors[0]
    assert [h for d in fake_clouds.values() for h in d.describe("default")] == []


def _azure_8gpu_offers() -> list[dict[str, Any]]:
    r = runner.invoke(app, ["prices", "--type", "a100-80gb", "--cloud", "azure", "--market", "on_demand", "-o", "json"])
    return [o for o in json.loads(r.stdout)["offers"] if o["gpus_per_instance"] == 8]


def test_handles_have_pools() -> None:
    h = InstanceHandle(
        cloud=Cloud.AWS,
        instance_id="i",
        region="r",
        zone=None,
        instance_type="t",
        market=Market.SPOT,
        state="running",
        owner="o",
        plan_id="p",
        token="k",
        workload="w",
    )
    assert h.pool == ("aws", "r", "", "t", "spot", "w")


def test_two_fleets_applying_one_plan_get_different_tokens(_isolated_db: str) -> None:
    plan = doc({("use1-az1", "spot", "training"): [1]})
    a = diff(plan, 0, [], "fleet-a").launch[0].token
    b = diff(plan, 0, [], "fleet-b").launch[0].token
    assert a != b


def test_launch_requests_carry_the_gpu_for_attached_accelerators() -> None:
    plan = handmade(
        [alloc("gcp", "spot", [1], region="us-central1", zone="us-central1-a", itype="n1-standard-8", gpu="T4")],
        horizon=1,
        origin="constant",
    )
    [req] = diff(plan, 0, [], "fleet").launch
    assert (req.instance_type, req.gpu, req.gpus) == ("n1-standard-8", "T4", 1)


# -- plans the planner made: every slot of each applies exactly ---------------------------------------
@pytest.mark.parametrize("case", ["flags_any", "flags_aws_gang", "day_night", "weekday_weekend", "three_clouds"])
def test_planner_plans_apply_slot_by_slot(case: str, _isolated_db: str) -> None:
    plan = planned(case)
    drivers = {c: FakeDriver(c) for c in Cloud}
    state = StateStore(_isolated_db)
    edges = sorted({0, *(w.start_slot for w in plan.windows)})
    for slot in edges:
        actual = [h for d in drivers.values() for h in d.describe("fleet")]
        execute(diff(plan, slot, actual, "fleet"), drivers, state, "fleet", lambda: NOW, max_launch=10_000)
        running = [h for d in drivers.values() for h in d.describe("fleet")]
        assert len(running) == placed(plan, slot)
        by_pool: dict[tuple[str, ...], int] = {}
        for h in running:
            by_pool[h.pool] = by_pool.get(h.pool, 0) + 1
        assert by_pool == {p: w.count for p, w in wanted(plan, slot).items() if w.count}
        gpus: dict[str, int] = {}
        for a in plan.placements():
            gpus[a.workload] = gpus.get(a.workload, 0) + a.instances_by_slot[slot] * a.gpus_per_instance
        for name, demand in plan.demand.items():
            assert gpus.get(name, 0) >= demand[slot % len(demand)], (name, slot)
        again = diff(plan, slot, running, "fleet")
        assert again.empty


def test_concurrent_launches_under_throttling_end_with_exactly_the_plan(_isolated_db: str) -> None:
    drv = FakeDriver(Cloud.AWS, latency=0.01, rate=40)  # 16 in flight would pass 40 calls/s: throttled
    state = StateStore(_isolated_db)
    plan = doc({("use1-az1", "spot", "training"): [30], ("use1-az2", "on_demand", "training"): [30]})
    step = diff(plan, 0, [], "fleet")
    sleeps: list[float] = []
    from provisioner.apply import Outcome, _launch_all

    out = Outcome()
    _launch_all(step, {Cloud.AWS: drv}, state, "fleet", lambda: NOW, out, None, None, None, 16, sleeps.append)
    running = drv.describe("fleet")
    assert len(running) == 60 and len({h.token for h in running}) == 60
    assert {h.token for h in running} == {r.token for r in step.launch}
    assert all(e.state == "done" for e in state.journal("fleet"))
    assert len(state.journal("fleet")) == 60  # one row per launch, retries included
    assert diff(plan, 0, running, "fleet").empty


def test_a_capacity_error_stops_new_launches_and_is_raised(_isolated_db: str) -> None:
    from gpuprov.errors import CapacityError

    drv = FakeDriver(Cloud.AWS, capacity={("use1-az1", "p4d.24xlarge", "spot"): 5}, latency=0.005)
    state = StateStore(_isolated_db)
    plan = doc({("use1-az1", "spot", "training"): [40]})
    with pytest.raises(CapacityError):
        execute(
            diff(plan, 0, [], "fleet"), {Cloud.AWS: drv}, state, "fleet", lambda: NOW, max_launch=100, concurrency=4
        )
    journal = state.journal("fleet")
    assert len(drv.describe("fleet")) == 5
    assert sum(e.state == "done" for e in journal) == 5 and all(e.state in ("done", "failed") for e in journal)
    assert len(journal) < 40  # it stopped starting new ones
