"""``gpuprov pricing history import | list``: price changes over time, for ``gpuprov backtest``."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import typer

from gpuprov import names
from gpuprov.commands import common
from gpuprov.errors import UsageError

history_app = typer.Typer(help="Price history: import changes over time, list what is stored.", no_args_is_help=True)

MAX_HISTORY_BYTES = 64 << 20


@contextlib.contextmanager
def open_file(path: str) -> Iterator[IO[bytes]]:
    """The history file, open for reading as a stream (a file over the size limit is refused unread)."""
    p = Path(path)
    where = names.show(path, 80)
    try:
        if p.is_dir():
            raise UsageError(f"{where}: is a directory, not a file")
        fh = p.open("rb")
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or type(exc).__name__}") from None
    with fh:
        st = os.fstat(fh.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > MAX_HISTORY_BYTES:
            raise UsageError(f"{where}: larger than {MAX_HISTORY_BYTES >> 20} MiB; not read")
        try:
            yield fh
        except OSError as exc:
            raise UsageError(f"{where}: cannot read: {exc.strerror or type(exc).__name__}") from None


def to_tuples(changes: Any) -> list[Any]:
    return [(c.at, c.cloud.value, c.kind, *c.key, c.market.value, c.price, c.event) for c in changes]


def catalog_offers() -> list[Any]:
    """Every offer of the current catalog (the bundle on first use), without discounts."""
    from pricing.gpus import GPUS

    catalog, _snaps = common.open_catalog()
    return list(catalog.offers([g.name for g in GPUS]))


@history_app.command("import")
def import_cmd(
    file: str = typer.Argument(..., help="a price history file"),
    fmt: str = typer.Option(..., "--format", help="anycloud or daily-price"),
    cloud: str = typer.Option(None, "--cloud", help="daily-price: the cloud (aws, gcp, azure)"),
    instance_type: str = typer.Option(None, "--instance-type", help="daily-price: keep only this instance type"),
    region: str = typer.Option(None, "--region", help="daily-price: the region the prices are for"),
    start: str = typer.Option(None, "--from", help="refuse the file if a change is before this time"),
    end: str = typer.Option(None, "--to", help="refuse the file if a change is after this time"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
) -> None:
    """Store a file's price changes (validated whole first: a bad file stores nothing, exit 2)."""
    fmt_out = common.parse_output(output, ("table", "json"))
    from pricing import history

    if fmt not in history.FORMATS:
        raise UsageError(f"unknown format {names.show(fmt)}", f"choose {' or '.join(history.FORMATS)}")
    lo = None if start is None else common.parse_when(start, "--from")
    hi = None if end is None else common.parse_when(end, "--to", end=True)
    if lo is not None and hi is not None and lo >= hi:
        raise UsageError("--from must be before --to")
    where = Path(file).name
    if fmt == "anycloud":
        for flag, value in (("--cloud", cloud), ("--instance-type", instance_type), ("--region", region)):
            if value is not None:
                raise UsageError(f"{flag} goes with --format daily-price (an anycloud file names its offers)")
        with open_file(file) as fh:
            parsed = history.read_anycloud(fh, where, lo, hi)
    else:
        if cloud is None or region is None:
            raise UsageError("--format daily-price needs --cloud and --region (the file names neither)")
        clouds = common.parse_clouds([cloud])
        if clouds is None or len(clouds) != 1:
            raise UsageError("--cloud: name one cloud (aws, gcp or azure)")
        for flag, value in (("--region", region), ("--instance-type", instance_type)):
            if value is not None and not history.is_ident(value):
                raise UsageError(f"{flag} {names.show(value)} is not an identifier ([A-Za-z0-9._:/-], no '..')")
        with open_file(file) as fh:
            parsed = history.read_daily_price(fh, where, clouds[0], region, instance_type, lo, hi)
    report = history.match_report(catalog_offers(), parsed.changes)
    from gpuprov.store.history import HistoryStore

    stored, already = HistoryStore().add(to_tuples(parsed.changes), f"{fmt}:{where}")
    result = {
        "file": where,
        "format": fmt,
        "rows": parsed.rows,
        "changes": len(parsed.changes),
        "stored": stored,
        "already_stored": already,
        "skipped_rows": parsed.skipped,
        "first": parsed.first.isoformat() if parsed.first else None,
        "last": parsed.last.isoformat() if parsed.last else None,
        "matched_changes": report.matched,
        "unmatched_changes": report.unmatched,
        "unmatched_keys": ["/".join(k) for k in report.unmatched_keys],
    }
    if fmt_out == "json":
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    out = common.console()
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(parsed.skipped.items())) or "none"
    out.print(
        f"{where}: {parsed.rows} rows, {len(parsed.changes)} price changes from {result['first']} to "
        f"{result['last']}; stored {stored} ({already} already stored); rows skipped: {skipped}"
    )
    out.print(
        f"{report.matched} of {report.changes} changes move an offer of the current catalog; "
        f"{report.unmatched} match none ({len(report.unmatched_keys)} keys, e.g. "
        f"{', '.join('/'.join(k) for k in report.unmatched_keys[:3]) or '—'})"
    )


