"""The reconciliation's rules on one hour of a small hand-made plan: each case's causes are the
amounts worked out by hand in the case (no gpuprov arithmetic), and they add up to effective −
planned."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from gpuprov import plandoc as pd
from gpuprov.billing import reconcile as rc
from gpuprov.billing.charges import Charge
from gpuprov.billing.timeline import Span, spans
from gpuprov.store.state import PassRecord
from tests.plans import alloc, handmade

H = datetime(2026, 6, 2, 15, tzinfo=UTC)  # slot 15 of a day plan in UTC: 1 of the 2 reserved in use
OD, SPOT, RES = Decimal("32.7726"), Decimal("12.50"), Decimal("20")
P4D = {"itype": "p4d.24xlarge", "gpus": 8, "gpu": "A100-40GB"}


def plan() -> pd.PlanDocument:
    """2 on demand and 1 spot for inference all day; 2 reserved for training, 1 of them used."""
    return handmade(
        [
            alloc("aws", "on_demand", [2] * 24, unit=str(OD), **P4D),
            alloc("aws", "spot", [1] * 24, unit=str(SPOT), **P4D),
            alloc("aws", "reserved_1y", [2] * 12 + [1] * 12, workload="training", unit=str(RES), **P4D),
        ],
        workloads=(pd.WorkloadSpec("inference", Decimal(1)), pd.WorkloadSpec("training", Decimal(0), 8)),
    )


def charge(rid: str, cost: Decimal | str, market: str | None = "on_demand", **kw: Any) -> Charge:
    fields: dict[str, Any] = {
        "source_row": 1,
        "kind": "instance",
        "provider": "AWS",
        "cloud": "aws",
        "billing_account_id": "1",
        "sub_account_id": None,
        "billing_period_start": H.replace(day=1, hour=0),
        "charge_category": "Usage",
        "charge_class": None,
        "charge_frequency": "Usage-Based",
        "pricing_category": {"spot": "Dynamic", "on_demand": "Standard"}.get(market or "", "Committed"),
        "start": H,
        "end": H + timedelta(hours=1),
        "resource_id": rid,
        "resource_type": "Instance",
        "service_category": "Compute",
        "sku_id": None,
        "region": "us-east-1",
        "zone": "us-east-1a",
        "instance_type": "p4d.24xlarge",
        "billed": Decimal(cost),
        "effective": Decimal(cost),
        "list_cost": OD,
        "contracted": None,
        "pricing_quantity": Decimal(1),
        "pricing_unit": "Hours",
        "consumed_quantity": Decimal(1),
        "consumed_unit": "Hours",
        "commitment_id": None,
        "commitment_status": None,
        "commitment_type": None,
        "commitment_category": None,
        "commitment_quantity": None,
        "commitment_unit": None,
        "capacity_reservation_id": None,
        "capacity_reservation_status": None,
        "owner": "f",
        "plan_id": "p1",
        "workload": "training" if market and market.startswith("reserved") else "inference",
        "market": market,
    }
    fields.update(kw)
    return Charge(**fields)


def unused(amount: str, cid: str = "arn:ri/r-1") -> Charge:
    return charge(
        cid,
        "0",
        kind="commitment",
        effective=Decimal(amount),
        commitment_id=cid,
        commitment_status="Unused",
        market=None,
        workload=None,
        instance_type=None,
        list_cost=Decimal(0),
    )


AS_PLANNED = [
    charge("i-1", OD),
    charge("i-2", OD),
    charge("i-3", SPOT, "spot"),
    charge("i-4", "0", "reserved_1y", effective=RES),  # the reservation's used instance, amortised
]


def causes(
    fleet: list[Charge],
    idle: list[Charge] = (),  # type: ignore[assignment]
    doc: pd.PlanDocument | None = None,
    covered: bool = True,
    timeline: list[Span] | None = None,
) -> dict[str, Decimal]:
    doc = doc or plan()
    lines = rc.reconcile(
        rc.Inputs(
            hours=[H],
            timeline=timeline if timeline is not None else [Span(doc.plan_id, H - timedelta(days=1), None)],
            plans={doc.plan_id: doc},
            fleet=fleet,
            commitments=list(idle),
            covered=lambda _cloud, _h: covered,
        )
    )
    out: dict[str, Decimal] = {}
    for line in lines:
        out[line.cause] = out.get(line.cause, Decimal(0)) + line.difference
    total = sum((line.effective for line in lines), Decimal(0)) - sum((line.planned for line in lines), Decimal(0))
    assert sum(out.values(), Decimal(0)) == total  # the causes partition the difference
    return {k: v for k, v in out.items() if v}


def test_billed_as_planned_leaves_nothing() -> None:
    doc = plan()
    assert doc.costs.slot_usd[15] == 2 * OD + SPOT + 2 * RES  # the plan pays both reserved instances
    assert causes(AS_PLANNED, [unused("20")]) == {}


def test_spot_dearer_than_planned() -> None:
    fleet = [*AS_PLANNED[:2], charge("i-3", "14.00", "spot"), AS_PLANNED[3]]
    assert causes(fleet, [unused("20")]) == {"spot_price_difference": Decimal("1.50")}


def test_an_on_demand_price_change() -> None:
    fleet = [charge("i-1", "33.00"), *AS_PLANNED[1:]]
    assert causes(fleet, [unused("20")]) == {"price_change": Decimal("33.00") - OD}


def test_a_reservation_never_bought_is_billed_on_demand() -> None:
    # the reserved instance runs at the on-demand rate and there is no unused row: the plan's 2 × 20
    # (one used, one idle) against 32.7726 billed
    fleet = [*AS_PLANNED[:3], charge("i-4", OD, "reserved_1y", pricing_category="Standard")]
    assert causes(fleet) == {"unbought_reservations": OD - 2 * RES}


def test_a_reservation_idle_beyond_the_plan() -> None:
    # the training instance is gone: its reservation hour is unused as well
    assert causes(AS_PLANNED[:3], [unused("40")]) == {
        "commitment_unused": Decimal(40) - RES,
        "fleet_short_of_plan": -RES,
    }


def test_fewer_more_and_partial_instances() -> None:
    assert causes([AS_PLANNED[0], *AS_PLANNED[2:]], [unused("20")]) == {"fleet_short_of_plan": -OD}
    extra = charge("i-9", OD)
    assert causes([*AS_PLANNED, extra], [unused("20")]) == {"off_plan_instances": OD}
    half = charge("i-2", OD / 2, consumed_quantity=Decimal("0.5"))  # 30 minutes at the planned rate
    assert causes([AS_PLANNED[0], half, *AS_PLANNED[2:]], [unused("20")]) == {"fleet_short_of_plan": -OD / 2}


def test_a_daily_row_is_spread_over_its_hours() -> None:
    day = charge(
        "i-2", OD * 24, start=H - timedelta(hours=3), end=H + timedelta(hours=21), consumed_quantity=Decimal(24)
    )
    assert causes([AS_PLANNED[0], day, *AS_PLANNED[2:]], [unused("20")]) == {}


def test_no_plan_in_force_and_no_bill_coverage() -> None:
    assert causes(AS_PLANNED, timeline=[]) == {"off_plan_instances": 2 * OD + SPOT + RES}
    assert causes(AS_PLANNED, covered=False) == {}


def test_a_tagged_disk_is_another_charge_of_the_fleet() -> None:
    disk = charge("vol-1", "0.11", kind="tagged", instance_type=None)
    assert causes([*AS_PLANNED, disk], [unused("20")]) == {"other_fleet_charges": Decimal("0.11")}


def test_a_held_reservation_covers_on_demand_instances_at_its_rate() -> None:
    doc = plan()
    start, end = H - timedelta(days=30), H + timedelta(days=300)
    spec = pd.HeldSpec("ri-1", "aws", "reserved_instance", start, end, RES, "p4d.24xlarge", region="us-east-1", count=1)
    held = pd.Held(
        id="ri-1",
        kind="reserved_instance",
        cloud="aws",
        scope="p4d.24xlarge in us-east-1",
        starts=start,
        ends=end,
        hourly_usd=RES,
        active_hours=24,
        used_by_slot=(Decimal(1),) * 24,
        utilization=Decimal(1),
        horizon_usd=RES * 24,
        unused_horizon_usd=Decimal(0),
        count=1,
    )
    slot = doc.costs.slot_usd[15] - OD + RES  # one on-demand instance covered: billed at the RI's rate
    doc = replace(
        doc,
        request=replace(doc.request, held=(spec,)),
        commitments=replace(doc.commitments, held=(held,)),
        costs=replace(doc.costs, slot_usd=(slot,) * 24),
    )
    covered = charge("i-1", "0", pricing_category="Committed", effective=RES, commitment_id="arn:ri/ri-1")
    assert causes([covered, *AS_PLANNED[1:]], [unused("20")], doc=doc) == {}
    # the RI did not apply (bought in another account, say): that instance is billed on demand
    assert causes(AS_PLANNED, [unused("20")], doc=doc) == {"price_change": OD - RES}


def test_the_plan_in_force_by_the_rebalancers_passes() -> None:
    t0 = datetime(2026, 6, 1, tzinfo=UTC)

    def p(hours: int, decision: str, before: str | None, after: str | None) -> PassRecord:
        at = t0 + timedelta(hours=hours)
        return PassRecord("f", at, at, "h", 1, (), decision, "", before, after)

    history = [
        p(0, "keep", "a", "a"),
        p(5, "adopt", "a", "b"),
        p(6, "dry-run: adopt", "b", "c"),
        p(7, "failed", None, None),
        p(9, "keep", "b", "b"),
        p(12, "adopt", "b", "c"),
    ]
    got = spans(list(reversed(history)))
    assert [(s.plan_id, s.start.hour, s.end and s.end.hour) for s in got] == [
        ("a", 0, 5),
        ("b", 5, 12),
        ("c", 12, None),
    ]
    from gpuprov.billing.timeline import plan_at

    assert [plan_at(got, t0 + timedelta(hours=h)) for h in (0, 4, 5, 11, 12, 40)] == ["a", "a", "b", "b", "c", "c"]
    assert plan_at(got, t0 - timedelta(hours=1)) is None


@pytest.mark.parametrize("hours", [0, 1, 2])
def test_spread_keeps_every_cent(hours: int) -> None:
    c = charge("i-1", "10.00", start=H + timedelta(minutes=20), end=H + timedelta(hours=hours, minutes=50))
    parts = list(rc.spread(c))
    assert sum((share for _h, share, _n in parts), Decimal(0)) == 1
    assert [h for h, _s, _n in parts] == [H + timedelta(hours=k) for k in range(hours + 1)]
