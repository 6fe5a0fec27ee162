"""A FOCUS export's header and rows, streamed: CSV (plain or gzip, UTF-8) or Parquet.

CSV is read through ``csv.reader`` one record at a time; Parquet (needs the ``parquet`` extra,
pyarrow) one record batch at a time, only the FOCUS and ``x_`` columns. Memory holds a batch,
never the file. Rows come out as ``(row number, line number or None, values)`` with the values
in header order: strings from CSV, typed values (Decimal or float, datetime, str, map pairs)
from Parquet; ``gpuprov.billing.focus`` reads both.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import io
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gpuprov.errors import MissingExtraError, UsageError

BATCH_ROWS = 4096  # Parquet rows per record batch
MAX_FIELD = 1 << 20  # bytes in one CSV field
PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"

Row = tuple[int, int | None, Sequence[Any]]
# columns read from a Parquet file besides the FOCUS and x_ ones: those that tell a version gpuprov
# does not read (FOCUS 0.5, 1.3)
_OTHER_HINTS = frozenset(
    {"AmortizedCost", "ChargeType", "UsageQuantity", "UsageUnit", "ContractApplied", "AllocatedMethodId"}
    | {"AllocatedMethodDetails", "AllocatedResourceId", "AllocatedResourceName", "AllocatedTags"}
    | {"ServiceProviderName", "HostProviderName"}
)


@dataclass
class Source:
    where: str
    kind: str  # csv | parquet
    header: list[str]
    rows: Iterator[Row]
    sha256: Callable[[], str] | None = None  # of the bytes read (CSV: the whole file once rows are read)


class _Hashing(io.RawIOBase):
    """A binary stream that hashes what is read through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.digest = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        data = self.raw.read(len(buf))
        n = len(data)
        buf[:n] = data
        self.digest.update(data)
        return n


def _sniff(path: Path, where: str) -> bytes:
    import stat

    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):  # a FIFO or a device would block, or never end
            raise UsageError(f"{where}: not a regular file", hint="give an export file, or - for standard input")
        with path.open("rb") as fh:
            return fh.read(4)
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or type(exc).__name__}") from None


@contextlib.contextmanager
def open_source(path: Path, where: str | None = None) -> Iterator[Source]:
    """The export at ``path`` (``-``: standard input, CSV) as a streamed Source."""
    where = where or str(path)[:200]
    if str(path) == "-":
        import sys

        hashed = _Hashing(sys.stdin.buffer)
        with _csv_source(io.BufferedReader(hashed), where) as src:
            src.sha256 = hashed.digest.hexdigest
            yield src
        return
    magic = _sniff(path, where)
    if magic == PARQUET_MAGIC:
        yield _parquet_source(path, where)
        return
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or type(exc).__name__}") from None
    hashed = _Hashing(fh)
    buffered = io.BufferedReader(hashed)
    raw: IO[bytes] = buffered
    if magic[:2] == GZIP_MAGIC:
        raw = gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[assignment]
    with fh, raw, _csv_source(raw, where) as src:
        src.sha256 = hashed.digest.hexdigest
        yield src


@contextlib.contextmanager
def _csv_source(raw: IO[bytes], where: str) -> Iterator[Source]:
    """The bill's rows; the csv module's field limit (process-wide) is raised while they are read
    and put back after, so other readers in the process keep theirs."""
    previous = csv.field_size_limit(MAX_FIELD)
    try:
        yield from _csv_rows(raw, where)
    finally:
        csv.field_size_limit(previous)


def _csv_rows(raw: IO[bytes], where: str) -> Iterator[Source]:
    text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")  # a leading byte-order mark is no column's

    def lines() -> Iterator[str]:
        """The text a line at a time, none longer than a field may be (a file without newlines
        would otherwise be read whole into memory before the csv module sees it)."""
        while True:
            line = text.readline(MAX_FIELD + 1)
            if not line:
                return
            if len(line) > MAX_FIELD:
                raise UsageError(f"{where}: a line longer than {MAX_FIELD:,} characters: not a cost export")
            yield line

    reader = csv.reader(lines())

    def fail(exc: BaseException) -> UsageError:
        if isinstance(exc, UnicodeDecodeError):
            return UsageError(f"{where}: line {reader.line_num + 1}: not UTF-8 text")
        if isinstance(exc, gzip.BadGzipFile | EOFError | zlib.error):
            return UsageError(f"{where}: a broken gzip file ({exc})")
        if isinstance(exc, OSError):
            return UsageError(f"{where}: cannot read: {exc.strerror or type(exc).__name__}")
        return UsageError(f"{where}: line {reader.line_num}: not CSV ({str(exc)[:80]})")

    try:
        header = next(reader, None)
    except (csv.Error, UnicodeDecodeError, OSError, EOFError, zlib.error) as exc:
        raise fail(exc) from None
    if not header:
        raise UsageError(f"{where}: empty file: no header row", hint="a FOCUS export starts with its column names")

    def rows() -> Iterator[Row]:
        n = 0
        width = len(header)
        while True:
            try:
                values = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError, OSError, EOFError, zlib.error) as exc:
                raise fail(exc) from None
            if not values:
                continue  # a blank line (the spec's own examples have them)
            n += 1
            if len(values) != width:
                raise UsageError(
                    f"{where}: row {n} (line {reader.line_num}) has {len(values)} fields, the header {width}"
                )
            yield n, reader.line_num, values

    yield Source(where, "csv", [str(h) for h in header], rows())


def _parquet_source(path: Path, where: str) -> Source:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtraError(
            f"{where}: reading Parquet needs pyarrow", hint="pip install 'gpuprov[parquet]'"
        ) from None
    try:
        # a buffered stream, no pre-buffering: column chunks are read a page at a time, so memory
        # holds a batch, not a row group (exports write row groups of hundreds of MiB)
        pf = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
    except Exception as exc:  # pyarrow's errors (ArrowInvalid, OSError): one line
        raise UsageError(f"{where}: not a readable Parquet file ({str(exc).splitlines()[0][:100]})") from None
    from gpuprov.billing.focus import columns

    known = set(columns("1.2")) | set(columns("1.0"))
    names = [n for n in pf.schema_arrow.names if n in known or n.startswith("x_") or n in _OTHER_HINTS]

    def rows() -> Iterator[Row]:
        n = 0
        try:
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=names, use_threads=False):
                cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
                for values in zip(*cols, strict=True):
                    n += 1
                    yield n, None, values
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"{where}: row {n + 1}: cannot read Parquet ({str(exc).splitlines()[0][:100]})") from None

    return Source(where, "parquet", names, rows())
