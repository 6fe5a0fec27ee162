"""Expected spot interruptions per instance-hour: AWS from the Spot Instance Advisor, defaults elsewhere.

``pricing/data/spot-advisor.json`` is a verbatim copy of AWS's public Spot Instance Advisor feed,
filtered to the GPU families (alexei-led/spotinfo ``internal/spot/data/spot-advisor-data.json``
@ 5bdc33ce, 2025-06-28; see data/sources/PROVENANCE.md). For each region, OS and instance type it
gives ``r``, the index of the pool's monthly interruption-frequency bucket in the file's ``ranges``
table. Only the Linux pools are read.

A bucket becomes a rate at its midpoint share of a month, per 730-hour month:

======  ========  ==========================
index   label     interruptions per hour
======  ========  ==========================
0       <5%       0.025 / 730
1       5-10%     0.075 / 730
2       10-15%    0.125 / 730
3       15-20%    0.175 / 730
4       >20%      0.25 / 730 (open-ended: 25 % is assumed)
======  ========  ==========================

Buckets are mapped by index, not by the table's ``max`` (the real values are 5/11/16/22/100,
which do not match the labels); the labels come from the file itself.

GCP and Azure publish no interruption rate: ``DEFAULTS`` gives theirs, which are
``gpuprov.models.DEFAULT_INTERRUPTIONS_PER_HOUR`` (about one preemption a month).
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from gpuprov.errors import PricingError
from gpuprov.models import DEFAULT_INTERRUPTIONS_PER_HOUR, HOURS_PER_MONTH, Cloud, Market, Offer

ADVISOR_FILE = "spot-advisor.json"
OS = "Linux"
SOURCE_PREFIX = "aws-spot-advisor:"

# Midpoint share of a month interrupted, by bucket index (see the module docstring).
BUCKET_MIDPOINTS: tuple[Decimal, ...] = (
    Decimal("0.025"),
    Decimal("0.075"),
    Decimal("0.125"),
    Decimal("0.175"),
    Decimal("0.25"),
)

# Clouds without a published rate: expected interruptions per instance-hour on spot.
DEFAULTS: MappingProxyType[str, Decimal] = MappingProxyType(
    {cloud: DEFAULT_INTERRUPTIONS_PER_HOUR[cloud] for cloud in ("gcp", "azure")}
)


@cache
def _advisor() -> dict[str, Any]:
    """The advisor file, read once on first use."""
    raw = (resources.files("pricing") / "data" / ADVISOR_FILE).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(raw)
    return data


@cache
def _labels() -> tuple[str, ...]:
    ranges = sorted(_advisor()["ranges"], key=lambda r: int(r["index"]))
    if [int(r["index"]) for r in ranges] != list(range(len(BUCKET_MIDPOINTS))):
        raise PricingError(f"{ADVISOR_FILE}: expected buckets 0..{len(BUCKET_MIDPOINTS) - 1} in 'ranges'")
    return tuple(str(r["label"]) for r in ranges)


def aws_interruptions_per_hour(region: str, instance_type: str) -> tuple[Decimal, str] | None:
    """Expected interruptions per instance-hour of an AWS Linux spot pool, and where the figure
    comes from (``"aws-spot-advisor:<5%"``), or None when the advisor does not list the pool."""
    pool = _advisor()["spot_advisor"].get(region, {}).get(OS, {}).get(instance_type)
    if pool is None:
        return None
    bucket = int(pool["r"])
    labels = _labels()
    if not 0 <= bucket < len(labels):
        raise PricingError(f"{ADVISOR_FILE}: {region} {instance_type}: bucket {bucket} is not in 'ranges'")
    return BUCKET_MIDPOINTS[bucket] / HOURS_PER_MONTH, SOURCE_PREFIX + labels[bucket]


def pool_rate(offer: Offer) -> tuple[Decimal, str] | None:
    """The interruption rate of one spot pool where a source knows it (AWS: the Spot Advisor
    bucket of its type and region); None elsewhere (GCP, Azure: their cloud's default applies)."""
    if offer.cloud is not Cloud.AWS or offer.market is not Market.SPOT:
        return None
    return aws_interruptions_per_hour(offer.region, offer.instance_type)
