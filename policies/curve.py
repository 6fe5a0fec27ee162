"""An hourly demand curve (a forecast, or a load curve from monitoring) read from a CSV file.

    hour,training,inference
    0,96,40
    1,88,36
    ...

One row per slot of the policy's horizon (24: hour 0 is local midnight; 168: hour 0 is Monday
00:00 local time), in any order, each hour once; one column per workload of the policy, each
once, and no others; GPUs as whole numbers from 0 to 1,000,000. Blank lines and lines starting
with ``#`` are skipped. Anything else is one ConfigError naming the file and line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from gpuprov.errors import ConfigError

MAX_BYTES = 1 << 20  # 168 rows of a few workloads fit in a few KiB
MAX_GPUS = 1_000_000


def read(path: str, workloads: Sequence[str], horizon: int) -> dict[str, tuple[int, ...]]:
    """GPUs each workload needs in each slot, from the curve at ``path``."""
    from gpuprov.safeyaml import read_text

    text = read_text(Path(path), f"--demand {path}", MAX_BYTES).removeprefix("\ufeff")
    if "\x00" in text:
        raise ConfigError(f"--demand {path}: not a CSV file (it holds NUL bytes)")
    return parse(text, path, workloads, horizon)


def parse(text: str, origin: str, workloads: Sequence[str], horizon: int) -> dict[str, tuple[int, ...]]:
    def fail(line: int, message: str) -> ConfigError:
        return ConfigError(f"--demand {origin}, line {line}: {message}")

    rows = [
        (n, row)
        for n, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=1)
        if row and any(cell.strip() for cell in row) and not row[0].lstrip().startswith("#")
    ]
    if not rows:
        raise ConfigError(f"--demand {origin}: empty; give a header 'hour,{','.join(workloads)}' and {horizon} rows")
    line, header = rows[0]
    names = [cell.strip() for cell in header]
    if not names or names[0].lower() != "hour":
        raise fail(line, f"the header starts with 'hour', then the workloads ({', '.join(workloads)})")
    columns = names[1:]
    for name in columns:
        if name not in workloads:
            column = columns.index(name) + 2  # its position: the header is never quoted
            raise fail(line, f"column {column} is not a workload of the policy ({', '.join(workloads)})")
        if columns.count(name) > 1:
            raise fail(line, f"workload {name!r} appears twice")
    missing = [w for w in workloads if w not in columns]
    if missing:
        raise fail(line, f"no column for {', '.join(missing)}")
    table: dict[int, tuple[int, ...]] = {}
    for line, row in rows[1:]:
        if len(row) != len(names):
            raise fail(line, f"{len(row)} fields, the header has {len(names)}")
        hour = _number(row[0], 0, horizon - 1, partial(fail, line), "hour ")
        if hour in table:
            raise fail(line, f"hour {hour} appears twice")
        table[hour] = tuple(
            _number(cell, 0, MAX_GPUS, partial(fail, line), f"{w}: ") for w, cell in zip(columns, row[1:], strict=True)
        )
    gaps = [h for h in range(horizon) if h not in table]
    if gaps:
        shown = ", ".join(str(h) for h in gaps[:5]) + (" …" if len(gaps) > 5 else "")
        raise ConfigError(f"--demand {origin}: the policy's horizon is {horizon} hours; no row for hour {shown}")
    out = {w: tuple(table[h][columns.index(w)] for h in range(horizon)) for w in workloads}
    if not any(any(v) for v in out.values()):
        raise ConfigError(f"--demand {origin}: every hour asks for 0 GPUs")
    peak = max(sum(out[w][h] for w in workloads) for h in range(horizon))
    if peak > MAX_GPUS:  # each cell is bounded, so is their sum: the plan's total is the peak
        raise ConfigError(f"--demand {origin}: an hour asks for {peak:,} GPUs in all, over {MAX_GPUS:,}")
    return out


def _number(cell: str, low: int, high: int, fail: Callable[[str], ConfigError], what: str) -> int:
    value = cell.strip()
    if not value.isascii() or not value.isdigit() or len(value) > len(str(high)):
        raise fail(f"{what}not a whole number from {low} to {high}")
    n = int(value)
    if not low <= n <= high:
        raise fail(f"{what}{n} is not between {low} and {high}")
    return n
