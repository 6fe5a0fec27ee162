"""What a price row says about itself: suspect quotes, "no quote" markers and the spot risk of each pool.

Applied whenever offers are read (``gpuprov prices``, ``plan``, the rebalancer, the backtest),
never stored. Every rule and its threshold is in ``THRESHOLDS`` (one table, each with its reason;
README "Prices" prints the same table):

* ``no quote``: a spot price at or above the on-demand price of the same instance type in the
  same location (zone, or region where on demand is regional). Catalogs write such a row where
  they had no spot quote (SkyPilot copies the on-demand price, anycloud repeats it for Azure H200
  in all 28 regions); it is no price, so the row is dropped, and counted by ``screen``.
* ``suspect-spot``: a spot price below ``SUSPECT_SPOT_SHARE`` of the same location's on-demand price.
* ``suspect-on-demand`` / ``suspect-reserved_1y`` / ``suspect-reserved_3y`` / ``suspect-spot-median``
  (robust), two references in the same market:
  - by type: a price below ``ROBUST_SHARE`` (spot: ``ROBUST_SPOT_SHARE``) of the robust median of
    the same instance type's distinct regional prices (each region once, its cheapest zone);
  - by GPU: a per-GPU price below ``GPU_SHARE`` (spot: ``GPU_SPOT_SHARE``) of the robust median,
    over the cloud's instance types with that GPU, of each type's median per-GPU price (each type
    once, so one type listed in 20 zones cannot move it; the bar is lower because hosts differ).
  A robust median is the median of the values within ``ROBUST_WINDOW`` MADs of the plain median
  (a second, trimmed pass, so a cluster of bad rows pulls it less), of at least
  ``ROBUST_MIN_POINTS`` values (with fewer, the rule flags nothing).

A plan leaves suspect quotes out by default (``gpuprov.planning.allowed``; ``--include-suspect``
or the config's ``pricing.include_suspect: true`` lets them in).

Spot risk: every spot offer gets ``interruptions_per_hour`` and ``interruption_source``: the pool's
own rate where a source knows it (``spot_rate``, e.g. the AWS Spot Advisor bucket of its type and
region), otherwise the documented default of its cloud (``gpuprov.models.DEFAULT_INTERRUPTIONS_PER_HOUR``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from statistics import median
from typing import Any

from gpuprov.models import DEFAULT_INTERRUPTIONS_PER_HOUR, Market, Offer
from pricing import azure_sizes

SUSPECT_SPOT_SHARE = Decimal("0.15")
ROBUST_SHARE = Decimal("0.60")  # on demand and commitments: list prices
ROBUST_SPOT_SHARE = Decimal("0.30")  # spot: market prices, which spread wider
GPU_SHARE = Decimal("0.40")  # against the same GPU's other types: hosts differ, so a wider bar
GPU_SPOT_SHARE = Decimal("0.20")
ROBUST_FLAG = {
    Market.ON_DEMAND: "suspect-on-demand",
    Market.SPOT: "suspect-spot-median",
    Market.RESERVED_1Y: "suspect-reserved_1y",
    Market.RESERVED_3Y: "suspect-reserved_3y",
}
ROBUST_WINDOW = Decimal(3)
ROBUST_MIN_POINTS = 3
SUSPECT_PREFIX = "suspect-"

# (rule, threshold, reason): the one table of the thresholds above.
THRESHOLDS: tuple[tuple[str, str, str], ...] = (
    (
        "no quote",
        "spot >= on-demand, same type and location",
        "a catalog writes the on-demand price (or more) where it had no spot quote; a spot market "
        "sells below on demand or not at all",
    ),
    (
        "suspect-spot",
        f"spot < {SUSPECT_SPOT_SHARE:.0%} of the same location's on-demand",
        "real GPU spot discounts stop near 70-80% (AWS Spot Advisor savings top out around 80-90% "
        "for GPU types); a tenth of on demand is a stale or mis-parsed point sample more often than a bargain",
    ),
    (
        "suspect-on-demand, suspect-reserved_1y, suspect-reserved_3y",
        f"per-GPU price < {ROBUST_SHARE:.0%} of the robust median of that GPU, cloud and market",
        "list prices of one GPU vary by region by tens of percent (GCP H100 on demand: $11.06-14.07 per "
        "GPU-hour across 40 regions), not by half; a price below 60% is a mis-joined row (a host priced "
        "with another GPU's SKU) more often than a region that cheap",
    ),
    (
        "suspect-spot-median",
        f"per-GPU spot price < {ROBUST_SPOT_SHARE:.0%} of the robust median spot price of that GPU and cloud",
        "spot prices move by zone and day, so the bar is lower than for list prices; below 30% of the "
        "typical spot price is below what the same GPU's spot market sells at anywhere else",
    ),
    (
        "robust median",
        f"median of distinct (region, type) per-GPU prices within {ROBUST_WINDOW} MADs of their median; "
        f"at least {ROBUST_MIN_POINTS} prices",
        "zones repeat one regional price, so each (region, type) counts once; the trimmed second pass "
        "keeps a cluster of bad rows from pulling the reference down with them",
    ),
)

SpotRate = Callable[[Offer], tuple[Decimal, str] | None]


def is_suspect(offer: Offer) -> bool:
    return any(f.startswith(SUSPECT_PREFIX) for f in offer.flags)


def robust_median(values: Iterable[Decimal]) -> Decimal | None:
    """The median of ``values`` after dropping those more than ROBUST_WINDOW median absolute
    deviations from the plain median; None for fewer than ROBUST_MIN_POINTS values."""
    xs = sorted(values)
    if len(xs) < ROBUST_MIN_POINTS:
        return None
    mid = Decimal(median(xs))
    mad = Decimal(median(abs(x - mid) for x in xs))
    kept = [x for x in xs if abs(x - mid) <= ROBUST_WINDOW * mad] if mad else xs
    return Decimal(median(kept or xs))


def _per_gpu(o: Offer) -> Decimal:
    return o.hourly_usd / o.gpus


@dataclass(frozen=True)
class Annotated:
    """``annotate``'s answer with the rows it dropped as "no quote"."""

    offers: list[Offer]
    no_quote: list[Offer]


