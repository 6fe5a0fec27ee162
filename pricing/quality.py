"""What a price row says about itself: suspect quotes and the spot risk of each pool.

Applied whenever offers are read (``gpuprov prices``, ``plan``, the rebalancer), never stored:

* ``suspect-spot``: a spot price below 15% of the on-demand price of the same instance type in
  the same location (zone, or region where the on-demand price is regional). Real spot discounts
  on GPUs rarely pass 70-80%; a quote at a tenth of on-demand is a stale or mis-parsed row more
  often than a bargain.
* ``suspect-on-demand``: an on-demand price more than 40% below the median on-demand price of the
  same instance type across the cloud's locations (list prices vary by region by tens of percent,
  not by half).

Spot risk: every spot offer gets ``interruptions_per_hour`` and ``interruption_source``: the pool's
own rate where a source knows it (``spot_rate``, e.g. the AWS Spot Advisor bucket of its type and
region), otherwise the documented default of its cloud (``gpuprov.models.DEFAULT_INTERRUPTIONS_PER_HOUR``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import Decimal
from statistics import median

from gpuprov.models import DEFAULT_INTERRUPTIONS_PER_HOUR, Cloud, Market, Offer

# Sizes that hold a share of one GPU, by the clouds' own size documentation (Azure NVv4: AMD
# MI25 partitions; NVadsA10 v5: NVIDIA A10 partitions). Catalogs list them as "1 GPU".
FRACTIONAL: dict[tuple[Cloud, str], Decimal] = {
    (Cloud.AZURE, "Standard_NV4as_v4"): Decimal(1) / 8,
    (Cloud.AZURE, "Standard_NV8as_v4"): Decimal(1) / 4,
    (Cloud.AZURE, "Standard_NV16as_v4"): Decimal(1) / 2,
    (Cloud.AZURE, "Standard_NV6ads_A10_v5"): Decimal(1) / 6,
    (Cloud.AZURE, "Standard_NV12ads_A10_v5"): Decimal(1) / 3,
    (Cloud.AZURE, "Standard_NV18ads_A10_v5"): Decimal(1) / 2,
}

SUSPECT_SPOT_SHARE = Decimal("0.15")
SUSPECT_ON_DEMAND_SHARE = Decimal("0.60")  # more than 40% below the median
SpotRate = Callable[[Offer], tuple[Decimal, str] | None]


def annotate(offers: Sequence[Offer], spot_rate: SpotRate | None = None) -> list[Offer]:
    od_at: dict[tuple[str, str, str], Decimal] = {}
    od_region: dict[tuple[str, str, str], Decimal] = {}
    by_type: dict[tuple[str, str], list[Decimal]] = defaultdict(list)
    for o in offers:
        if o.market is Market.ON_DEMAND:
            key = (o.cloud.value, o.location, o.instance_type)
            od_at[key] = min(od_at.get(key, o.hourly_usd), o.hourly_usd)
            rkey = (o.cloud.value, o.region, o.instance_type)
            od_region[rkey] = min(od_region.get(rkey, o.hourly_usd), o.hourly_usd)
            by_type[(o.cloud.value, o.instance_type)].append(o.hourly_usd)
    medians = {k: Decimal(median(v)) for k, v in by_type.items()}
    out = []
    for o in offers:
        flags = list(o.flags)
        changes: dict[str, object] = {}
        share = FRACTIONAL.get((o.cloud, o.instance_type))
        if share is not None and o.gpu_fraction is None:
            changes.update(gpu_fraction=share, gpus_per_instance=0)
            flags.append("fractional-gpu")
        if o.market is Market.SPOT:
            ref = od_at.get((o.cloud.value, o.location, o.instance_type)) or od_region.get(
                (o.cloud.value, o.region, o.instance_type)
            )
            if ref and o.hourly_usd < SUSPECT_SPOT_SHARE * ref and "suspect-spot" not in flags:
                flags.append("suspect-spot")
            known = spot_rate(o) if spot_rate is not None else None
            if known is not None:
                changes.update(interruptions_per_hour=known[0], interruption_source=known[1])
            elif o.interruptions_per_hour is None:
                changes.update(
                    interruptions_per_hour=DEFAULT_INTERRUPTIONS_PER_HOUR.get(o.cloud.value, Decimal(0)),
                    interruption_source=f"default:{o.cloud.value}",
                )
        elif o.market is Market.ON_DEMAND:
            mid = medians.get((o.cloud.value, o.instance_type))
            if mid and o.hourly_usd < SUSPECT_ON_DEMAND_SHARE * mid and "suspect-on-demand" not in flags:
                flags.append("suspect-on-demand")
        if flags != list(o.flags):
            changes["flags"] = tuple(flags)
        out.append(replace(o, **changes) if changes else o)  # type: ignore[arg-type]
    return out
