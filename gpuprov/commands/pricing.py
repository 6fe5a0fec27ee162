"""``gpuprov pricing refresh | import | export | snapshots``."""

from __future__ import annotations

import contextlib
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import typer

from gpuprov import names
from gpuprov.commands import common
from gpuprov.errors import GpuprovError, UsageError

pricing_app = typer.Typer(
    help="The price catalog: refresh from the clouds, import, export, snapshots.", no_args_is_help=True
)


@pricing_app.command("refresh")
def refresh_cmd(
    cloud: list[str] = typer.Option(None, "--cloud", help="aws, gcp, azure or all (default all)"),
    gpu_type: list[str] = typer.Option(None, "--type", help="only these GPU types (others carry over)"),
    workers: int = typer.Option(16, "--workers", help="requests in flight at once"),
    timeout: float = typer.Option(600.0, "--timeout", help="seconds a source may take"),
    deadline: float = typer.Option(None, "--deadline", help=common.deadline_help("pricing refresh")),
) -> None:
    """Fetch on-demand, spot and reserved prices from the clouds' APIs into a new snapshot per cloud."""
    common.start_deadline(deadline, "pricing refresh")
    if not 1 <= workers <= 256:
        raise UsageError(f"--workers must be between 1 and 256, got {workers}")
    from sdk import net

    timeout = net.remaining(common.parse_seconds(timeout, "--timeout"))
    clouds = common.parse_clouds(cloud)
    names: set[str] = set()
    from pricing.gpus import resolve

    for t in common.split(gpu_type):
        names |= set(resolve(t))
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pricing.refresh import default_sources, refresh

    catalog, _ = common.open_catalog()
    sources = default_sources(clouds)
    out = common.console()
    from rich.console import Console

    # the bars are for a person at a terminal: on stderr, only when it is one, gone when done
    with Progress(
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty(),
    ) as bar:
        tasks = {s.cloud: bar.add_task(f"{s.cloud.value}: {s.name}", total=None) for s in sources}

        def on_event(e: Any) -> None:
            bar.update(
                tasks[e.cloud],
                completed=e.done,
                total=max(e.total, e.done) or None,
                description=f"{e.cloud.value}: {e.note or e.state}"[:28],
            )

        result = refresh(sources, catalog, names or None, max_workers=workers, timeout=timeout, progress=on_event)
    for o in result.outcomes:
        if o.ok and o.snapshot is not None:
            skipped = ", ".join(f"{k}: {v}" for k, v in sorted(o.skipped.items())) or "none"
            out.print(
                f"{o.cloud.value}: snapshot {o.snapshot.id}, {o.stored} offers "
                f"({o.carried_over} carried over), skipped {skipped}; {o.requests} requests in {o.seconds:.1f} s"
            )
        else:
            out.print(f"{o.cloud.value}: failed, previous snapshot stays current")
    result.raise_for_failures()


@pricing_app.command("import")
def import_cmd(
    file: str = typer.Argument(..., help="a price file"),
    fmt: str = typer.Option(..., "--format", help="skypilot (a SkyPilot v8 vms.csv) or gpuprov"),
    cloud: str = typer.Option(None, "--cloud", help="the cloud a SkyPilot file is for (checked against its columns)"),
    as_of: str = typer.Option(
        None, "--as-of", help="when the file's prices were current (ISO 8601, with a UTC offset)"
    ),
) -> None:
    """Load a price file as a new snapshot per cloud. It replaces only the markets the file
    carries for that cloud (a SkyPilot file's on-demand and spot: reserved prices stay); rows
    that fail validation are skipped and counted with their line numbers; a file that yields no
    offer, or a bad file, stores nothing. The file is streamed: its size is not limited."""
    from pricing import importer, skypilot

    if fmt not in importer.FORMATS:
        raise UsageError(f"unknown format {names.show(fmt)}", "choose skypilot or gpuprov")
    when = _as_of(as_of, file)
    wanted = None if cloud is None else common.parse_clouds([cloud])
    report = skypilot.ParseReport()
    path, shown = Path(file), names.show(file, 80)
    with importer.read_source(path, fmt, report, wanted, where=shown) as offers:
        from pricing.gpus import GPUS

        catalog, _ = common.open_catalog()
        try:
            imported = importer.store(
                offers, catalog, f"import:{path.name}"[:200], when, report, [g.name for g in GPUS], shown
            )
        finally:
            for line in report.summary():  # whatever was read, also when the import then fails
                common.warn(f"skipped {line}")
    out = common.console()
    for i in imported:
        snap = i.snapshot
        out.print(
            f"{snap.cloud.value}: snapshot {snap.id} with {i.from_file} offers from {path.name} "
            f"({', '.join(sorted(m.value for m in i.markets))}) and {i.kept} kept from the previous snapshot"
        )