Refs = dict[tuple[Any, str, Any], Decimal]


def references(offers: Sequence[Offer]) -> tuple[Refs, Refs]:
    """The two robust references (whole-GPU sizes only):

    * by type: (cloud, instance type, market) -> the robust median of its distinct regional prices
      (each region once, its cheapest zone);
    * by GPU: (cloud, GPU, market) -> the robust median, over the instance types with that GPU, of
      each type's median per-GPU price (each type once, however many regions list it)."""
    by_place: dict[tuple[Any, str, Any], dict[str, Decimal]] = defaultdict(dict)
    gpu_of: dict[tuple[Any, str, Any], tuple[tuple[Any, str, Any], int]] = {}
    for o in offers:
        if o.gpu_fraction is not None or o.gpus_per_instance < 1:
            continue
        key = (o.cloud, o.instance_type, o.market)
        gpu_of[key] = ((o.cloud, o.gpu, o.market), o.gpus_per_instance)
        here = by_place[key]
        here[o.region] = min(here.get(o.region, o.hourly_usd), o.hourly_usd)
    by_type: Refs = {}
    per_gpu: dict[tuple[Any, str, Any], list[Decimal]] = defaultdict(list)
    for key, prices in by_place.items():
        ref = robust_median(prices.values())
        if ref is not None:
            by_type[key] = ref
        gpu_key, count = gpu_of[key]
        per_gpu[gpu_key].append(Decimal(median(prices.values())) / count)
    by_gpu = {k: ref for k, v in per_gpu.items() if (ref := robust_median(v)) is not None}
    return by_type, by_gpu


