"""A held commitment, and the YAML or CSV files a team lists them in.

A record (one line of ``gpuprov commitments list``)::

    id, cloud, kind, instance_type | family, region, zone, count | usd_per_hour, hourly_usd,
    term, starts, ends, discount

- ``reserved_instance`` (AWS), ``committed_use`` (GCP, entered per machine type), ``reservation``
  (Azure, GCP) and ``capacity_reservation`` (AWS, Azure) hold ``count`` instances of one
  ``instance_type`` in a ``region`` (or one ``zone``): ``hourly_usd`` is the effective price of
  one instance-hour (the term amortised; for a capacity reservation, the on-demand price),
  paid every hour from ``starts`` to ``ends`` whether used or not.
- ``savings_plan`` (AWS) commits ``usd_per_hour`` (US dollars an hour, at the plan's rates)
  for its term: a Compute Savings Plan (no ``family``, no ``region``) covers any instance type
  in any region; an EC2 Instance Savings Plan (``family`` and ``region``) one instance family
  in one region. ``discount`` is the share off on-demand its rates give (until a rates refresh
  brings the real rates); without it the config's ``savings_plans`` discounts apply.

Times are aware UTC; a date alone is midnight UTC. Validation is whole-file: one bad record is
one line naming it, and nothing is stored (the store writes only after ``parse`` returns).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any

from gpuprov.errors import UsageError

IDENT = re.compile(r"^[A-Za-z0-9._:/-]{1,128}$")
MAX_RECORDS = 10_000
TERMS = {"1y": 8760, "3y": 26280}
HOURS_PER_DAY = 24


class Kind(StrEnum):
    RESERVED_INSTANCE = "reserved_instance"
    COMMITTED_USE = "committed_use"
    RESERVATION = "reservation"
    SAVINGS_PLAN = "savings_plan"
    CAPACITY_RESERVATION = "capacity_reservation"

    @property
    def counted(self) -> bool:
        """Whether it holds a number of instances (all but a Savings Plan, which holds dollars)."""
        return self is not Kind.SAVINGS_PLAN


KINDS_BY_CLOUD = {
    "aws": (Kind.RESERVED_INSTANCE, Kind.SAVINGS_PLAN, Kind.CAPACITY_RESERVATION),
    "gcp": (Kind.COMMITTED_USE, Kind.RESERVATION),
    "azure": (Kind.RESERVATION, Kind.CAPACITY_RESERVATION),
}


@dataclass(frozen=True)
class Commitment:
    id: str
    cloud: str
    kind: Kind
    starts: datetime
    ends: datetime
    instance_type: str | None = None
    family: str | None = None
    region: str | None = None
    zone: str | None = None
    count: int | None = None
    usd_per_hour: Decimal | None = None  # a Savings Plan's commitment, $/h
    hourly_usd: Decimal = Decimal(0)  # counted kinds: per instance-hour; a Savings Plan: usd_per_hour
    term: str | None = None
    discount: Decimal | None = None  # Savings Plan: share off on-demand
    source: str = "file"

    @property
    def compute_savings_plan(self) -> bool:
        return self.kind is Kind.SAVINGS_PLAN and self.family is None

    @property
    def committed_hourly_usd(self) -> Decimal:
        """What it costs every hour it is active, used or not."""
        if self.kind is Kind.SAVINGS_PLAN:
            return self.usd_per_hour or Decimal(0)
        return self.hourly_usd * (self.count or 0)

    @property
    def scope(self) -> str:
        if self.kind is Kind.SAVINGS_PLAN:
            if self.family is None:
                return "any instance type, any region"
            return f"{self.family}.* in {self.region}"
        return f"{self.instance_type} in {self.zone or self.region}"

    def active(self, at: datetime) -> bool:
        return self.starts <= at < self.ends

    def hours_active(self, start: datetime, hours: int) -> int:
        end = start + timedelta(hours=hours)
        lo, hi = max(start, self.starts), min(end, self.ends)
        return max(0, math.ceil((hi - lo).total_seconds() / 3600)) if hi > lo else 0

    def covers(self, cloud: str, region: str, zone: str | None, instance_type: str) -> bool:
        """Whether on-demand usage of this type in this place is billed against it."""
        if cloud != self.cloud:
            return False
        if self.kind is Kind.SAVINGS_PLAN:
            if self.family is None:
                return True
            return region == self.region and family_of(instance_type) == self.family
        if instance_type != self.instance_type or region != self.region:
            return False
        return self.zone is None or zone == self.zone

    def row(self) -> dict[str, Any]:
        """The JSON form: money as decimal strings, times as ISO 8601."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Decimal):
                v = format(v, "f")
            elif isinstance(v, datetime):
                v = v.isoformat()
            elif isinstance(v, Kind):
                v = v.value
            out[f.name] = v
        out["committed_hourly_usd"] = format(self.committed_hourly_usd, "f")  # count × rate, or a plan's $/h
        return out


