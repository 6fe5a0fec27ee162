"""A simulated week for the rebalancer: a clock tests drive, a price feed that changes, spot
interruptions, and the hindsight-optimal cost to compare with."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuprov.models import Cloud, Market, Offer, SnapshotInfo

T0 = datetime(2026, 6, 1, 0, 0, tzinfo=UTC)  # a Monday


@dataclass
class FakeClock:
    at: datetime = T0

    def now(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


def p4d(region: str, zone: str, market: Market, price: str) -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region=region,
        zone=zone,
        instance_type="p4d.24xlarge",
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=Decimal(1152),
        market=market,
        hourly_usd=Decimal(price),
    )


@dataclass
class PriceFeed:
    """Real p4d.24xlarge on-demand ($32.7726) with spot quotes per zone, and three events."""

    offers: list[Offer] = field(
        default_factory=lambda: [
            p4d("us-east-1", "use1-az1", Market.ON_DEMAND, "32.7726"),
            p4d("us-east-1", "use1-az1", Market.SPOT, "12.50"),
            p4d("us-east-1", "use1-az2", Market.ON_DEMAND, "32.7726"),
            p4d("us-east-1", "use1-az2", Market.SPOT, "14.10"),
            p4d("us-west-2", "usw2-az1", Market.ON_DEMAND, "32.7726"),
            p4d("us-west-2", "usw2-az1", Market.SPOT, "15.90"),
        ]
    )
    version: int = 1
    log: list[str] = field(default_factory=list)

    def at_hour(self, hour: int) -> None:
        if hour == 30:  # spot up in the zone the plan likes
            self._set("use1-az1", Market.SPOT, "29.00", "spot in use1-az1 rises to $29.00")
        if hour == 60:  # a cheaper region appears
            self.offers += [
                p4d("us-east-2", "use2-az1", Market.ON_DEMAND, "27.50"),
                p4d("us-east-2", "use2-az1", Market.SPOT, "9.80"),
            ]
            self.version += 1
            self.log.append("us-east-2 appears: on demand $27.50, spot $9.80")
        if hour == 100:  # an on-demand price cut (as AWS cut p5 in June 2025)
            self._set("usw2-az1", Market.ON_DEMAND, "19.66", "on demand in us-west-2 cut 40% to $19.66")

    def _set(self, zone: str, market: Market, price: str, note: str) -> None:
        self.offers = [
            replace(o, hourly_usd=Decimal(price)) if (o.zone, o.market) == (zone, market) else o for o in self.offers
        ]
        self.version += 1
        self.log.append(note)

    def snapshot(self, now: datetime) -> list[SnapshotInfo]:
        return [
            SnapshotInfo(
                id=self.version, source="sim", cloud=Cloud.AWS, fetched_at=now, row_count=len(self.offers), current=True
            )
        ]

    def price(self, zone: str, itype: str, market: str) -> Decimal:
        for o in self.offers:
            if (o.zone, o.instance_type, o.market.value) == (zone, itype, market):
                return o.hourly_usd
        raise KeyError((zone, itype, market))
