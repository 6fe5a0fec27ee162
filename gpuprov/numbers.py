"""The one parser for every number gpuprov reads from a file, a flag, an environment variable or
a price row: bounded before it is used, so that no value can make a plan take gigabytes.

``parse(value, key)`` reads a number for one input of ``RANGES`` (the table below: each input's
range, unit and, for money, the quantum it is rounded to where it enters); ``decimal(value,
what, low, high)`` does the same for a range given at the call. Both refuse, with a
``NumberError`` (a ``ValueError``; callers put their own location in front of its ``reason``):

* anything but plain decimal text (``12``, ``-0.5``, ``1.5e3``), an ``int`` or a finite
  ``float``: no NaN, no infinities, no ``0x..``, no ``1_000``, nothing over ``MAX_TEXT``
  characters;
* a non-zero value whose decimal exponent is outside ``±MAX_EXPONENT`` (``1e-999999999`` and
  ``1e999999999`` are refused here, before any arithmetic sees them);
* more than ``MAX_DIGITS`` significant digits;
* a value outside the input's range.

A YAML float arrives as a :class:`gpuprov.safeyaml.YamlFloat` that keeps its text, so
``1.0e-999999999`` (which PyYAML would round to 0.0) is refused like its string spelling.
A reason never quotes the value: it may come from a file, and errors never quote files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

MAX_TEXT = 64
MAX_EXPONENT = 12
MAX_DIGITS = 20
USD = Decimal("1e-10")  # money's quantum where it enters: the AWS Price List's own precision
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,9})?")


class NumberError(ValueError):
    """A number refused; ``reason`` says why without quoting it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Range:
    low: Decimal
    high: Decimal
    unit: str = ""
    quantum: Decimal | None = None  # money: rounded to this where it enters
    low_open: bool = False  # the low end itself is refused (a factor must be > 0)
    whole: bool = False  # a count: no fraction

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        kind = "a whole number" if self.whole else "a number"
        if self.low_open:
            return f"{kind} above {self.low} and at most {self.high:,}{unit}"
        return f"{kind} between {self.low} and {self.high:,}{unit}"


def _r(
    low: int | str, high: int | str, unit: str = "", money: bool = False, open_low: bool = False, whole: bool = False
) -> Range:
    return Range(Decimal(low), Decimal(high), unit, USD if money else None, open_low, whole)


# Every input number gpuprov reads, by where it is read, and its range.
RANGES: dict[str, Range] = {
    # the config file (gpuprov/config.py)
    "limits.max_launch_per_run": _r(0, 1_000_000, "launches", whole=True),
    "limits.max_price_age_hours": _r(0, 8_760, "hours"),
    "limits.unavailable_ttl_minutes": _r(0, 525_600, "minutes"),
    "limits.budget_per_hour": _r(0, 10**9, "USD per hour", money=True),
    "discounts": _r(0, 1, "(a price factor)", open_low=True),
    "savings_plans": _r(0, "0.99", "(a share off on-demand)"),
    "network.connect_timeout": _r("0.1", 300, "seconds"),
    "network.read_timeout": _r("0.1", 3_600, "seconds"),
    "network.connect_retries": _r(0, 10, "retries", whole=True),
    # flags
    "--budget": _r(0, 10**9, "USD per hour", money=True),
    "--min-saving": _r(0, 10**9, "USD over the horizon", money=True),
    "--min-saving-fraction": _r(0, 1),
    "--disruption-share": _r(0, 1),
    "--max-spot-fraction": _r(0, 1),
    "--what-if-demand": _r("0.01", 10, "(a share of the demand)"),
    "--wait": _r(0, 86_400, "seconds"),
    "--deadline": _r(1, 86_400, "seconds"),
    "--timeout": _r("0.1", 86_400, "seconds"),
    # environment variables (the fake clouds of tests and dry runs)
    "GPUPROV_FAKE_LATENCY": _r(0, 60, "seconds"),
    "GPUPROV_FAKE_RATE": _r("0.01", 100_000, "calls per second"),
    # files: commitments, policies, price rows, price history
    "commitment amount": _r(0, 10**7, "USD", money=True),
    "commitment discount": _r(0, 1),
    "policy number": _r(0, 10**9),
    "price row": _r(-(10**12), 10**12),  # a price source's number: bounded here, judged by pricing/validate.py
    "price": _r("0.0001", 10_000, "USD per hour", money=True),
}


def _text(value: object) -> str:
    from gpuprov.safeyaml import YamlFloat

    if isinstance(value, bool) or value is None:
        raise NumberError("must be a number")
    if isinstance(value, YamlFloat):
        text = value.text.replace("_", "").strip()
        if _NUMBER.fullmatch(text):
            return text
        value = float(value)  # sexagesimal or .inf/.nan: judged by its value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise NumberError("must be a finite number")
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 64:
            raise NumberError(f"has more than {MAX_DIGITS} digits")
        return str(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise NumberError("must be a finite number")
        return str(value)
    if not isinstance(value, str):
        raise NumberError("must be a number")
    text = value.strip()
    if len(text) > MAX_TEXT:
        raise NumberError(f"is longer than {MAX_TEXT} characters")
    if not _NUMBER.fullmatch(text):
        raise NumberError("must be a plain decimal number such as 12, 0.5 or 1.5e3")
    return text


def decimal(
    value: object, low: Decimal | None = None, high: Decimal | None = None, rng: Range | None = None
) -> Decimal:
    """A bounded Decimal (see the module docstring); ``rng`` or ``low``/``high`` give its range."""
    text = _text(value)
    try:
        d = Decimal(text)
    except InvalidOperation:  # the pattern admits only what Decimal reads
        raise NumberError("must be a number") from None
    if d and not -MAX_EXPONENT <= d.adjusted() <= MAX_EXPONENT:
        raise NumberError(f"is outside 1e-{MAX_EXPONENT} to 1e{MAX_EXPONENT} in size")
    if len(d.normalize().as_tuple().digits) > MAX_DIGITS:
        raise NumberError(f"has more than {MAX_DIGITS} significant digits")
    if rng is None:
        rng = Range(
            low if low is not None else Decimal(-(10**MAX_EXPONENT)),
            high if high is not None else Decimal(10**MAX_EXPONENT),
        )
    if rng.quantum is not None:
        d = d.quantize(rng.quantum, rounding=ROUND_HALF_EVEN)
    if d < rng.low or d > rng.high or (rng.low_open and d == rng.low) or (rng.whole and d != d.to_integral_value()):
        raise NumberError(f"must be {rng.describe()}")
    return d + 0  # 0 + d: -0 becomes 0


def parse(value: object, key: str) -> Decimal:
    """A number for the input ``key`` of ``RANGES``."""
    return decimal(value, rng=RANGES[key])


def whole(value: object, key: str) -> int:
    """A count for the input ``key`` (its range is whole)."""
    return int(parse(value, key))


def seconds(value: object, key: str) -> float:
    """A duration in seconds for ``key`` (flags typer hands over as floats)."""
    return float(parse(value, key))
