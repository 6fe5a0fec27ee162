"""Price history: the file readers, and the catalog "as of" a time.

Two formats:

``anycloud``
    ``cloud,commit,commit_date,key_a,key_b,key_c,price,spot_price,prev_price,prev_spot_price,change``:
    one row per GPU offer per catalog version whose on-demand or spot price changed
    (``changed``), was first seen (``new``) or went away (``removed``). GCP rows are the
    anycloud *accelerator* rows, keyed (accelerator, count, zone), priced for the GPUs alone;
    Azure rows are whole VMs, keyed (instance type, accelerator, region). An empty price on a
    ``changed`` row whose previous price was set means that market went away. ``new`` rows of a
    cloud's first version are where the record starts (the offers existed before), not offers
    appearing: they are read as prices.
``daily-price``
    ``timestamp,instance,price_usd``: one on-demand price of one instance type in one region
    per day (``--cloud`` and ``--region`` say which). Rows without a price are skipped and
    counted; a price equal to the one before is no change and is not kept (bar the file's last
    row, which marks how far the file reaches). Times without a zone are UTC.

A file is validated whole before anything is stored, row by row as it is read (only the parsed
changes are kept, and reading stops at the first bad line): an unknown or missing column,
a time earlier than the one before it in the same cloud, a negative or absurd price, a bad
identifier or a time outside the ``--from/--to`` asked for is one :class:`HistoryFormatError`
(exit 2) naming the line.

The catalog as of a time (:class:`Replay`) is a base snapshot with every change up to that time
applied. A change moves the part of an offer's price it describes: a GCP accelerator row moves
every GCP offer with that accelerator, count and zone (a2/a3/g2 machine types carry their
accelerator; an n1 host with attached T4/V100/P100/P4 is priced host + GPUs) by the change of
the GPUs' price; an instance row (Azure, ``daily-price``) moves every offer of that instance type
in that region (every zone). The move is measured from the history's value at the snapshot's own
as-of time (its first value where it starts later), so a snapshot and a history from one source
agree exactly. An offer whose market was ``removed`` as of the time is left out, and so is one
whose history starts with ``new`` after it. Reserved markets have no history and keep their price.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import sys
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import IO, Any

from gpuprov.errors import UsageError
from gpuprov.models import HISTORY_EARLIEST, HISTORY_LATEST, Cloud, Market, Offer
from pricing.validate import MAX_PRICE, MIN_PRICE

ANYCLOUD_COLUMNS = (
    "cloud",
    "commit",
    "commit_date",
    "key_a",
    "key_b",
    "key_c",
    "price",
    "spot_price",
    "prev_price",
    "prev_spot_price",
    "change",
)
DAILY_COLUMNS = ("timestamp", "instance", "price_usd")
FORMATS = ("anycloud", "daily-price")
SAME = "same price as the day before (no change)"
MAX_BYTES = 64 * 1024 * 1024
MAX_FIELD = 200
MAX_LINE = 64 * 1024  # characters: a row of 11 fields of at most MAX_FIELD is far shorter
IDENT = re.compile(r"[A-Za-z0-9._:/-]{1,200}")
EARLIEST, LATEST = HISTORY_EARLIEST, HISTORY_LATEST

GCP_ACCELERATOR = "gcp-accelerator"  # key: (accelerator, count, zone)
INSTANCE = "instance"  # key: (instance type, region, accelerator or "")


class HistoryFormatError(UsageError):
    """A history file that does not validate: nothing of it is stored."""


@dataclass(frozen=True, slots=True)
class PriceChange:
    """One market of one offer key at one time: a new price, or ``price=None`` (gone)."""

    at: datetime  # aware UTC
    cloud: Cloud
    kind: str  # GCP_ACCELERATOR | INSTANCE
    key: tuple[str, str, str]
    market: Market  # on_demand | spot
    price: Decimal | None
    event: str  # new | price | removed

    @property
    def match(self) -> tuple[str, ...]:
        """What an offer must share to be moved by this change (see :func:`offer_match`)."""
        if self.kind == GCP_ACCELERATOR:
            return (self.cloud.value, self.kind, *self.key)
        return (self.cloud.value, self.kind, self.key[0], self.key[1])


@dataclass
class HistoryFile:
    changes: list[PriceChange]
    rows: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows

    @property
    def first(self) -> datetime | None:
        return min((c.at for c in self.changes), default=None)

    @property
    def last(self) -> datetime | None:
        return max((c.at for c in self.changes), default=None)


def _fail(where: str, line: int | None, message: str) -> HistoryFormatError:
    return HistoryFormatError(f"{where}{f', line {line}' if line else ''}: {message}; nothing was stored")


def is_ident(text: str) -> bool:
    """An offer-key identifier: ``[A-Za-z0-9._:/-]``, at most 200 characters, no ``..``."""
    return bool(IDENT.fullmatch(text)) and ".." not in text


def in_range(t: datetime) -> bool:
    """Whether an aware time lies in the span a price history may cover (EARLIEST to LATEST)."""
    return EARLIEST <= t < LATEST


RANGE = f"{EARLIEST:%Y}-{LATEST:%Y}"


def _time(text: str, where: str, line: int) -> datetime:
    try:
        t = datetime.fromisoformat(text.strip())
        t = (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)
    except ValueError:
        raise _fail(where, line, "the time is not ISO 8601") from None
    except OverflowError:
        raise _fail(where, line, f"the time is outside {RANGE}") from None
    if not in_range(t):
        raise _fail(where, line, f"the time is outside {RANGE}")
    return t


def _price(text: str, where: str, line: int, column: str) -> Decimal | None:
    text = text.strip()
    if not text:
        return None
    from gpuprov import numbers

    try:
        value = numbers.decimal(text)  # the one bounded parser: no NaN, no 1e-999999999
    except numbers.NumberError:
        raise _fail(where, line, f"{column} is not a number") from None
    if not value.is_finite():
        raise _fail(where, line, f"{column} is not a number")
    if value < 0:
        raise _fail(where, line, f"{column} is negative")
    if value < MIN_PRICE or value > MAX_PRICE:
        raise _fail(where, line, f"{column} is not a price ({MIN_PRICE} ≤ USD/h ≤ {MAX_PRICE})")
    return value


def _ident(text: str, where: str, line: int, column: str) -> str:
    if not is_ident(text):
        raise _fail(where, line, f"{column} is not an identifier ([A-Za-z0-9._:/-], ≤ 200, no '..')")
    return text


def _lines(data: bytes | IO[bytes], where: str) -> Generator[str]:
    """The file's lines as text, read as they are needed: at most MAX_LINE characters a line and
    MAX_BYTES in all, so a bad file costs no more memory than a line."""
    stream = io.BytesIO(data) if isinstance(data, bytes | bytearray) else data
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    total = line = 0
    try:
        while True:
            try:
                chunk = text.readline(MAX_LINE)
            except UnicodeDecodeError:
                raise _fail(where, None, "the file is not UTF-8 text") from None
            if not chunk:
                return
            if not chunk.endswith(("\n", "\r")) and len(chunk) >= MAX_LINE:
                raise _fail(where, line + 1, f"a line is over {MAX_LINE:,} characters")
            total += len(chunk)
            if total > MAX_BYTES:
                raise _fail(where, None, f"the file is over {MAX_BYTES // (1024 * 1024)} MiB")
            line += 1
            yield chunk
    finally:
        with contextlib.suppress(ValueError):  # the caller's stream stays open (closed by the caller)
            text.detach()


def _rows(data: bytes | IO[bytes], where: str, columns: Sequence[str]) -> Generator[tuple[int, list[str]]]:
    """The file's rows, validated one by one as they are read (nothing is read past a bad one)."""
    if isinstance(data, bytes | bytearray) and len(data) > MAX_BYTES:
        raise _fail(where, None, f"the file is over {MAX_BYTES // (1024 * 1024)} MiB")
    with contextlib.closing(_lines(data, where)) as lines:
        yield from _checked(csv.reader(lines), where, columns)


