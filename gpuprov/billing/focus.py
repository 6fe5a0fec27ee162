"""The FOCUS specification as gpuprov reads it: the columns of versions 1.0 and 1.2, which
version a file's header is, and how one value of each data type is read.

The column tables (``spec/focus_columns_v1.0.csv``, ``…v1.2.csv``, see ``spec/PROVENANCE.md``)
were parsed from the specification's own column pages: each column's data type (Decimal,
Date/Time, String, JSON), whether it allows nulls, and the version it was introduced in.

Versions. FOCUS has no version column before 1.3; a header is read as 1.2 when it carries a
column introduced after 1.0 (CapacityReservationId, SkuPriceDetails, … — a 1.1 export reads by
the same rules), as 1.0 otherwise. A header with a FOCUS 0.5 column in place of its 1.0
successor (``AmortizedCost``, ``ChargeType``, ``UsageQuantity``) or a column introduced in 1.3
(``ContractApplied``, ``AllocatedMethodId``, ``ServiceProviderName``, …) is a version gpuprov does
not read; a header without the five columns every version since 1.0 has and gpuprov needs
(``CORE``) is not FOCUS.

Values. Nulls are the empty string, ``NULL`` and ``null`` (the sample data and the spec's own
examples write all three). Decimals are plain or scientific (``Decimal``, never a float: a
Parquet double is read through its shortest repr); Date/Time is ISO 8601, read as UTC where it
has no offset (the spec requires UTC), between 2000 and 2100; the enumerations are matched
without regard to case (real exports write ``Usage-based``) and kept in the spec's spelling; a
JSON column holds a JSON object. Any other value is a bad value: the import names the row and
column and stores nothing.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from typing import Any

from gpuprov.errors import UsageError

VERSIONS = ("1.0", "1.2")
CORE = ("BilledCost", "EffectiveCost", "ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd")
# columns that only a FOCUS 0.5 export has (renamed in 1.0) and columns introduced in 1.3
OLDER = ("AmortizedCost", "ChargeType", "UsageQuantity", "UsageUnit")
NEWER = (
    "ContractApplied",
    "AllocatedMethodId",
    "AllocatedMethodDetails",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    "ServiceProviderName",
    "HostProviderName",
)
NULLS = frozenset({"", "NULL", "null"})
# the allowed values of the enumerated columns gpuprov reads (from the column pages)
ENUMS: dict[str, tuple[str, ...]] = {
    "ChargeCategory": ("Usage", "Purchase", "Tax", "Credit", "Adjustment"),
    "ChargeClass": ("Correction",),
    "ChargeFrequency": ("One-Time", "Recurring", "Usage-Based"),
    "PricingCategory": ("Standard", "Dynamic", "Committed", "Other"),
    "CommitmentDiscountStatus": ("Used", "Unused"),
    "CommitmentDiscountCategory": ("Spend", "Usage"),
    "CapacityReservationStatus": ("Used", "Unused"),
}
_ENUM_LOOKUP = {col: {v.lower(): v for v in values} for col, values in ENUMS.items()}
LIMIT = Decimal("1e15")  # no charge, price or quantity in a bill is this large
MAX_DIGITS = 15  # Decimal.adjusted() of LIMIT
MIN_ADJUSTED = -30  # no non-zero amount in a bill is smaller than 1e-30 (a cent is 1e-2, a rate 1e-10)
MAX_SIGNIFICANT = 40  # digits a decimal may carry (exact sums past Decimal's 28 would be rounded)
PLAIN = re.compile(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,9})?\s*", re.ASCII)
FIRST, LAST = datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Column:
    id: str
    data_type: str  # Decimal | Date/Time | String | JSON
    nullable: bool
    non_negative: bool
    mandatory: bool
    introduced: str


@lru_cache(maxsize=2)
def columns(version: str) -> dict[str, Column]:
    """The columns of one FOCUS version, by column id."""
    text = resources.files("gpuprov.billing").joinpath(f"spec/focus_columns_v{version}.csv").read_text("utf-8")
    out = {}
    for r in csv.DictReader(text.splitlines()):
        out[r["column_id"]] = Column(
            id=r["column_id"],
            data_type=r["data_type"],
            nullable=r["allows_nulls"].strip() == "True",
            non_negative="non-negative" in r["number_range"],
            mandatory=r["feature_level"].strip() == "Mandatory",
            introduced=r["introduced_version"].strip(),
        )
    return out


@dataclass(frozen=True)
class Layout:
    """What a header says: the version, the FOCUS columns present (by position), and notes."""

    version: str
    index: dict[str, int]  # FOCUS column id -> position in the row
    missing_mandatory: tuple[str, ...]
    not_focus: tuple[str, ...]  # columns that are neither FOCUS nor x_ (custom)


def detect(header: Sequence[str], where: str) -> Layout:
    """The version of a FOCUS header, or one UsageError: not FOCUS, or a version not read."""
    names = [str(h).strip().lstrip("\ufeff") for h in header]
    present = set(names)
    if len(present) != len(names):
        from collections import Counter

        twice = sorted(n for n, k in Counter(names).items() if k > 1)
        raise UsageError(f"{where}: column {_show(twice[0])} appears twice in the header")
    older = [c for c in OLDER if c in present]
    if older and not all(c in present for c in CORE):
        raise UsageError(
            f"{where}: a FOCUS 0.5 export ({', '.join(older)}); gpuprov reads FOCUS 1.0 and 1.2",
            hint="export the bill as FOCUS 1.0 or 1.2 (AWS Data Exports, Azure Cost Management, GCP)",
        )
    newer = [c for c in NEWER if c in present]
    if newer:
        raise UsageError(
            f"{where}: columns of FOCUS 1.3 or later ({', '.join(newer[:3])}); gpuprov reads FOCUS 1.0 and 1.2",
            hint="export the bill as FOCUS 1.2",
        )
    lacking = [c for c in CORE if c not in present]
    if lacking:
        raise UsageError(
            f"{where}: not a FOCUS export: no {', '.join(lacking)} column"
            + ("" if len(lacking) < len(CORE) else " (none of the FOCUS cost columns)"),
            hint="gpuprov bill import reads FOCUS 1.0 and 1.2 cost and usage exports (CSV or Parquet)",
        )
    v10, v12 = columns("1.0"), columns("1.2")
    version = "1.2" if any(n in v12 and n not in v10 for n in names) else "1.0"
    spec = columns(version)
    index = {n: i for i, n in enumerate(names) if n in spec}
    missing = tuple(c.id for c in spec.values() if c.mandatory and c.id not in index)
    other = tuple(n for n in names if n not in spec and not n.startswith("x_"))
    return Layout(version, index, missing, other)


# ------------------------------------------------------------------------------ values


class BadValue(ValueError):
    """A value that is not what its column's data type allows (the message says why)."""


