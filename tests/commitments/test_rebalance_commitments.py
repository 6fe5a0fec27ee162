"""The rebalancer with held commitments: a pass compares plans net of what is held (paid either
way), so an unchanged catalog keeps the plan, and a cheaper region that would leave the held
reservation idle is not worth moving to unless it beats the reservation too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

from gpuprov import plandoc as pd
from gpuprov import planning, rebalance
from gpuprov.models import Cloud, Market, SnapshotInfo
from gpuprov.store.lease import Leases
from gpuprov.store.plans import PlanStore
from gpuprov.store.state import FleetStore, StateStore
from provisioner.drivers.fake import FakeDriver
from tests.commitments.test_optimizer_commitments import held_ri, p4d
from tests.rebalance.sim import FakeClock

T0 = datetime(2026, 6, 1, tzinfo=UTC)
FAR = datetime(2027, 6, 1, tzinfo=UTC)


def world(db: str, offers: list, tmp_state) -> rebalance.World:  # type: ignore[no-untyped-def,type-arg]
    snaps = [SnapshotInfo(1, "test", Cloud.AWS, T0, len(offers), True)]
    return rebalance.World(
        drivers={Cloud.AWS: FakeDriver(Cloud.AWS, state_file=tmp_state)},
        offers=lambda _names: list(offers),
        snapshots=lambda: snaps,
        refresh=None,
        plans=PlanStore(db),
        state=StateStore(db),
        fleets=FleetStore(db),
        leases=Leases(db),
    )


def first_plan(offers: list, held: list) -> pd.PlanDocument:  # type: ignore[type-arg]
    spec = pd.RequestSpec(
        gpu_names=("A100-40GB",),
        workloads=(pd.WorkloadSpec("cluster", max_spot_fraction=D(0), node_gpus=8, gang=True),),
        demand={"cluster": (32,)},
        markets=("on_demand",),
        held=tuple(held),
    )
    context = planning.flags_context()
    solved = planning.run(planning.request_for(spec, offers, context, T0))
    snaps = [SnapshotInfo(1, "test", Cloud.AWS, T0, len(offers), True)]
    return planning.document(planning.plan_id(spec, snaps, context), solved, snaps, 32, spec, context, T0)


def test_a_pass_with_held_reservations_keeps_an_unchanged_plan_and_weighs_moves_net_of_them(
    _isolated_db: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    offers = [p4d("use1-az1", Market.ON_DEMAND, "30")]
    doc = first_plan(offers, [held_ri(4, FAR)])
    assert doc.commitments.held[0].utilization == 1  # all 4 nodes run on the held reservation
    assert doc.costs.marginal_cost_usd == 0
    w = world(_isolated_db, offers, tmp_path / "fake.json")
    w.plans.save(doc)
    clock = FakeClock(T0)
    settings = rebalance.Settings(owner="held", holder="t", lead=timedelta(0), hysteresis=timedelta(0))
    rec = rebalance.run_pass(w, settings, clock, initial_plan=doc.plan_id)
    assert rec.decision == "keep", rec.reason
    # a region at a sixth of the price: moving there leaves the held four idle (paid anyway), so
    # it costs $5 × 4 more an hour than staying, and the migration (compared gross, the held
    # reservation would make the move look $29 cheaper); no move
    offers.append(p4d("use2-az1", Market.ON_DEMAND, "5", region="us-east-2"))
    clock.at = T0 + timedelta(hours=3)
    rec = rebalance.run_pass(w, settings, clock)
    assert rec.decision == "keep", rec.reason
    assert D(rec.expected_saving_usd) <= 0
    # without anything held the same move saves $25 × 4 an hour, more than the migration: adopted
    offers2 = [p4d("use1-az1", Market.ON_DEMAND, "30")]
    doc2 = first_plan(offers2, [])
    w2 = world(f"sqlite:///{tmp_path / 'other.db'}", offers2, tmp_path / "fake2.json")  # its own cloud and db
    w2.plans.save(doc2)
    s2 = rebalance.Settings(owner="free", holder="t", lead=timedelta(0), hysteresis=timedelta(0))
    rebalance.run_pass(w2, s2, FakeClock(T0), initial_plan=doc2.plan_id)
    offers2.append(p4d("use2-az1", Market.ON_DEMAND, "5", region="us-east-2"))
    rec2 = rebalance.run_pass(w2, s2, FakeClock(T0 + timedelta(hours=3)))
    assert rec2.decision == "adopt", rec2.reason
    assert D(rec2.expected_saving_usd) > 0