def annotate_all(offers: Sequence[Offer], spot_rate: SpotRate | None = None) -> Annotated:
    """Offers with their flags and spot risk, and the spot rows dropped as "no quote". Azure sizes
    get their GPUs and GPU memory from Microsoft's size tables (``pricing/azure_sizes.py``), so a
    catalog stored before those were applied reads true too."""
    offers = [azure_sizes.corrected(o) for o in offers]
    od_at: dict[tuple[Any, str, str], Decimal] = {}
    od_region: dict[tuple[Any, str, str], Decimal] = {}
    for o in offers:
        if o.market is Market.ON_DEMAND:
            key = (o.cloud, o.location, o.instance_type)
            od_at[key] = min(od_at.get(key, o.hourly_usd), o.hourly_usd)
            rkey = (o.cloud, o.region, o.instance_type)
            od_region[rkey] = min(od_region.get(rkey, o.hourly_usd), o.hourly_usd)
    kept: list[Offer] = []
    dropped: list[Offer] = []
    for o in offers:
        if o.market is Market.SPOT:
            ref = od_at.get((o.cloud, o.location, o.instance_type)) or od_region.get(
                (o.cloud, o.region, o.instance_type)
            )
            if ref is not None and o.hourly_usd >= ref:
                dropped.append(o)
                continue
        kept.append(o)
    by_type, by_gpu = references(kept)
    out = []
    for o in kept:
        flags = list(o.flags)
        changes: dict[str, object] = {}
        fractional = o.gpu_fraction is not None
        if fractional and "fractional-gpu" not in flags:
            flags.append("fractional-gpu")
        if o.market is Market.SPOT:
            ref = od_at.get((o.cloud, o.location, o.instance_type)) or od_region.get(
                (o.cloud, o.region, o.instance_type)
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
        flag = ROBUST_FLAG[o.market]
        spot = o.market is Market.SPOT
        type_ref = by_type.get((o.cloud, o.instance_type, o.market))
        gpu_ref = by_gpu.get((o.cloud, o.gpu, o.market))
        low = (type_ref is not None and o.hourly_usd < (ROBUST_SPOT_SHARE if spot else ROBUST_SHARE) * type_ref) or (
            gpu_ref is not None and _per_gpu(o) < (GPU_SPOT_SHARE if spot else GPU_SHARE) * gpu_ref
        )
        if low and not fractional and flag not in flags:
            flags.append(flag)
        if flags != list(o.flags):
            changes["flags"] = tuple(flags)
        out.append(replace(o, **changes) if changes else o)  # type: ignore[arg-type]
    return Annotated(out, dropped)


def annotate(offers: Sequence[Offer], spot_rate: SpotRate | None = None) -> list[Offer]:
    """``annotate_all``'s offers (the "no quote" rows left out)."""
    return annotate_all(offers, spot_rate).offers


def as_of_spans(
    offers: Iterable[Offer], fetched: dict[str, datetime] | None = None
) -> dict[str, tuple[datetime, datetime]]:
    """Per cloud, the oldest and newest as-of of these offers: each offer is dated by its source
    row (``Offer.as_of``), else by its cloud's snapshot in ``fetched``."""
    span: dict[str, tuple[datetime, datetime]] = {}
    for o in offers:
        when = o.as_of or (fetched or {}).get(o.cloud.value)
        if when is None:
            continue
        lo, hi = span.get(o.cloud.value, (when, when))
        span[o.cloud.value] = (min(lo, when), max(hi, when))
    return dict(sorted(span.items()))


def as_of_line(spans: dict[str, tuple[datetime, datetime]]) -> str:
    parts = [f"{c} {lo:%Y-%m-%d}" + ("" if lo == hi else f" to {hi:%Y-%m-%d}") for c, (lo, hi) in spans.items()]
    return "prices as of (oldest to newest source row): " + ("; ".join(parts) or "no offers")