def _show(value: object, limit: int = 40) -> str:
    text = str(value)
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def is_null(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in NULLS)


def decimal(value: Any, non_negative: bool = False) -> Decimal:
    if isinstance(value, Decimal):
        out = value
    elif isinstance(value, bool):
        raise BadValue(f"not a decimal: {_show(value)}")
    elif isinstance(value, int):
        out = Decimal(value)
    elif isinstance(value, float):
        out = Decimal(repr(value))
    else:
        text = str(value)
        if text.strip().lower() in ("nan", "snan", "inf", "-inf", "+inf", "infinity", "-infinity"):
            raise BadValue(f"not a finite decimal: {_show(value)}")
        if not PLAIN.fullmatch(text):  # Decimal() also reads "1_000" and other scripts' digits
            raise BadValue(f"not a decimal: {_show(value)}")
        try:
            out = Decimal(text.strip())
        except InvalidOperation:
            raise BadValue(f"not a decimal: {_show(value)}") from None
    if not out.is_finite():
        raise BadValue(f"not a finite decimal: {_show(value)}")
    if not out:
        return Decimal(0)  # 0E-999999999 is 0
    if abs(out) >= LIMIT:
        raise BadValue(f"out of range: {_show(value)}")
    if out.adjusted() < MIN_ADJUSTED:
        raise BadValue(f"below 1e{MIN_ADJUSTED} in size: {_show(value)}")
    sign, digits, exponent = out.as_tuple()
    if len(digits) > MAX_SIGNIFICANT:  # trailing zeros go (exactly); more significant digits are refused
        kept = len(digits)
        while kept > 1 and digits[kept - 1] == 0:
            kept -= 1
        if kept > MAX_SIGNIFICANT:
            raise BadValue(f"more than {MAX_SIGNIFICANT} significant digits")
        out = Decimal((sign, digits[:kept], int(exponent) + len(digits) - kept))
    if non_negative and out < 0:
        raise BadValue(f"must not be negative: {_show(value)}")
    return out


def when(value: Any) -> datetime:
    if isinstance(value, datetime):
        out = value
    elif isinstance(value, str):
        try:
            out = datetime.fromisoformat(value.strip())
        except ValueError:
            raise BadValue(f"not an ISO 8601 date and time: {_show(value)}") from None
    else:
        raise BadValue(f"not a date and time: {_show(value)}")
    out = out.replace(tzinfo=UTC) if out.tzinfo is None else out.astimezone(UTC)
    if not FIRST <= out <= LAST:
        raise BadValue(f"outside 2000-2100: {_show(value)}")
    return out


def enum(column: str, value: Any) -> str:
    found = _ENUM_LOOKUP[column].get(str(value).strip().lower())
    if found is None:
        raise BadValue(f"not one of {', '.join(ENUMS[column])}: {_show(value)}")
    return found


def key_values(value: Any) -> dict[str, Any]:
    """A JSON (Key-Value Format) column: a JSON object, or a Parquet map read as pairs."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, list) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        return dict(value)
    if not isinstance(value, str):
        raise BadValue(f"not a JSON object: {_show(value)}")
    try:
        out = json.loads(value)
    except (ValueError, RecursionError):
        raise BadValue(f"not JSON: {_show(value)}") from None
    if not isinstance(out, dict):
        raise BadValue(f"not a JSON object: {_show(value)}")
    return out