def _checked(reader: Any, where: str, columns: Sequence[str]) -> Iterator[tuple[int, list[str]]]:
    try:
        header = next(reader, None)
    except csv.Error:
        raise _fail(where, 1, "the header is not CSV") from None
    if header is None:
        raise _fail(where, None, "the file is empty")
    names = [h.strip() for h in header]
    unknown = [n for n in names if n not in columns]
    if unknown:
        first = names.index(unknown[0]) + 1  # its position: a header is never quoted (it may be any file's first line)
        raise _fail(where, 1, f"column {first} of the header is not one of {','.join(columns)}")
    if tuple(names) != tuple(columns):
        raise _fail(where, 1, f"the columns must be exactly {','.join(columns)}")
    line = 1
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(columns):
                raise _fail(where, line, f"{len(row)} fields, expected {len(columns)}")
            if any(len(c) > MAX_FIELD for c in row):
                raise _fail(where, line, f"a field is over {MAX_FIELD} characters")
            yield line, row
    except csv.Error:
        raise _fail(where, line + 1, "not CSV") from None


def _window(t: datetime, start: datetime | None, end: datetime | None, where: str, line: int) -> None:
    if (start is not None and t < start) or (end is not None and t > end):
        raise _fail(
            where,
            line,
            f"time {t.isoformat()} is outside --from/--to "
            f"({start.isoformat() if start else '…'} to {end.isoformat() if end else '…'})",
        )


Rows = Iterator[tuple[int, list[str]]]


