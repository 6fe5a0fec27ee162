"""A simulated month for the bill report: the real rebalancer drives a fleet on in-memory clouds
every hour, a meter records what each instance ran and at what price, and ``focus_export``
writes the charges as a FOCUS 1.2 export in the shape AWS Data Exports use (one row per
resource and hour, the gpuprov tags in Tags, spot as PricingCategory Dynamic, a reserved
instance's idle hours as Unused rows of its CommitmentDiscountId).

The meter is the fake clouds' billing, kept apart from gpuprov: prices come from ``PriceBook``
(what the cloud charges), which a test can move without telling the rebalancer's catalog.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpuprov import planning, rebalance
from gpuprov.models import Cloud, Market
from gpuprov.plandoc import PlanDocument
from gpuprov.store.lease import Leases
from gpuprov.store.plans import PlanStore
from gpuprov.store.state import FleetStore, StateStore
from policies import constraints, loader
from provisioner.base import InstanceHandle, LaunchRequest
from provisioner.drivers.fake import FakeDriver
from tests.rebalance.sim import FakeClock, p4d

HOUR = timedelta(hours=1)
OWNER = "bill-fleet"
ACCOUNT = "123456789012"
ON_DEMAND = Decimal("32.7726")  # p4d.24xlarge list price, us-east-1 (the rebalancer sim's)
OFFERS = [
    p4d("us-east-1", "use1-az1", Market.ON_DEMAND, "32.7726"),
    p4d("us-east-1", "use1-az1", Market.SPOT, "12.50"),
    p4d("us-east-1", "use1-az2", Market.ON_DEMAND, "32.7726"),
    p4d("us-east-1", "use1-az2", Market.SPOT, "14.10"),
    p4d("us-west-2", "usw2-az1", Market.ON_DEMAND, "32.7726"),
    p4d("us-west-2", "usw2-az1", Market.SPOT, "15.90"),
]


@dataclass
class Run:
    """One instance's life on the meter: [start, end) at the book's price each hour."""

    handle: InstanceHandle
    start: datetime
    end: datetime | None = None


class MeteredDriver(FakeDriver):
    """A FakeDriver whose launches and terminations are recorded at the simulated clock's time."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(Cloud.AWS)
        self.clock = clock
        self.runs: dict[str, Run] = {}

    def launch(self, request: LaunchRequest) -> InstanceHandle:
        h = super().launch(request)
        self.runs.setdefault(h.instance_id, Run(h, self.clock.now()))
        return h

    def terminate(self, instance_ids: Any) -> None:
        super().terminate(instance_ids)
        for i in instance_ids:
            run = self.runs.get(i)
            if run is not None and run.end is None:
                run.end = self.clock.now()


@dataclass
class PriceBook:
    """What the cloud charges per instance-hour: the catalog's price, or a test's override from an hour on."""

    rises: list[tuple[str, str, datetime, Decimal]] = field(default_factory=list)  # zone, market, from, price

    def price(self, h: InstanceHandle, hour: datetime) -> Decimal:
        for zone, market, since, price in self.rises:
            if (h.zone, h.market.value) == (zone, market) and hour >= since:
                return price
        for o in OFFERS:
            if (o.zone, o.instance_type, o.market) == (h.zone, h.instance_type, h.market):
                return o.hourly_usd
        raise KeyError(h)


def first_plan(start: datetime) -> PlanDocument:
    pol = constraints.apply(loader.load("day-night"), constraints.Overrides(gpus=32, gpu="a100-40gb"))
    pol = constraints.apply(pol, constraints.Overrides(markets=("on_demand", "spot")))
    spec = planning.policy_spec(pol, ["A100-40GB"], "cbc", 0.001, 60.0)
    context = planning.policy_context(pol)
    solved = planning.run(planning.request_from_spec(spec, OFFERS))
    snaps = [_snapshot(start)]
    return planning.document(planning.plan_id(spec, snaps, context), solved, snaps, 32, spec, context, start)


def _snapshot(at: datetime) -> Any:
    from gpuprov.models import SnapshotInfo

    return SnapshotInfo(id=1, source="sim", cloud=Cloud.AWS, fetched_at=at, row_count=len(OFFERS), current=True)


def simulate(
    url: str,
    start: datetime,
    hours: int,
    after_pass: Callable[[int, MeteredDriver, str], None] | None = None,
    every: int = 12,
) -> MeteredDriver:
    """Run the rebalancer for ``hours`` hours: a pass at every turn of the schedule (the hour the
    plan's demand changes) and every ``every`` hours besides; the meter is returned."""
    clock = FakeClock(start)
    driver = MeteredDriver(clock)
    plans = PlanStore(url)
    first = first_plan(start)
    plans.save(first)
    memo: dict[str, PlanDocument] = {}

    def replan(doc: PlanDocument, offers: Any, snapshots: Any, unavailable: Any, created: Any, extra: Any) -> Any:
        key = json.dumps(
            [doc.plan_id, sorted(map(str, extra["incumbent"].items())), doc.slot_at(created)], default=str
        )  # prices never move for the rebalancer here: the slot's demand and what runs decide the solve
        if key not in memo:
            memo[key] = planning.replan(doc, offers, [_snapshot(start)], unavailable, created, extra)
        return memo[key]

    world = rebalance.World(
        drivers={Cloud.AWS: driver},
        offers=lambda _names: list(OFFERS),
        snapshots=lambda: [_snapshot(start)],
        refresh=None,
        plans=plans,
        state=StateStore(url),
        fleets=FleetStore(url),
        leases=Leases(url),
        replan=replan,
    )
    settings = rebalance.Settings(owner=OWNER, holder="sim", lead=timedelta(0))

    def demand(t: datetime) -> list[int]:
        return [v[first.slot_at(t)] for _w, v in sorted(first.demand.items())]

    for hour in range(hours):
        clock.at = start + hour * HOUR
        if hour % every and demand(clock.at) == demand(clock.at - HOUR):
            continue
        rec = rebalance.run_pass(world, settings, clock, initial_plan=first.plan_id)
        if after_pass is not None:
            after_pass(hour, driver, rec.plan_after or first.plan_id)
    clock.at = start + hours * HOUR
    return driver


