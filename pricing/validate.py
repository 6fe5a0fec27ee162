"""Row validation for live prices: what is skipped, counted by reason, and never stored.

A price is skipped when it is missing, not a finite number, negative or zero, or not in
US dollars; a spot price is skipped when it is above the on-demand price of the same pool
(cloud, region, zone, instance type, GPU) by more than ``spot_factor`` (default 1.5). Where
a spot offer has no on-demand offer in its own zone, the on-demand offer of its region
(zone None) is the reference, if there is one; with no reference the spot offer is kept.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from decimal import Decimal

from gpuprov.models import Market, Offer

DEFAULT_SPOT_FACTOR = Decimal("1.5")

MISSING = "missing price"
ABSURD = "price above $10,000/h or below $0.0001/h"
MAX_PRICE = Decimal(10_000)
MIN_PRICE = Decimal("0.0001")
MAX_FIELD = 1000
IDENTIFIER = re.compile(r"^[A-Za-z0-9._:/-]{1,1000}$")
NOT_FINITE = "price not a finite number"
NEGATIVE = "negative price"
ZERO = "zero price"
CURRENCY = "currency not USD"
SPOT_ABOVE_ON_DEMAND = "spot above on-demand"


def to_price(raw: object) -> Decimal | None:
    """A wire value as a Decimal: None when absent, NaN when it is not a number at all.

    Floats are refused by design: parse JSON with ``parse_float=Decimal`` instead.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, bool) or isinstance(raw, float):
        raise TypeError(f"prices must not pass through float or bool: {raw!r}")
    from gpuprov import numbers

    try:  # the one bounded parser: NaN, infinities, 1e-999999999 and 30-digit values are not prices
        return numbers.parse(raw, "price row")
    except numbers.NumberError:
        return Decimal("NaN")


def price_problem(price: Decimal | None, currency: str = "USD") -> str | None:
    """The reason a single price is unusable, or None."""
    if price is None:
        return MISSING
    if not price.is_finite():
        return NOT_FINITE
    if price < 0:
        return NEGATIVE
    if price == 0:
        return ZERO
    if currency != "USD":
        return CURRENCY
    if price > MAX_PRICE or price < MIN_PRICE:
        return ABSURD
    return None


def pool_group(offer: Offer) -> tuple[str, str, str, str, int]:
    """The offers one spot check needs together: the same instance type and GPUs in one region
    (every zone of it, and the region-wide price)."""
    return (offer.cloud.value, offer.region, offer.instance_type, offer.gpu, offer.gpus_per_instance)


def spot_outliers(group: Iterable[tuple[int, Offer]], spot_factor: Decimal = DEFAULT_SPOT_FACTOR) -> list[int]:
    """The keys of the spot offers in one ``pool_group`` priced above ``spot_factor`` times the
    cheapest on-demand offer of their zone (or, with none there, of their region as a whole)."""
    members = list(group)
    on_demand: dict[str, Decimal] = {}
    for _, offer in members:
        if offer.market is Market.ON_DEMAND:
            zone = offer.zone or ""
            on_demand[zone] = min(on_demand.get(zone, offer.hourly_usd), offer.hourly_usd)
    out = []
    for key, offer in members:
        if offer.market is Market.SPOT:
            ref = on_demand.get(offer.zone or "", on_demand.get(""))
            if ref is not None and offer.hourly_usd > ref * spot_factor:
                out.append(key)
    return out


def check_offers(
    offers: Iterable[Offer], spot_factor: Decimal = DEFAULT_SPOT_FACTOR
) -> tuple[list[Offer], Counter[str]]:
    """The offers that may be stored, and the others counted by reason (order is kept).

    ``pricing.importer`` applies the same two steps to a file too large to hold: ``price_problem``
    row by row, then ``spot_outliers`` over the stored offers a ``pool_group`` at a time."""
    skipped: Counter[str] = Counter()
    good: list[Offer] = []
    for offer in offers:
        problem = price_problem(offer.hourly_usd, offer.currency)
        if problem is None:
            good.append(offer)
        else:
            skipped[problem] += 1
    groups: dict[tuple[str, str, str, str, int], list[tuple[int, Offer]]] = {}
    for i, offer in enumerate(good):
        groups.setdefault(pool_group(offer), []).append((i, offer))
    outliers = {i for group in groups.values() for i in spot_outliers(group, spot_factor)}
    skipped[SPOT_ABOVE_ON_DEMAND] += len(outliers)
    if not skipped[SPOT_ABOVE_ON_DEMAND]:
        del skipped[SPOT_ABOVE_ON_DEMAND]
    return [o for i, o in enumerate(good) if i not in outliers], skipped