def read_anycloud(
    data: bytes | IO[bytes], where: str, start: datetime | None = None, end: datetime | None = None
) -> HistoryFile:
    with contextlib.closing(_rows(data, where, ANYCLOUD_COLUMNS)) as rows:  # closed while the stream is open
        return _anycloud(rows, where, start, end)


def _anycloud(rows: Rows, where: str, start: datetime | None, end: datetime | None) -> HistoryFile:
    out = HistoryFile(changes=[])
    last: dict[Cloud, tuple[datetime, int]] = {}
    first_at: dict[Cloud, datetime] = {}
    for line, row in rows:
        out.rows += 1
        cloud_s, _commit, when, a, b, c, price_s, spot_s, prev_s, prev_spot_s, change = (v.strip() for v in row)
        try:
            cloud = Cloud(cloud_s)
        except ValueError:
            raise _fail(where, line, "cloud is not gcp or azure") from None
        if cloud is Cloud.AWS:
            raise _fail(where, line, "the anycloud history has GCP and Azure rows only")
        at = _time(when, where, line)
        before = last.get(cloud)
        if before is not None and at < before[0]:
            raise _fail(
                where, line, f"time {at.isoformat()} is earlier than line {before[1]}'s ({before[0].isoformat()})"
            )
        last[cloud] = (at, line)
        first = first_at.setdefault(cloud, at)
        _window(at, start, end, where, line)
        if change not in ("new", "changed", "removed"):
            raise _fail(where, line, "change is not new, changed or removed")
        for value, column in ((a, "key_a"), (b, "key_b"), (c, "key_c")):
            _ident(value, where, line, column)
        a, b, c = sys.intern(a), sys.intern(b), sys.intern(c)  # one string per key, not one per row
        if cloud is Cloud.GCP:
            if not b.isdigit() or not 0 < int(b) <= 64:
                raise _fail(where, line, "key_b (GPU count) is not a whole number of GPUs")
            kind, key = GCP_ACCELERATOR, (a, b, c)
        else:
            kind, key = INSTANCE, (a, c, b)  # instance type, region, accelerator
        prices = {
            Market.ON_DEMAND: (_price(price_s, where, line, "price"), _price(prev_s, where, line, "prev_price")),
            Market.SPOT: (
                _price(spot_s, where, line, "spot_price"),
                _price(prev_spot_s, where, line, "prev_spot_price"),
            ),
        }
        for market, (now, prev) in prices.items():
            if change == "removed":
                out.changes.append(PriceChange(at, cloud, kind, key, market, None, "removed"))
            elif now is not None:
                # "new" in the file's first version is where the record starts, not an offer appearing
                event = "new" if change == "new" and at > first else "price"
                out.changes.append(PriceChange(at, cloud, kind, key, market, now, event))
            elif change == "changed" and prev is not None:
                out.changes.append(PriceChange(at, cloud, kind, key, market, None, "removed"))
    if not out.changes:
        raise _fail(where, None, "no price change in the file")
    return out


