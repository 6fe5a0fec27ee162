"""``gpuprov pricing import``: a price file into new snapshots, streamed.

The file is read one line at a time (UTF-8, no line over ``MAX_LINE`` bytes; a GCP SkyPilot file
twice, since its host and accelerator rows are joined: see ``pricing.skypilot.stream``), each row is
validated as it is read (``pricing.validate.price_problem`` and the format's own row checks)
and the offers are written ``BATCH_ROWS`` at a time into new snapshots, all inside one
transaction. The one check that needs more than a row, a spot price above ``spot_factor`` times
the on-demand price of its pool, runs afterwards over the stored rows a region's instance type at
a time (``pricing.validate.spot_outliers``): memory holds a batch, one such group and the skipped
rows' report (counts per reason and the first line numbers of each), not the file.

A file that yields no offer, or that turns out bad part way (not UTF-8, a line too long, broken
CSV), rolls the transaction back: nothing is stored and every current snapshot stays.
"""

from __future__ import annotations

import contextlib
import csv
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, TYPE_CHECKING

from gpuprov.errors import ConfigError, PricingError
from gpuprov.models import Cloud, Market, Offer, SnapshotInfo
from pricing import skypilot
from pricing.validate import DEFAULT_SPOT_FACTOR, SPOT_ABOVE_ON_DEMAND, price_problem, spot_outliers

if TYPE_CHECKING:
    from gpuprov.store.catalog import Catalog

BATCH_ROWS = 5000  # offers per INSERT
MAX_LINE = 1 << 20  # bytes in one line of a price file (a row has 10-13 fields of ≤ 1,000)
FORMATS = ("skypilot", "gpuprov")


@dataclass
class Imported:
    """One new snapshot: its offers from the file, and those kept from the previous snapshot."""

    snapshot: SnapshotInfo
    from_file: int
    kept: int
    markets: set[Market] = field(default_factory=set)
    previous: int | None = None


class _Lines:
    """A file's lines as text, one at a time, each at most ``max_line`` bytes; bytes that are not
    UTF-8 or an over-long line are one ``ConfigError`` naming the line."""

    def __init__(self, fh: IO[bytes], where: str, max_line: int) -> None:
        self.fh, self.where, self.max_line = fh, where, max_line
        self.number = 0

    def __iter__(self) -> Iterator[str]:
        while True:
            try:
                raw = self.fh.readline(self.max_line + 1)
            except OSError as exc:
                raise ConfigError(f"{self.where}: cannot read: {exc.strerror or type(exc).__name__}") from None
            if not raw:
                return
            self.number += 1
            if len(raw) > self.max_line:
                raise ConfigError(f"{self.where}:{self.number}: a line longer than {self.max_line:,} bytes")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{self.where}:{self.number}: not UTF-8 text (byte {exc.start + 1})") from None


@contextlib.contextmanager
def read_source(
    path: Path,
    fmt: str,
    report: skypilot.ParseReport,
    clouds: Collection[Cloud] | None = None,
    where: str | None = None,
    max_line: int = MAX_LINE,
) -> Iterator[Iterator[tuple[int, Offer]]]:
    """The offers of a price file with their line numbers, read as they are consumed. The file
    is opened and its header checked on entry (one ``ConfigError`` if it cannot be or is wrong)."""
    from pricing.gpuprov_csv import read_offer_lines

    if fmt not in FORMATS:
        raise ConfigError(f"unknown price file format {fmt!r}; choose skypilot or gpuprov")
    where = where or path.name
    try:
        if path.is_dir():
            raise ConfigError(f"{where}: is a directory, not a file")
        fh = path.open("rb")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or type(exc).__name__}") from None
    with fh:
        lines = _Lines(fh, where, max_line)
        try:
            if fmt == "skypilot":
                wanted = sorted(clouds) if clouds else []
                _, offers = skypilot.stream(
                    lines, path.name, report, wanted[0] if len(wanted) == 1 else None, _rereader(fh, where, max_line)
                )
            else:
                offers = read_offer_lines(lines, path.name, report)
                first = next(offers, None)  # reads and checks the header now
                offers = _chain(first, offers)
        except csv.Error as exc:
            raise ConfigError(f"{where}:{lines.number}: not CSV: {exc}") from None
        yield _guarded(offers, lines, where, clouds)


def _rereader(fh: IO[bytes], where: str, max_line: int) -> Callable[[], Iterable[str]] | None:
    """The file's lines from the start again (a GCP SkyPilot file's second pass); None for a
    file that cannot seek (a pipe), whose GCP rows are then held in memory."""
    try:
        if not fh.seekable():
            return None
    except OSError:
        return None

    def again() -> Iterable[str]:
        try:
            fh.seek(0)
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read it again: {exc.strerror or type(exc).__name__}") from None
        return _Lines(fh, where, max_line)

    return again


def _chain(first: tuple[int, Offer] | None, rest: Iterator[tuple[int, Offer]]) -> Iterator[tuple[int, Offer]]:
    if first is not None:
        yield first
    yield from rest


def _guarded(
    offers: Iterator[tuple[int, Offer]], lines: _Lines, where: str, clouds: Collection[Cloud] | None
) -> Iterator[tuple[int, Offer]]:
    try:
        for line, offer in offers:
            if not clouds or offer.cloud in clouds:
                yield line, offer
    except csv.Error as exc:
        raise ConfigError(f"{where}:{lines.number}: not CSV: {exc}") from None


def store(
    offers: Iterator[tuple[int, Offer]],
    catalog: Catalog,
    source: str,
    fetched_at: datetime,
    report: skypilot.ParseReport,
    gpus: Collection[str],
    origin: str,
    spot_factor: Decimal = DEFAULT_SPOT_FACTOR,
    batch_rows: int = BATCH_ROWS,
) -> list[Imported]:
    """Write the offers that pass validation as one new snapshot per cloud, in one transaction;
    each keeps the previous snapshot's offers of the markets (and GPUs) the file does not carry.
    Rows that fail are counted in ``report``; if none passes, nothing is stored (``PricingError``)."""
    with catalog.writing(source, fetched_at, batch_rows) as writer:
        for line, offer in offers:
            problem = price_problem(offer.hourly_usd, offer.currency)
            if problem is not None:
                report.skip(problem, line)
                continue
            writer.add(offer)
        for cloud in sorted(writer.snapshot_ids):
            outliers = array("q")
            for group in writer.groups(cloud, (Market.ON_DEMAND, Market.SPOT)):
                outliers.extend(spot_outliers(group, spot_factor))
            if outliers:
                report.skip(SPOT_ABOVE_ON_DEMAND, n=len(outliers))
                writer.drop(cloud, outliers)
        from_file = dict(writer.counts)
        if not any(from_file.values()):
            raise PricingError(f"{origin}: no offer passed validation; nothing was stored")
        notes: dict[Cloud, str] = {}
        carried: dict[Cloud, tuple[set[Market], int, int]] = {}
        for cloud, n in sorted(from_file.items()):
            if not n:
                continue
            markets = writer.stored_markets(cloud)
            kept, previous = writer.carry_over(cloud, gpus, markets)
            carried[cloud] = (markets, kept, previous)
            notes[cloud] = (
                f"imported from {origin}; kept {kept} offers of other markets from snapshot {previous or '-'}"
            )
        out = []
        for snap in writer.finish(notes):
            markets, kept, previous = carried[snap.cloud]
            out.append(Imported(snap, from_file[snap.cloud], kept, markets, previous or None))
    return out