@dataclass(frozen=True)
class Idle:
    """A reservation the account holds that nothing uses: one Unused row an hour."""

    arn: str
    region: str
    instance_type: str
    hourly_usd: Decimal
    start: datetime
    end: datetime


HEADER = [
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType",
    "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "CapacityReservationId",
    "CapacityReservationStatus", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId",
    "CommitmentDiscountName", "CommitmentDiscountQuantity", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "CommitmentDiscountUnit", "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice",
    "EffectiveCost", "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName",
    "ResourceType", "ServiceCategory", "ServiceName", "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails",
    "SkuPriceId", "SubAccountId", "SubAccountName", "SubAccountType", "Tags", "x_Operation", "x_ServiceCode",
]  # fmt: skip


def _z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def focus_export(
    path: Path,
    meter: MeteredDriver,
    book: PriceBook,
    start: datetime,
    end: datetime,
    skip: set[str] = frozenset(),  # type: ignore[assignment]
    idle: list[Idle] | None = None,
) -> list[dict[str, str]]:
    """Write the month's charges as FOCUS 1.2 CSV; the rows written."""
    rows: list[dict[str, str]] = []
    base = {
        "BillingAccountId": ACCOUNT,
        "BillingAccountName": "sim",
        "BillingAccountType": "Billing Account",
        "BillingCurrency": "USD",
        "BillingPeriodStart": _z(start),
        "BillingPeriodEnd": _z(end),
        "ChargeCategory": "Usage",
        "ChargeFrequency": "Usage-Based",
        "InvoiceIssuerName": "Amazon Web Services, Inc.",
        "ProviderName": "AWS",
        "PublisherName": "Amazon Web Services, Inc.",
        "ServiceCategory": "Compute",
        "ServiceSubcategory": "Virtual Machines",
        "ServiceName": "Amazon Elastic Compute Cloud",
        "SubAccountId": ACCOUNT,
        "SubAccountName": "sim",
        "SubAccountType": "AWS Account",
        "x_ServiceCode": "AmazonEC2",
        "x_Operation": "RunInstances",
    }
    for run in sorted(meter.runs.values(), key=lambda r: r.handle.instance_id):
        h = run.handle
        if h.instance_id in skip:
            continue
        spot = h.market is Market.SPOT
        hour = run.start
        stop = min(run.end or end, end)
        while hour < stop:
            price = book.price(h, hour)
            usage = "SpotUsage" if spot else "BoxUsage"
            rows.append(
                {
                    **base,
                    "AvailabilityZone": h.zone or "",
                    "BilledCost": str(price),
                    "EffectiveCost": str(price),
                    "ContractedCost": str(price),
                    "ContractedUnitPrice": str(price),
                    "ListCost": str(ON_DEMAND),
                    "ListUnitPrice": str(ON_DEMAND),
                    "ChargeDescription": f"${price} per {'Spot' if spot else 'On Demand'} Linux {h.instance_type} "
                    "Instance Hour",
                    "ChargePeriodStart": _z(hour),
                    "ChargePeriodEnd": _z(hour + HOUR),
                    "ConsumedQuantity": "1",
                    "ConsumedUnit": "Hours",
                    "PricingCategory": "Dynamic" if spot else "Standard",
                    "PricingQuantity": "1",
                    "PricingUnit": "Hours",
                    "RegionId": h.region,
                    "RegionName": h.region,
                    "ResourceId": h.instance_id,
                    "ResourceType": "Instance",
                    "SkuId": "SIMSKU" + h.instance_type.replace(".", ""),
                    "SkuMeter": f"{usage}:{h.instance_type}",
                    "SkuPriceDetails": json.dumps({"InstanceType": h.instance_type}),
                    "Tags": json.dumps(
                        {
                            "gpuprov-owner": h.owner,
                            "gpuprov-plan": h.plan_id,
                            "gpuprov-token": h.token,
                            "gpuprov-workload": h.workload,
                            "gpuprov-market": h.market.value,
                        }
                    ),
                }
            )
            hour += HOUR
    for r in idle or []:
        hour = r.start
        while hour < r.end:
            rows.append(
                {
                    **base,
                    "BilledCost": "0",
                    "EffectiveCost": str(r.hourly_usd),
                    "ContractedCost": "0",
                    "ListCost": "0",
                    "ChargeDescription": f"Reserved instance {r.instance_type} unused hour",
                    "ChargePeriodStart": _z(hour),
                    "ChargePeriodEnd": _z(hour + HOUR),
                    "CommitmentDiscountCategory": "Usage",
                    "CommitmentDiscountId": r.arn,
                    "CommitmentDiscountName": r.arn.rsplit("/", 1)[-1],
                    "CommitmentDiscountQuantity": "1",
                    "CommitmentDiscountStatus": "Unused",
                    "CommitmentDiscountType": "Reserved Instance",
                    "CommitmentDiscountUnit": "Hours",
                    "PricingCategory": "Committed",
                    "PricingQuantity": "1",
                    "PricingUnit": "Hours",
                    "RegionId": r.region,
                    "RegionName": r.region,
                    "ResourceId": r.arn,
                    "ResourceType": "Reserved Instance",
                    "Tags": "{}",
                }
            )
            hour += HOUR
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, HEADER, restval="")
        w.writeheader()
        w.writerows(rows)
    return rows
