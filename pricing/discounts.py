"""Negotiated discounts, applied to offers when they are read (the catalog keeps list prices).

Configuration (the ``discounts`` key of the YAML config)::

    discounts:
      aws: 0.9                        # every AWS price × 0.9 (10 % off)
      "aws:p4d": 0.8                  # the p4d family × 0.8 instead
      "aws:p5.48xlarge": 0.75         # one instance type
      "gcp:a3": 0.85                  # GCP family = the machine-type prefix (a3), or two parts (a3-megagpu)
      "azure:NCads_A100_v4": 0.88     # Azure family = the size without its vCPU count, or its letters (NC)

A factor multiplies the hourly price and must be in (0, 1]. The most specific key wins:
instance type, then family, then the whole cloud; factors never stack. Keys are
case-insensitive. Discounts apply to every market (on demand, spot, reserved).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from gpuprov.errors import ConfigError
from gpuprov.models import Cloud, Offer

_AZURE_SIZE = re.compile(r"Standard_([A-Za-z]+)\d+([a-z-]*)(_.*)?", re.I)


@dataclass(frozen=True)
class Discounts:
    """Factors by (cloud, key): key None for the whole cloud, else a lower-case family or type."""

    factors: Mapping[tuple[Cloud, str | None], Decimal] = field(default_factory=dict)

    def factor(self, offer: Offer) -> Decimal:
        for key in (*scopes(offer.cloud, offer.instance_type), None):
            found = self.factors.get((offer.cloud, key))
            if found is not None:
                return found
        return Decimal(1)

    def __bool__(self) -> bool:
        return bool(self.factors)


def scopes(cloud: Cloud, instance_type: str) -> tuple[str, ...]:
    """The keys an instance type matches, most specific first (lower case)."""
    itype = instance_type.lower()
    if cloud is Cloud.AWS:
        return (itype, itype.split(".", 1)[0])
    if cloud is Cloud.GCP:
        parts = itype.split("-")
        return (itype, "-".join(parts[:2]), parts[0])
    match = _AZURE_SIZE.fullmatch(instance_type)
    if not match:
        return (itype,)
    letters, suffix, rest = match.groups()
    return (itype, f"{letters}{suffix}{rest or ''}".lower(), letters.lower())


def _factor(key: str, value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ConfigError(f"discount {key!r}: {value!r} is not a number")
    from gpuprov import numbers

    try:
        factor = numbers.decimal(value)
    except numbers.NumberError as exc:
        raise ConfigError(f"discount {key[:40]!r}: {exc.reason}") from None
    if not Decimal(0) < factor <= Decimal(1):
        raise ConfigError(
            f"discount {key!r}: the factor {value} must be above 0 and at most 1",
            hint="a factor multiplies the price: 0.9 means 10 % off",
        )
    return factor


def load_discounts(config: Mapping[str, Any] | None) -> Discounts:
    """Discounts from a loaded config mapping (its ``discounts`` key; absent means none)."""
    section = (config or {}).get("discounts")
    if section is None:
        return Discounts()
    if not isinstance(section, Mapping):
        raise ConfigError(
            "'discounts' must map 'cloud' or 'cloud:family' to a factor",
            hint='e.g. discounts: {aws: 0.9, "aws:p4d": 0.8}',
        )
    factors: dict[tuple[Cloud, str | None], Decimal] = {}
    for raw_key, value in section.items():
        key = str(raw_key).strip()
        cloud_name, _, scope = key.partition(":")
        try:
            cloud = Cloud(cloud_name.strip().lower())
        except ValueError:
            known = ", ".join(c.value for c in Cloud)
            raise ConfigError(f"discount {key!r}: unknown cloud {cloud_name!r}", hint=f"clouds: {known}") from None
        if ":" in key and not scope.strip():
            raise ConfigError(f"discount {key!r}: empty family after ':'")
        scope_key = scope.strip().lower() or None
        if (cloud, scope_key) in factors:
            raise ConfigError(f"discount {key!r} is given twice")
        factors[(cloud, scope_key)] = _factor(key, value)
    return Discounts(factors)


def apply_discounts(offers: Iterable[Offer], discounts: Discounts) -> list[Offer]:
    """New offers with discounted hourly prices (the inputs are left as they are)."""
    out = []
    for offer in offers:
        factor = discounts.factor(offer)
        out.append(offer if factor == 1 else replace(offer, hourly_usd=offer.hourly_usd * factor))
    return out
