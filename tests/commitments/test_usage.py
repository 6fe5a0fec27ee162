"""commitments/usage.py against numbers worked out another way (instance-hours, not per-instance shares)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from commitments.records import Commitment, Kind
from commitments.usage import Running, usage

NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)
S, E = datetime(2026, 6, 1, tzinfo=UTC), datetime(2027, 6, 1, tzinfo=UTC)
P4D, G5 = Decimal("21.957642"), Decimal("1.006")
PRICES = {("aws", "us-east-1", "p4d.24xlarge"): P4D, ("aws", "us-east-1", "g5.xlarge"): G5}


def counted(cid: str, count: int, hourly: str, zone: str | None = None, **kw: object) -> Commitment:
    fields: dict[str, object] = dict(
        id=cid,
        cloud="aws",
        kind=Kind.RESERVED_INSTANCE,
        starts=S,
        ends=E,
        instance_type="p4d.24xlarge",
        region="us-east-1",
        zone=zone,
        count=count,
        hourly_usd=Decimal(hourly),
    )
    fields.update(kw)
    return Commitment(**fields)  # type: ignore[arg-type]


def plan(cid: str, usd: str, family: str | None = None, discount: str | None = None) -> Commitment:
    return Commitment(
        id=cid,
        cloud="aws",
        kind=Kind.SAVINGS_PLAN,
        starts=S,
        ends=E,
        family=family,
        region="us-east-1" if family else None,
        usd_per_hour=Decimal(usd),
        hourly_usd=Decimal(usd),
        term="1y",
        discount=None if discount is None else Decimal(discount),
    )


def run(itype: str, zone: str, n: int) -> list[Running]:
    return [Running("aws", "us-east-1", zone, itype) for _ in range(n)]


RUNNING = run("p4d.24xlarge", "use1-az1", 2) + run("p4d.24xlarge", "use1-az2", 4) + run("g5.xlarge", "use1-az4", 3)


def test_reservations_then_savings_plans_share_the_running_fleet() -> None:
    records = [
        counted("ri-a", 4, "13.921094"),
        counted("ri-z", 1, "13.5", zone="use1-az1"),
        counted("ri-old", 2, "13.0", ends=datetime(2026, 10, 1, tzinfo=UTC)),  # expired: not shown
        plan("sp-compute", "20", discount="0.2"),
        plan("sp-g5", "1", family="g5"),  # its discount from the table: 30 %
    ]
    rows = {r["id"]: r for r in usage(records, RUNNING, PRICES, NOW, {"ec2_instance_1y": {"g5": Decimal("0.3")}})}
    assert set(rows) == {"ri-a", "ri-z", "sp-compute", "sp-g5"}
    # 6 p4d run: the zonal RI takes one in use1-az1, the regional one 4 more; one p4d is left over
    assert (rows["ri-z"]["used"], rows["ri-z"]["unused_hourly_usd"]) == (1, Decimal(0))
    assert (rows["ri-a"]["used"], rows["ri-a"]["utilization"], rows["ri-a"]["unused_hourly_usd"]) == (4, 1, 0)
    # the g5 plan ($1/h at 1.006 × 0.7 an instance-hour) is used up
    assert rows["sp-g5"]["used"] == Decimal(1) and rows["sp-g5"]["unused_hourly_usd"] == 0
    # the Compute plan covers the spare p4d and the g5 instance-hours the g5 plan did not:
    # 3 − 1 / 0.7042 of them, at 1.006 × 0.8
    g5_hours_left = 3 - Decimal(1) / (G5 * Decimal("0.7"))
    expected = P4D * Decimal("0.8") + g5_hours_left * G5 * Decimal("0.8")
    assert abs(rows["sp-compute"]["used"] - expected) < Decimal("1e-9")
    assert abs(rows["sp-compute"]["unused_hourly_usd"] - (20 - expected)) < Decimal("1e-9")
    assert abs(expected - Decimal("18.8376565")) < Decimal("1e-6")  # 17.5661136 + 1.5799489 × 0.8048


def test_idle_commitments_cost_their_whole_hourly_and_unknown_rates_are_said() -> None:
    records = [
        counted("ri-idle", 3, "13.921094", instance_type="p5.48xlarge"),
        plan("sp-norate", "5"),
    ]
    rows = {r["id"]: r for r in usage(records, RUNNING, PRICES, NOW, {})}
    assert rows["ri-idle"]["used"] == 0
    assert rows["ri-idle"]["unused_hourly_usd"] == Decimal("41.763282")
    assert rows["sp-norate"]["used"] == 0 and rows["sp-norate"]["unused_hourly_usd"] == Decimal(5)
    assert "no discount known" in rows["sp-norate"]["note"]


def test_a_plan_larger_than_the_usage_is_partly_unused() -> None:
    rows = usage([plan("sp", "100", discount="0.25")], run("g5.xlarge", "use1-az4", 2), PRICES, NOW)
    assert rows[0]["used"] == Decimal("1.509")  # 2 × 1.006 × 0.75
    assert rows[0]["unused_hourly_usd"] == Decimal("98.491")
