"""Expected spot interruptions per instance-hour: AWS from the Spot Instance Advisor, defaults elsewhere.

``pricing/data/spot-advisor.json`` is a verbatim copy of AWS's public Spot Instance Advisor feed,
filtered to the GPU families (alexei-led/spotinfo ``internal/spot/data/spot-advisor-data.json``
@ 5bdc33ce, 2025-06-28; see data/sources/PROVENANCE.md). For each region, OS and instance type it
gives ``r``, the index of the pool's monthly interruption-frequency bucket in the file's ``ranges``
table. Only the Linux pools are read.

The feed is refreshable: ``gpuprov pricing spot-advisor refresh`` fetches AWS's live feed
(``pricing/spot_advisor.py``), checks it with ``parse_feed`` (the same checks the bundle passes),
keeps the GPU families and stores it with its fetch time. ``current(stored)`` is the feed rates
are read from: the stored one where it was fetched after the bundle's date, else the bundle.
Each rate names its bucket and its feed: ``aws-spot-advisor:<5% bundled 2025-06-28`` or
``aws-spot-advisor:<5% fetched 2026-05-20``.

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
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from gpuprov.errors import PricingError
from gpuprov.models import DEFAULT_INTERRUPTIONS_PER_HOUR, HOURS_PER_MONTH, Cloud, Market, Offer

ADVISOR_FILE = "spot-advisor.json"
BUNDLED_AS_OF = datetime(2025, 6, 28, tzinfo=UTC)  # the bundled copy's date (see PROVENANCE)
OS = "Linux"
SOURCE_PREFIX = "aws-spot-advisor:"
# The GPU families: every AWS instance family p<digit>…, g<digit>… or gr<digit>… (p5en, g4dn, g5g,
# gr6, p6-b200), the same ``p*``/``g*`` the Price List adapter asks for (pricing/aws.py).
GPU_TYPE = re.compile(r"(?:p|g|gr)\d[a-z0-9-]*\.[a-z0-9-]+")
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
MAX_POOLS = 100_000  # GPU pools in one feed (the real feed has about 1,400 over both OSes)

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


class FeedError(PricingError):
    """A Spot Advisor feed that is not what AWS publishes (one line; nothing is stored)."""


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_feed(data: Any, where: str = "the Spot Advisor feed") -> dict[str, Any]:
    """The feed checked and cut to the GPU families: ``ranges`` (buckets 0..4, each with ``index``,
    ``label``, ``dots``, ``max``), ``spot_advisor[region][os][type] = {"s": saving, "r": bucket}``
    (only GPU types kept), ``instance_types`` (GPU types, where the feed has them) and
    ``global_rate``. Raises ``FeedError`` (one line) for anything else or a feed with no GPU
    Linux pool."""
    if not isinstance(data, dict):
        raise FeedError(f"{where}: not a JSON object")
    ranges = data.get("ranges")
    if not isinstance(ranges, list) or len(ranges) != len(BUCKET_MIDPOINTS):
        raise FeedError(f"{where}: 'ranges' is not a list of {len(BUCKET_MIDPOINTS)} buckets")
    kept_ranges = []
    for r in ranges:
        if not (
            isinstance(r, dict)
            and _int(r.get("index"))
            and isinstance(r.get("label"), str)
            and 0 < len(r["label"]) <= 20
            and _int(r.get("dots"))
            and _number(r.get("max"))
        ):
            raise FeedError(f"{where}: a 'ranges' entry lacks index, label, dots or max: {str(r)[:80]}")
        kept_ranges.append({k: r[k] for k in ("index", "label", "dots", "max")})
    kept_ranges.sort(key=lambda r: int(r["index"]))
    if [r["index"] for r in kept_ranges] != list(range(len(BUCKET_MIDPOINTS))):
        raise FeedError(f"{where}: expected buckets 0..{len(BUCKET_MIDPOINTS) - 1} in 'ranges'")
    regions = data.get("spot_advisor")
    if not isinstance(regions, dict):
        raise FeedError(f"{where}: 'spot_advisor' is not an object")
    pools: dict[str, dict[str, dict[str, dict[str, int | float]]]] = {}
    count = linux = 0
    for region, by_os in regions.items():
        if not NAME.fullmatch(region) or not isinstance(by_os, dict):
            raise FeedError(f"{where}: region {region[:64]!r} is not a name with an object of OSes")
        for os_name, by_type in by_os.items():
            if not NAME.fullmatch(os_name) or not isinstance(by_type, dict):
                raise FeedError(f"{where}: {region}: OS {os_name[:64]!r} is not a name with an object of types")
            for itype, pool in by_type.items():
                if not isinstance(itype, str) or not GPU_TYPE.fullmatch(itype):
                    continue  # not a GPU family: dropped unread
                if not (isinstance(pool, dict) and _int(pool.get("r")) and _number(pool.get("s"))):
                    raise FeedError(f"{where}: {region} {os_name} {itype}: not {{'s': saving, 'r': bucket}}")
                if not 0 <= pool["r"] < len(BUCKET_MIDPOINTS):
                    raise FeedError(f"{where}: {region} {itype}: bucket {pool['r']} is not in 'ranges'")
                count += 1
                linux += os_name == OS
                if count > MAX_POOLS:
                    raise FeedError(f"{where}: more than {MAX_POOLS:,} GPU pools")
                pools.setdefault(region, {}).setdefault(os_name, {})[itype] = {"s": pool["s"], "r": pool["r"]}
    if not linux:
        raise FeedError(f"{where}: no GPU instance type has a {OS} pool (an empty feed)")
    out: dict[str, Any] = {"ranges": kept_ranges, "spot_advisor": pools}
    types = data.get("instance_types")
    if isinstance(types, dict):
        out["instance_types"] = {k: v for k, v in types.items() if isinstance(k, str) and GPU_TYPE.fullmatch(k)}
    if isinstance(data.get("global_rate"), str):
        out["global_rate"] = data["global_rate"][:20]
    return out


def linux_pools(feed: Mapping[str, Any]) -> int:
    return sum(len(by_os.get(OS, {})) for by_os in feed["spot_advisor"].values())


@dataclass(frozen=True)
class Advisor:
    """One checked feed and where it comes from (``bundled 2025-06-28``, ``fetched 2026-05-20``)."""

    feed: Mapping[str, Any]
    origin: str
    as_of: datetime

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(str(r["label"]) for r in self.feed["ranges"])

    def rate(self, region: str, instance_type: str) -> tuple[Decimal, str] | None:
        """Expected interruptions per instance-hour of an AWS Linux spot pool, and where the figure
        comes from (``"aws-spot-advisor:<5% bundled 2025-06-28"``), or None when the feed does not
        list the pool."""
        pool = self.feed["spot_advisor"].get(region, {}).get(OS, {}).get(instance_type)
        if pool is None:
            return None
        bucket = int(pool["r"])
        return BUCKET_MIDPOINTS[bucket] / HOURS_PER_MONTH, f"{SOURCE_PREFIX}{self.labels[bucket]} {self.origin}"

    def pool_rate(self, offer: Offer) -> tuple[Decimal, str] | None:
        """The interruption rate of one spot pool where the feed knows it (AWS: the Spot Advisor
        bucket of its type and region); None elsewhere (GCP, Azure: their cloud's default applies)."""
        if offer.cloud is not Cloud.AWS or offer.market is not Market.SPOT:
            return None
        return self.rate(offer.region, offer.instance_type)


@cache
def _advisor() -> dict[str, Any]:
    """The bundled file, read and checked once on first use."""
    raw = (resources.files("pricing") / "data" / ADVISOR_FILE).read_text(encoding="utf-8")
    return parse_feed(json.loads(raw), ADVISOR_FILE)


def bundled() -> Advisor:
    return Advisor(_advisor(), f"bundled {BUNDLED_AS_OF:%Y-%m-%d}", BUNDLED_AS_OF)


def current(stored: tuple[Mapping[str, Any], datetime] | None) -> Advisor:
    """The feed rates are read from: a stored (refreshed) one fetched after the bundle's date,
    else the bundle. A stored feed is checked again; a broken one is an error, not ignored."""
    if stored is None:
        return bundled()
    feed, fetched_at = stored
    if fetched_at <= BUNDLED_AS_OF:
        return bundled()
    checked = parse_feed(feed, "the stored Spot Advisor feed")
    return Advisor(checked, f"fetched {fetched_at.astimezone(UTC):%Y-%m-%d}", fetched_at)


def aws_interruptions_per_hour(region: str, instance_type: str) -> tuple[Decimal, str] | None:
    """The bundled feed's rate of one AWS Linux spot pool (see ``Advisor.rate``)."""
    return bundled().rate(region, instance_type)


def pool_rate(offer: Offer) -> tuple[Decimal, str] | None:
    """The bundled feed's rate of one spot pool (see ``Advisor.pool_rate``)."""
    return bundled().pool_rate(offer)