def _as_of(text: str | None, file: str) -> datetime:
    if text is None:
        raise UsageError(
            f"{names.show(file, 80)} does not say when its prices were current",
            hint="pass --as-of 2026-05-20T00:00:00+00:00 (the staleness guard reads it)",
        )
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--as-of: not an ISO 8601 time: {names.show(text)}") from None
    if when.tzinfo is None:
        raise UsageError("--as-of needs a UTC offset, e.g. 2026-05-20T00:00:00+00:00")
    now = datetime.now(UTC)
    if when > now + timedelta(hours=1) or when.year < 2000:
        raise UsageError(f"--as-of {names.show(text)} is in the future or before 2000")
    return when.astimezone(UTC)


@pricing_app.command("export")
def export_cmd(
    fmt: str = typer.Option("gpuprov", "--format", help="gpuprov (the only export format)"),
    cloud: list[str] = typer.Option(None, "--cloud", help="only these clouds"),
    out: str = typer.Option(None, "--out", help="write to this file (default: standard output)"),
    force: bool = typer.Option(False, "--force", help="write through a symbolic link or into a system directory"),
) -> None:
    """Write the current catalog (every cloud's current snapshot) as gpuprov CSV."""
    if fmt != "gpuprov":
        raise UsageError(f"unknown export format {fmt!r}", "gpuprov is the one export format")
    from pricing.azure_sizes import corrected
    from pricing.gpuprov_csv import write_offers
    from pricing.gpus import GPUS

    target = None if out is None else common.output_path(out, "--out", force, file=True)
    catalog, _ = common.open_catalog()
    # Azure sizes as Microsoft's size tables give them, also for offers stored before that was applied
    found = catalog.offers([g.name for g in GPUS], common.parse_clouds(cloud))
    offers = sorted((corrected(o) for o in found), key=lambda o: o.key)
    if target is None:
        write_offers(offers, sys.stdout)
        return
    import os
    import tempfile

    if target.is_dir():
        raise UsageError(f"--out {names.show(out, 80)} is a directory; give a file name")
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", suffix=".csv")
    except OSError as exc:
        raise UsageError(f"cannot write to {names.show(out, 80)}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            n = write_offers(offers, fh)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UsageError(f"cannot write to {names.show(out, 80)}: {exc.strerror}") from None
    common.console().print(f"wrote {n} offers to {out}")


@pricing_app.command("snapshots")
def snapshots_cmd(
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
    activate: int = typer.Option(None, "--activate", help="make this snapshot its cloud's current one again"),
) -> None:
    """Every stored snapshot: id, source, cloud, when fetched, rows, current or not."""
    fmt = common.parse_output(output, ("table", "json"))
    from gpuprov import render

    catalog, _ = common.open_catalog()
    if activate is not None:
        snap = catalog.activate(activate)
        common.console().print(f"{snap.cloud.value}: snapshot {snap.id} ({snap.source}) is current again")
    snaps = catalog.snapshots()
    if fmt == "json":
        import json

        json.dump([render.snapshot_dict(s) for s in snaps], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    from rich.table import Table

    now = common.now()
    table = Table(title=f"{len(snaps)} price snapshots", title_justify="left")
    for col in ("id", "cloud", "source", "fetched (UTC)", "age", "rows", "current"):
        table.add_column(col)
    for s in snaps:
        table.add_row(
            str(s.id),
            s.cloud.value,
            s.source,
            f"{s.fetched_at:%Y-%m-%d %H:%M}",
            render.age(s, now),
            str(s.row_count),
            "yes" if s.current else "",
        )
    common.console().print(table)


spot_advisor_app = typer.Typer(
    help="AWS Spot Instance Advisor: the interruption bucket of each AWS spot pool (bundled, refreshable).",
    no_args_is_help=True,
)


def _buckets(advisor: Any) -> dict[str, int]:
    from collections import Counter

    from pricing.spot_risk import OS

    seen = Counter(
        int(pool["r"]) for by_os in advisor.feed["spot_advisor"].values() for pool in by_os.get(OS, {}).values()
    )
    return {label: seen[i] for i, label in enumerate(advisor.labels)}


@spot_advisor_app.command("refresh")
def spot_advisor_refresh(
    timeout: float = typer.Option(60.0, "--timeout", help="seconds to wait for the feed to answer"),
    deadline: float = typer.Option(None, "--deadline", help=common.deadline_help("pricing spot-advisor refresh")),
) -> None:
    """Fetch AWS's public Spot Advisor feed (anonymous HTTPS), keep the GPU families and store it;
    spot offers then take their interruption rate from it. A bad or empty feed changes nothing."""
    common.start_deadline(deadline, "pricing spot-advisor refresh")
    timeout = common.parse_seconds(timeout, "--timeout")
    from gpuprov.store.spot_advisor import SpotAdvisorStore
    from pricing import spot_advisor, spot_risk

    try:
        before = common.spot_advisor()
    except GpuprovError:  # a stored feed that no longer reads: the refresh replaces it
        before = spot_risk.bundled()
    feed = spot_advisor.fetch(timeout=(min(timeout, 10.0), timeout))
    fetched_at = common.now()
    SpotAdvisorStore().save(feed, fetched_at, spot_advisor.FEED_URL)
    after = spot_risk.current((feed, fetched_at))
    changed = sum(
        1
        for region, by_os in after.feed["spot_advisor"].items()
        for itype, pool in by_os.get(spot_risk.OS, {}).items()
        if before.feed["spot_advisor"].get(region, {}).get(spot_risk.OS, {}).get(itype, {}).get("r") != pool["r"]
    )
    spread = ", ".join(f"{label} {n}" for label, n in _buckets(after).items())
    typer.echo(
        f"stored the Spot Advisor feed ({after.origin}): {spot_risk.linux_pools(after.feed)} GPU Linux pools "
        f"in {len(after.feed['spot_advisor'])} regions ({spread}); {changed} new or changed against {before.origin}"
    )


@spot_advisor_app.command("show")
def spot_advisor_show(output: str = typer.Option("table", "--output", "-o", help="table or json")) -> None:
    """Which Spot Advisor feed spot offers read (refreshed or bundled), its date and its buckets."""
    fmt = common.parse_output(output, ("table", "json"))
    from pricing.spot_risk import linux_pools

    advisor = common.spot_advisor()
    body = {
        "origin": advisor.origin,
        "as_of": advisor.as_of.isoformat(),
        "regions": len(advisor.feed["spot_advisor"]),
        "linux_pools": linux_pools(advisor.feed),
        "buckets": _buckets(advisor),
    }
    if fmt == "json":
        import json

        json.dump(body, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    spread = ", ".join(f"{label} {n}" for label, n in body["buckets"].items())
    typer.echo(
        f"Spot Advisor feed: {advisor.origin}; {body['linux_pools']} GPU Linux pools in {body['regions']} "
        f"regions ({spread})"
    )


def register(app: typer.Typer) -> None:
    from gpuprov.commands import history

    history.register(pricing_app)
    pricing_app.add_typer(spot_advisor_app, name="spot-advisor")
    app.add_typer(pricing_app, name="pricing")
