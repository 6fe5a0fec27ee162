"""What several commands share: flag parsing, the catalog with its bundled snapshot, plans by id
or file, output."""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpuprov import names
from gpuprov.errors import UsageError
from gpuprov.models import Cloud, Market, Offer, SnapshotInfo

if TYPE_CHECKING:
    from gpuprov.plandoc import PlanDocument


def split(values: Sequence[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or ():
        out += [p.strip() for p in v.split(",") if p.strip()]
    return out


def parse_clouds(values: Sequence[str] | None) -> list[Cloud] | None:
    names = split(values)
    if not names or names == ["all"]:
        return None
    out = []
    for n in names:
        try:
            out.append(Cloud(n.lower()))
        except ValueError:
            raise UsageError(f"unknown cloud {n!r}", f"choose from {', '.join(c.value for c in Cloud)}") from None
    return out


def parse_markets(values: Sequence[str] | None) -> list[Market] | None:
    names = split(values)
    if not names or names == ["all"]:
        return None
    aliases = {
        "ondemand": "on_demand",
        "on-demand": "on_demand",
        "od": "on_demand",
        "reserved": "reserved_1y",
        "reserved-1y": "reserved_1y",
        "reserved-3y": "reserved_3y",
    }
    out = []
    for n in names:
        key = aliases.get(n.lower(), n.lower())
        try:
            out.append(Market(key))
        except ValueError:
            raise UsageError(f"unknown market {n!r}", f"choose from {', '.join(m.value for m in Market)}") from None
    return out


def parse_decimal(text: str, flag: str, low: Decimal, high: Decimal | None = None) -> Decimal:
    """A flag's number through the one bounded parser (gpuprov/numbers.py); a flag listed in its
    table (``RANGES``) takes its range from there, any other the one given."""
    from gpuprov import numbers

    try:
        if flag in numbers.RANGES:
            return numbers.parse(text, flag)
        return numbers.decimal(text, low, high)
    except numbers.NumberError as exc:
        raise UsageError(f"{flag} {exc.reason}, got {names.show(str(text))}") from None


def parse_seconds(value: float, flag: str) -> float:
    """A duration flag typer read as a float (inf and nan included), bounded by its table row."""
    from gpuprov import numbers

    try:
        return numbers.seconds(value, flag)
    except numbers.NumberError as exc:
        raise UsageError(f"{flag} {exc.reason}") from None


# Each command's --deadline by default, in seconds (sdk/net.py; README "Network faults").
DEADLINES = {
    "status": 30.0,
    "destroy": 30.0,
    "apply": 3600.0,
    "rebalance": 1800.0,
    "commitments discover": 60.0,
    "pricing refresh": 600.0,
    "pricing spot-advisor refresh": 60.0,
}


def deadline_help(command: str) -> str:
    seconds = DEADLINES[command]
    return f"stop after this many seconds (default {seconds:g}), release the lease, say what was done"


def start_deadline(seconds: float | None, command: str) -> None:
    """Start the command's wall-clock budget (counted from the process's start; sdk/net.py)."""
    from sdk import net

    value = DEADLINES[command] if seconds is None else parse_seconds(seconds, "--deadline")
    net.start(value, f"gpuprov {command}")


def parse_fraction(text: str, flag: str) -> Decimal:
    return parse_decimal(text, flag, Decimal(0), Decimal(1))


def parse_output(value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise UsageError(f"unknown output format {value!r}", f"choose from {', '.join(allowed)}")
    return value


def positive(value: int | None, flag: str, high: int | None = None) -> None:
    if value is not None and value <= 0:
        raise UsageError(f"{flag} must be a positive whole number, got {value}")
    if value is not None and high is not None and value > high:
        raise UsageError(f"{flag} must be at most {high:,}, got {str(value)[:20]}")


def open_catalog() -> tuple[Any, list[SnapshotInfo]]:
    """The catalog, with the bundled snapshot loaded on first use; and its current snapshots."""
    from gpuprov.store.catalog import Catalog
    from pricing.snapshot import bundled_meta

    catalog = Catalog()
    current = catalog.snapshots(current_only=True)
    shipped = bundled_meta()
    # a cloud never refreshed nor imported starts from the bundle; one still on an older bundle
    # (gpuprov was upgraded) moves to the bundle this package ships
    wanted = {c for c in Cloud if c not in {s.cloud for s in current}} | {
        s.cloud
        for s in current
        if s.source.startswith("bundled") and s.cloud in shipped and (s.source, s.row_count) != shipped[s.cloud]
    }
    if wanted:
        from pricing.snapshot import load_bundled

        for snap in load_bundled():
            if snap.cloud in wanted:
                catalog.add_snapshot(snap.source, snap.cloud, snap.as_of, snap.offers, note=snap.note)
        current = catalog.snapshots(current_only=True)
    return catalog, current


def discounts() -> Any:
    """Negotiated discount factors from the config file (applied when offers are read)."""
    from gpuprov import config
    from pricing.discounts import load_discounts

    cfg = config.load()
    return load_discounts({"discounts": {k: str(v) for k, v in cfg.discounts.items()}} if cfg.discounts else None)


def spot_advisor() -> Any:
    """The AWS Spot Advisor feed rates are read from: the refreshed one (``gpuprov pricing
    spot-advisor refresh``) where it is newer than the bundled copy, else the bundle."""
    from gpuprov.store.spot_advisor import SpotAdvisorStore
    from pricing.spot_risk import current

    stored = SpotAdvisorStore().load()
    return current(None if stored is None else stored[:2])


def spot_rate() -> Any:
    """The per-pool spot interruption rate source (the AWS Spot Advisor; cloud defaults elsewhere)."""
    return spot_advisor().pool_rate


def read_offers(
    catalog: Any, names: Sequence[str], clouds: list[Cloud] | None = None, markets: list[Market] | None = None
) -> list[Offer]:
    from pricing.quality import annotate

    # flags compare spot with on-demand: annotate the whole set, then keep the markets asked for
    offers: list[Offer] = annotate(catalog.offers(names, clouds, None), spot_rate())
    if markets is not None:
        offers = [o for o in offers if o.market in markets]
    found = discounts()
    if found:
        from pricing.discounts import apply_discounts

        offers = apply_discounts(offers, found)
    return offers


def select_offers(
    catalog: Any,
    gpu_type: str,
    clouds: list[Cloud] | None,
    markets: list[Market] | None,
    region_globs: Sequence[str] | None,
    exclude_suspect: bool = False,
) -> tuple[tuple[str, ...], list[Offer]]:
    from pricing.gpus import resolve

    names = resolve(gpu_type)
    offers = read_offers(catalog, names, clouds, markets)
    if exclude_suspect:
        offers = [o for o in offers if not o.flags]
    globs = split(region_globs)
    if globs:
        offers = [o for o in offers if any(fnmatch.fnmatchcase(o.region, g) for g in globs)]
    return names, offers


def held_commitments() -> list[Any]:
    """The commitment inventory (gpuprov commitments list); empty where none was imported."""
    from gpuprov.store.commitments import CommitmentStore

    return CommitmentStore().list()


def savings_plan_discounts() -> dict[str, dict[str, Decimal]]:
    """Savings Plans discounts for plans: refreshed rates (gpuprov commitments rates refresh)
    take precedence over the config's ``savings_plans`` per (kind_term, family)."""
    from gpuprov import config
    from gpuprov.store.savings_plans import SavingsPlanRates
    from pricing.savings_plans import discounts, from_rows, merge

    return merge(config.load().savings_plans, discounts(from_rows(SavingsPlanRates().list())))


def check_output_file(path: str, flag: str, suffix: str) -> None:
    """Before any work: a file ``flag`` will write can be written (its folder exists, it is no folder)."""
    import os

    if not path.lower().endswith(suffix):
        raise UsageError(f"{flag} writes a {suffix[1:].upper()}: give a file name ending in {suffix}, got {path!r}")
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"{flag}: {names.show(path, 80)} is a directory")
    if not folder.is_dir():
        raise UsageError(f"{flag}: the folder of {names.show(path, 80)} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{flag}: the folder of {names.show(path, 80)} is not writable")


def now() -> datetime:
    return datetime.now(UTC)


PIPE_WIDTH = 160  # tables written to a file or a pipe, when COLUMNS does not say otherwise


def console() -> Any:
    """A rich console as wide as the terminal (``COLUMNS`` when set, e.g. ``COLUMNS=80 gpuprov …``);
    160 columns when output goes to a file or a pipe. Tables fit its ``width`` (gpuprov/tables.py)."""
    import os

    from rich.console import Console

    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and 20 <= int(columns) <= 1000 else None
    if width is None and not sys.stdout.isatty():
        width = PIPE_WIDTH
    # markup off: names from clouds, files and flags are printed as they are ("[/]" is no tag)
    return Console(width=width, markup=False, emoji=False, highlight=False)


def warn(message: str) -> None:
    from gpuprov.secrets import line

    typer.echo(f"warning: {line(message)}", err=True)


def warn_if_stale(snapshots: Sequence[SnapshotInfo], max_age_hours: Decimal, when: datetime) -> None:
    limit = timedelta(hours=float(max_age_hours))
    old = [s for s in snapshots if when - s.fetched_at > limit]
    if old:
        oldest = min(s.fetched_at for s in old)
        days = (when - oldest).total_seconds() / 86400
        warn(
            f"prices of {', '.join(sorted(s.cloud.value for s in old))} are older than "
            f"{max_age_hours} h (oldest {oldest:%Y-%m-%d}, {days:.0f} days); "
            "run 'gpuprov pricing refresh' for live prices"
        )


def load_plan(spec: str) -> PlanDocument:
    """A saved plan id (or prefix), or a plan JSON file as ``plan --output json`` prints it;
    validated (``plandoc.from_json``): nothing is rendered or launched from a bad document."""
    from gpuprov.plandoc import MAX_DOCUMENT_BYTES, from_json

    path = Path(spec)
    if spec.endswith(".json") or path.is_file():
        try:
            if path.stat().st_size > MAX_DOCUMENT_BYTES:
                raise UsageError(f"plan file {spec} is larger than {MAX_DOCUMENT_BYTES // 2**20} MiB")
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"plan file {spec} is not UTF-8 text") from None
        except OSError as exc:
            raise UsageError(f"cannot read plan file {spec}: {exc.strerror or exc}") from None
        return from_json(text, where=f"plan file {spec}")
    from gpuprov.store.plans import PlanStore

    return PlanStore().get(spec)


def parse_when(text: str, flag: str, end: bool = False) -> datetime:
    """A date (2026-04-02: midnight UTC; as an end, the end of that day) or an ISO time (UTC when
    no zone), within the span a price history may cover (2000 to 2100)."""
    from datetime import timedelta

    from pricing import history

    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"{flag}: not a date or ISO 8601 time: {names.show(text)}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    outside = UsageError(f"{flag}: {names.show(text)} is outside {history.RANGE}")
    try:
        when = when.astimezone(UTC)
        if end and len(text.strip()) == 10:  # a bare date as an end means the whole day
            when += timedelta(days=1)
    except OverflowError:  # years near 1 or 9999
        raise outside from None
    if not (history.in_range(when) or (end and when == history.LATEST)):
        raise outside
    return when


def parse_every(text: str) -> timedelta:
    m = re.fullmatch(r"\s*(\d{1,9})\s*([smh])\s*", text)
    if not m or int(m.group(1)) == 0:
        raise UsageError(f"a duration like 15m, 1h or 90s is needed, got {names.show(text)}")
    n, unit = int(m.group(1)), m.group(2)
    seconds = n * {"s": 1, "m": 60, "h": 3600}[unit]
    if seconds > 366 * 86400:
        raise UsageError(f"a duration of at most a year is needed, got {names.show(text)}")
    return timedelta(seconds=seconds)


# Directories an output path may not be (nor, for the first four, be inside) without --force: a
# mistyped --out must not scatter files through the system or replace a directory it needs.
SYSTEM_DIRS = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/usr/bin",
        "/usr/lib",
        "/usr/local",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/share",
        "/var",
        "/var/lib",
        "/var/log",
        "/var/tmp",
        "/etc/systemd",
    }
)
NEVER_INSIDE = ("/proc", "/sys", "/dev", "/boot")
MAX_PATH = 4096
MAX_PATH_PART = 255