@history_app.command("list")
def list_cmd(output: str = typer.Option("table", "--output", "-o", help="table or json")) -> None:
    """What the stored price history covers, per cloud and file, and how much of it matches the catalog."""
    fmt = common.parse_output(output, ("table", "json"))
    from gpuprov.store.history import HistoryStore
    from pricing import history

    store = HistoryStore()
    cover = store.coverage()
    report = history.match_report(catalog_offers(), common.from_tuples(store.changes()))
    rows = [
        {
            "cloud": c.cloud,
            "source": c.source,
            "changes": c.changes,
            "keys": c.keys,
            "first": c.first.isoformat(),
            "last": c.last.isoformat(),
        }
        for c in cover
    ]
    if fmt == "json":
        json.dump(
            {"coverage": rows, "matched_changes": report.matched, "unmatched_changes": report.unmatched},
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return
    if not rows:
        common.console().print("no price history stored; gpuprov pricing history import FILE --format …")
        return
    from rich.table import Table

    table = Table(title="stored price history", title_justify="left")
    for col in ("cloud", "source", "changes", "offer keys", "first (UTC)", "last (UTC)"):
        table.add_column(col)
    for c in cover:
        table.add_row(
            c.cloud, c.source, f"{c.changes:,}", f"{c.keys:,}", f"{c.first:%Y-%m-%d %H:%M}", f"{c.last:%Y-%m-%d %H:%M}"
        )
    out = common.console()
    out.print(table)
    out.print(
        f"{report.matched:,} of {report.changes:,} changes move an offer of the current catalog; "
        f"{report.unmatched:,} match none"
    )


@history_app.command("remove")
def remove_cmd(
    source: str = typer.Option(
        ..., "--source", help="what `pricing history list` shows as source (anycloud:FILE), or the file name alone"
    ),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
) -> None:
    """Take out every change an import stored (one transaction), to undo a bad import.

    A change that a later file also held was stored once, under the first file's name: removing
    that file removes it; import the later file again to put it back."""
    fmt = common.parse_output(output, ("table", "json"))
    from gpuprov.store.history import HistoryStore

    store = HistoryStore()
    known = store.sources()
    chosen = [s for s in known if source in (s, s.partition(":")[2])]
    if not chosen:
        raise UsageError(
            f"no stored price history comes from {names.show(source, 80)}; nothing was removed",
            hint=f"stored sources: {', '.join(known[:5]) + (' …' if len(known) > 5 else '') or 'none'}",
        )
    if len(chosen) > 1:
        raise UsageError(
            f"{names.show(source, 80)} names {len(chosen)} sources ({', '.join(chosen)}); nothing was removed",
            hint="pass --source FORMAT:FILE",
        )
    removed = store.remove(chosen[0])
    if fmt == "json":
        json.dump({"source": chosen[0], "removed": removed}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    common.console().print(f"{chosen[0]}: removed {removed:,} price changes")


def register(app: typer.Typer) -> None:
    app.add_typer(history_app, name="history")