def read_daily_price(
    data: bytes | IO[bytes],
    where: str,
    cloud: Cloud,
    region: str,
    instance_type: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> HistoryFile:
    with contextlib.closing(_rows(data, where, DAILY_COLUMNS)) as rows:  # closed while the stream is open
        return _daily_price(rows, where, cloud, region, instance_type, start, end)


def _daily_price(
    rows: Rows,
    where: str,
    cloud: Cloud,
    region: str,
    instance_type: str | None,
    start: datetime | None,
    end: datetime | None,
) -> HistoryFile:
    out = HistoryFile(changes=[])
    skipped: dict[str, int] = defaultdict(int)
    last_time: tuple[datetime, int] | None = None
    last_price: dict[str, Decimal] = {}
    repeats: dict[str, tuple[PriceChange, int]] = {}
    for line, row in rows:
        out.rows += 1
        when, itype, price_s = (v.strip() for v in row)
        _ident(itype, where, line, "instance")
        if instance_type is not None and itype != instance_type:
            skipped[f"instance type other than {instance_type}"] += 1
            continue
        price = _price(price_s, where, line, "price_usd")
        if price is None:
            skipped["no price"] += 1
            continue
        at = _time(when, where, line)
        if last_time is not None and at < last_time[0]:
            raise _fail(
                where, line, f"time {at.isoformat()} is earlier than line {last_time[1]}'s ({last_time[0].isoformat()})"
            )
        last_time = (at, line)
        _window(at, start, end, where, line)
        change = PriceChange(at, cloud, INSTANCE, (itype, region, ""), Market.ON_DEMAND, price, "price")
        if last_price.get(itype) == price:
            skipped[SAME] += 1
            repeats[itype] = (change, line)  # no change; the last one is kept to mark the file's end
            continue
        last_price[itype] = price
        repeats.pop(itype, None)
        # even the first price is a "price", not "new": the instance type existed before the file starts
        out.changes.append(change)
    for change, _line in repeats.values():
        skipped[SAME] -= 1
        out.changes.append(change)
    out.changes.sort(key=lambda c: c.at)
    out.skipped = {k: v for k, v in skipped.items() if v}
    if not out.changes:
        raise _fail(where, None, "no priced row in the file")
    return out


# -- offers and the history ------------------------------------------------------------------
def gcp_accelerator(o: Offer) -> str:
    """The anycloud accelerator name of a GCP offer's GPUs."""
    if o.gpu == "A100-40GB":
        return "A100"
    if o.gpu == "H100" and o.instance_type.startswith("a3-megagpu"):
        return "H100-MEGA"
    return o.gpu


def offer_match(o: Offer) -> tuple[str, ...] | None:
    """The history key that moves this offer's price, or None (reserved markets, fractional GPUs)."""
    if o.market not in (Market.ON_DEMAND, Market.SPOT) or o.gpu_fraction is not None:
        return None
    if o.cloud is Cloud.GCP:
        if o.zone is None:
            return None
        return (o.cloud.value, GCP_ACCELERATOR, gcp_accelerator(o), str(o.gpus_per_instance), o.zone)
    return (o.cloud.value, INSTANCE, o.instance_type, o.region)


@dataclass(frozen=True)
class MatchReport:
    changes: int
    matched: int  # changes that move at least one offer
    keys: int
    unmatched_keys: tuple[tuple[str, ...], ...]

    @property
    def unmatched(self) -> int:
        return self.changes - self.matched


def match_report(offers: Iterable[Offer], changes: Sequence[PriceChange]) -> MatchReport:
    """How many changes move an offer of this catalog (same key and market); the keys that move none."""
    have = {(m, o.market) for o in offers if (m := offer_match(o)) is not None}
    matched = sum(1 for c in changes if (c.match, c.market) in have)
    keys = {(c.match, c.market) for c in changes}
    lost = sorted({(*k, m.value) for k, m in keys if (k, m) not in have})
    return MatchReport(len(changes), matched, len(keys), tuple(lost))


class Replay:
    """Catalogs as of a time, built incrementally: :meth:`advance` applies the changes up to a
    time (moving forward only) and touches only the offers they move."""

    def __init__(
        self, base: Sequence[Offer], base_as_of: Mapping[Cloud, datetime], changes: Sequence[PriceChange]
    ) -> None:
        self._changes = sorted(changes, key=lambda c: c.at)  # stable: file order within a time
        self._times = [c.at for c in self._changes]
        self._pos = 0
        self._base = list(base)
        self._by_key: dict[tuple[tuple[str, ...], Market], list[int]] = defaultdict(list)
        for i, o in enumerate(self._base):
            m = offer_match(o)
            if m is not None:
                self._by_key[(m, o.market)].append(i)
        # the history's value at each snapshot's as-of time (its first value where it starts later)
        self._ref: dict[tuple[tuple[str, ...], Market], Decimal] = {}
        self._first_new: set[tuple[tuple[str, ...], Market]] = set()
        seen: set[tuple[tuple[str, ...], Market]] = set()
        for c in self._changes:
            k = (c.match, c.market)
            if k not in self._by_key:
                continue
            if k not in seen:
                seen.add(k)
                if c.event == "new":
                    self._first_new.add(k)
            as_of = base_as_of.get(c.cloud)
            if c.price is not None and (k not in self._ref or (as_of is not None and c.at <= as_of)):
                self._ref[k] = c.price
        self._state: dict[tuple[tuple[str, ...], Market], Decimal | None] = {}
        self._current: list[Offer | None] = [
            None if (offer_match(o), o.market) in self._first_new else o for o in self._base
        ]
        self.version = 0
        self.applied = 0
        self.at: datetime | None = None

    def advance(self, t: datetime) -> bool:
        """Apply every change at or before ``t``; True if an offer's price or presence changed."""
        if self.at is not None and t < self.at:
            raise ValueError("a replay moves forward only")
        self.at = t
        end = bisect_right(self._times, t, lo=self._pos)
        touched: set[tuple[tuple[str, ...], Market]] = set()
        for c in self._changes[self._pos : end]:
            k = (c.match, c.market)
            if k in self._by_key:
                self._state[k] = c.price
                touched.add(k)
        self.applied += end - self._pos
        self._pos = end
        moved = False
        for k in touched:
            now = self._state[k]
            for i in self._by_key[k]:
                o = self._base[i]
                if now is None:
                    new = None
                else:
                    price = o.hourly_usd + now - self._ref.get(k, now)
                    new = replace(o, hourly_usd=price) if price > 0 else None
                if new != self._current[i]:
                    self._current[i] = new
                    moved = True
        if moved:
            self.version += 1
        return moved

    def offers(self) -> list[Offer]:
        return [o for o in self._current if o is not None]