def output_path(text: str, flag: str, force: bool = False, file: bool = False) -> Path:
    """An output path as given, refused (one line, the path shown bounded) when it is empty or
    too long, when it is a symbolic link, or when it is ``/`` or a system directory (or inside
    /proc, /sys, /dev, /boot), unless ``force``; what a link points to is judged too. A ``file``
    is judged by the directory it goes in."""
    shown = names.show_path(text)
    if not text or not text.strip():
        raise UsageError(f"{flag} needs a path")
    if len(text) > MAX_PATH or any(len(part) > MAX_PATH_PART for part in text.split("/")):
        raise UsageError(f"{flag}: the path is too long ({len(text):,} characters): {shown}")
    path = Path(text)
    try:
        link = path.is_symlink()
        resolved = path.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise UsageError(f"{flag}: cannot resolve {shown}: {why}") from None
    if force:
        return path
    if link:
        raise UsageError(
            f"{flag} {shown} is a symbolic link (to {names.show_path(str(resolved))}); not written through",
            hint="name the directory itself, or pass --force to write through the link",
        )
    where = str(resolved.parent if file else resolved)
    if where in SYSTEM_DIRS or any(where == d or where.startswith(d + "/") for d in NEVER_INSIDE):
        raise UsageError(
            f"{flag} {shown} is a system directory ({where}); gpuprov does not write there",
            hint="name a directory of your own (e.g. infra/), or pass --force",
        )
    return path


def from_tuples(rows: Any) -> list[Any]:
    from gpuprov.models import Cloud, Market
    from pricing.history import PriceChange

    return [
        PriceChange(at, Cloud(cloud), kind, (a, b, c), Market(market), price, event)
        for at, cloud, kind, a, b, c, market, price, event in rows
    ]