def family_of(instance_type: str) -> str:
    """An AWS instance family: ``p4d`` of ``p4d.24xlarge``."""
    return instance_type.split(".", 1)[0]


FIELDS = (
    "id",
    "cloud",
    "kind",
    "instance_type",
    "family",
    "region",
    "zone",
    "count",
    "usd_per_hour",
    "hourly_usd",
    "term",
    "starts",
    "ends",
    "discount",
)


class _Bad(Exception):
    pass


def _text(value: Any, key: str, pattern: re.Pattern[str] = IDENT) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _Bad(f"{key} must be text")
    text = str(value).strip()
    if not pattern.fullmatch(text):
        raise _Bad(f"{key} must be 1-128 of letters, digits and ._:/-")
    return text


MONEY = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,30})?$")


def _money(value: Any, key: str, high: Decimal = Decimal(10) ** 7) -> Decimal:
    """An amount as plain decimal digits (at most 12 before and 30 after the point): exact, never
    cut short, no exponent (``1e-999999999`` would make a gigabyte of zeros)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _Bad(f"{key} must be an amount in USD")
    text = str(value).strip()
    if isinstance(value, float):  # YAML reads 0.00001 as a float whose repr is 1e-05
        from gpuprov import numbers

        try:  # the one bounded parser (a YamlFloat is judged by the text it was written as)
            d = numbers.decimal(value)
        except numbers.NumberError:
            raise _Bad(f"{key} must be a finite amount in USD") from None
        text = format(d, "f")
    if text.startswith("-"):
        raise _Bad(f"{key} must be an amount ≥ 0")
    if not MONEY.match(text):
        raise _Bad(f"{key} must be a plain decimal amount in USD such as 13.921094")
    d = Decimal(text)
    if d > high:
        raise _Bad(f"{key} {d} is absurd (above {high})")
    return d


def _count(value: Any) -> int:
    if isinstance(value, bool):
        raise _Bad("count must be a whole number")
    text = str(value).strip() if isinstance(value, str | int) else ""
    n = int(text) if re.fullmatch(r"-?[0-9]{1,9}", text) else None
    if n is None:
        raise _Bad("count must be a whole number")
    if n < 1:
        raise _Bad(f"count must be at least 1, got {n}")
    if n > 1_000_000:
        raise _Bad(f"count {n} is absurd")
    return n


def _time(value: Any, key: str) -> datetime:
    if isinstance(value, datetime):
        t = value
    elif isinstance(value, date):
        t = datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and len(value) <= 64:
        try:
            t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise _Bad(f"{key} must be a date or an ISO 8601 time") from None
    else:
        raise _Bad(f"{key} must be a date or an ISO 8601 time")
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    if not 2000 <= t.year <= 2100:  # before the conversion: 9999-12-31T23:00-05:00 is past datetime.max in UTC
        raise _Bad(f"{key} {t:%Y-%m-%d} is out of range (2000 to 2100)")
    t = t.astimezone(UTC)
    if not 2000 <= t.year <= 2100:
        raise _Bad(f"{key} {t:%Y-%m-%d} is out of range")
    return t


def record(raw: Mapping[str, Any], source: str = "file") -> Commitment:
    """One record from a mapping (a YAML entry, a CSV row); raises _Bad with what is wrong."""
    raw = {k: v for k, v in raw.items() if k not in ("source", "committed_hourly_usd")}  # list adds these
    if raw.get("kind") == Kind.SAVINGS_PLAN.value and raw.get("hourly_usd") is not None:
        if str(raw.get("hourly_usd")) != str(raw.get("usd_per_hour")):
            raise _Bad("a savings_plan commits usd_per_hour; hourly_usd, if given, must equal it")
        raw = {k: v for k, v in raw.items() if k != "hourly_usd"}
    unknown = sorted(str(k) for k in raw if k not in FIELDS)
    if unknown:
        raise _Bad(f"an unknown field (fields: {', '.join(FIELDS)})")
    get = {k: v for k, v in raw.items() if v is not None and v != ""}
    for key in ("id", "cloud", "kind", "starts"):
        if key not in get:
            raise _Bad(f"needs {key}")
    cid = _text(get["id"], "id")
    cloud = _text(get["cloud"], "cloud")
    if cloud not in KINDS_BY_CLOUD:
        raise _Bad("an unknown cloud (aws, gcp or azure)")
    try:
        kind = Kind(_text(get["kind"], "kind"))
    except ValueError:
        raise _Bad(f"an unknown kind (kinds: {', '.join(k.value for k in Kind)})") from None
    if kind not in KINDS_BY_CLOUD[cloud]:
        allowed = ", ".join(k.value for k in KINDS_BY_CLOUD[cloud])
        raise _Bad(f"{cloud} has no {kind.value} (it has {allowed})")
    term = None
    if "term" in get:
        term = _text(get["term"], "term")
        if term not in TERMS:
            raise _Bad("term must be 1y or 3y")
    starts = _time(get["starts"], "starts")
    if "ends" in get:
        ends = _time(get["ends"], "ends")
    elif term is not None:
        ends = starts + timedelta(hours=TERMS[term])
    else:
        raise _Bad("needs ends (or a term)")
    if ends.year > 2100:
        raise _Bad(f"ends {ends:%Y-%m-%d} is out of range (2000 to 2100)")
    if ends <= starts:
        raise _Bad(f"ends {ends:%Y-%m-%d %H:%M} is not after starts {starts:%Y-%m-%d %H:%M}")
    c = Commitment(id=cid, cloud=cloud, kind=kind, starts=starts, ends=ends, term=term, source=source)
    if kind is Kind.SAVINGS_PLAN:
        for key in ("instance_type", "zone", "count", "hourly_usd"):
            if key in get:
                raise _Bad(f"a savings_plan has no {key} (it commits usd_per_hour; family and region scope it)")
        if "usd_per_hour" not in get:
            raise _Bad("a savings_plan needs usd_per_hour (its commitment, USD an hour)")
        usd = _money(get["usd_per_hour"], "usd_per_hour")
        if usd <= 0:
            raise _Bad("usd_per_hour must be above 0")
        family = _text(get["family"], "family") if "family" in get else None
        region = _text(get["region"], "region") if "region" in get else None
        if (family is None) != (region is None):
            raise _Bad("an EC2 Instance Savings Plan names both family and region; a Compute one neither")
        discount = None
        if "discount" in get:
            discount = _money(get["discount"], "discount", Decimal(1))
            if discount >= 1:
                raise _Bad("discount is a share off on-demand, below 1")
        return replace(c, usd_per_hour=usd, hourly_usd=usd, family=family, region=region, discount=discount)
    for key in ("usd_per_hour", "family", "discount"):
        if key in get:
            raise _Bad(f"a {kind.value} has no {key}")
    for key in ("instance_type", "region", "count", "hourly_usd"):
        if key not in get:
            raise _Bad(f"a {kind.value} needs {key}")
    return replace(
        c,
        instance_type=_text(get["instance_type"], "instance_type"),
        region=_text(get["region"], "region"),
        zone=_text(get["zone"], "zone") if "zone" in get else None,
        count=_count(get["count"]),
        hourly_usd=_money(get["hourly_usd"], "hourly_usd", Decimal(10_000)),
    )


def from_cloud(raw: Mapping[str, Any], source: str, known: Known | None = None) -> Commitment | str:
    """One record read back from a cloud, checked by the same rules as a file's: the record, or
    what is wrong with it (one line; discovery skips it with a note, never a traceback)."""
    try:
        c = record(raw, source)
        problem = known(c) if known is not None else None
    except _Bad as exc:
        return str(exc)
    return problem or c


Known = Callable[[Commitment], str | None]  # what is wrong with a record's scope, or None


def parse(
    entries: Iterable[tuple[str, Mapping[str, Any]]],
    where: str,
    known: Known | None = None,
    taken: Iterable[str] = (),
) -> list[Commitment]:
    """Check every entry (label, mapping); one ``UsageError`` line for the first bad one."""
    out: list[Commitment] = []
    seen: dict[str, str] = {}
    stored = set(taken)
    for label, raw in entries:
        if len(out) >= MAX_RECORDS:
            raise UsageError(f"{where}: more than {MAX_RECORDS:,} commitments")
        name = f"{where}: {label}"
        if not isinstance(raw, Mapping):
            raise UsageError(f"{name}: a commitment is a mapping of fields")
        rid = raw.get("id")
        if isinstance(rid, str) and IDENT.fullmatch(rid):
            name += f" ({rid})"
        try:
            c = record(raw)
            if c.id in seen:
                raise _Bad(f"id {c.id!r} is used twice (also {seen[c.id]})")
            if c.id in stored:
                raise _Bad(f"id {c.id!r} is already stored; remove it first (gpuprov commitments remove {c.id})")
            problem = known(c) if known is not None else None
            if problem:
                raise _Bad(problem)
        except _Bad as exc:
            raise UsageError(f"{name}: {exc}") from None
        seen[c.id] = label
        out.append(c)
    if not out:
        raise UsageError(f"{where}: no commitments in the file")
    return out


def read_file(path: Path, known: Known | None = None, taken: Iterable[str] = ()) -> list[Commitment]:
    """A YAML file (``commitments: [...]``) or a CSV file with a header of FIELDS."""
    from gpuprov import safeyaml

    where = str(path)[:200]
    text = safeyaml.read_text(path, where, max_bytes=16 * 2**20)
    if path.suffix.lower() == ".csv":
        return parse(_csv_entries(text, where), where, known, taken)
    data = safeyaml.load_text(text, where)
    if isinstance(data, list):  # what `commitments list --output json` prints
        data = {"commitments": data}
    if not isinstance(data, Mapping) or set(data) != {"commitments"}:
        raise UsageError(f"{where}: a commitments file is 'commitments: [...]' (YAML) or a CSV with a header")
    items = data["commitments"]
    if not isinstance(items, list):
        raise UsageError(f"{where}: commitments must be a list")
    return parse(((f"entry {i + 1}", e) for i, e in enumerate(items)), where, known, taken)


def _csv_entries(text: str, where: str) -> Iterable[tuple[str, Mapping[str, Any]]]:
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff")))  # a byte-order mark, as Excel writes
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise UsageError(f"{where}: line 1: not CSV ({str(exc)[:80]})") from None
    if header is None:
        raise UsageError(f"{where}: empty file")
    header = [h.strip() for h in header]
    bad = [h for h in header if h not in FIELDS]
    if bad:
        first = header.index(bad[0]) + 1  # its position: a header is never quoted (it may be any file's first line)
        raise UsageError(f"{where}: column {first} of the header is not one of: {', '.join(FIELDS)}")
    if len(set(header)) != len(header):
        raise UsageError(f"{where}: a column is named twice")
    rows = iter(reader)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as exc:
            raise UsageError(f"{where}: line {reader.line_num}: not CSV ({str(exc)[:80]})") from None
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise UsageError(f"{where}: line {reader.line_num}: {len(row)} fields, the header has {len(header)}")
        yield f"line {reader.line_num}", dict(zip(header, row, strict=True))


def known_in(offers: Sequence[tuple[str, str, str]]) -> Known:
    """A check of scopes against the catalog: (cloud, region, instance type) triples it knows."""
    types = {(c, t) for c, _r, t in offers}
    regions = {(c, r) for c, r, _t in offers}
    families = {(c, family_of(t)) for c, _r, t in offers}

    def check(c: Commitment) -> str | None:
        if c.instance_type is not None and (c.cloud, c.instance_type) not in types:
            return f"unknown instance type {c.instance_type!r} on {c.cloud} (not in the price catalog)"
        if c.family is not None and (c.cloud, c.family) not in families:
            return f"unknown instance family {c.family!r} on {c.cloud} (not in the price catalog)"
        if c.region is not None and (c.cloud, c.region) not in regions:
            return f"unknown region {c.region!r} on {c.cloud} (not in the price catalog)"
        if c.zone is not None and c.region is not None and not c.zone.startswith(_zone_prefix(c)):
            return f"zone {c.zone!r} is not in region {c.region!r}"
        return None

    return check


def _zone_prefix(c: Commitment) -> str:
    # AWS zone names are the region plus a letter (us-east-1a) or an id (use1-az1); GCP zones
    # are the region plus a suffix; Azure zones are numbers. Only names that share the region's
    # prefix are checked.
    if c.cloud == "aws" and c.zone is not None and "-az" in c.zone:
        return ""
    if c.cloud == "azure":
        return ""
    return c.region or ""
