"""``gpuprov rebalance``: one pass (--once), a service (--every 15m), its manifests (--emit), history."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import typer

from gpuprov import names
from gpuprov.commands import common
from gpuprov.commands import drivers as driver_factory
from gpuprov.errors import GpuprovError, UsageError

rebalance_app = typer.Typer(
    help="Re-price, re-plan and migrate a running fleet when it pays.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _cron(every: timedelta) -> str:
    seconds = int(every.total_seconds())
    if seconds % 60:
        raise UsageError(f"a CronJob runs at whole minutes: --every {seconds}s is not one (e.g. 1m, 2m, 15m)")
    minutes = seconds // 60
    if minutes < 1 or (minutes < 60 and 60 % minutes) or (minutes >= 60 and (minutes % 60 or 24 % (minutes // 60))):
        raise UsageError("a CronJob needs --every that divides an hour or a day (e.g. 5m, 15m, 1h, 6h)")
    return f"*/{minutes} * * * *" if minutes < 60 else f"0 */{minutes // 60} * * *"


def _duration(text: str) -> timedelta:
    """--deadline: whole seconds (``600``) or a duration (``90s``, ``30m``, ``1h``), 1 s to a day."""
    if text.strip().isdigit() and len(text.strip()) <= 9:
        common.parse_seconds(float(text), "--deadline")
        return timedelta(seconds=int(text))
    found = common.parse_every(text)
    common.parse_seconds(found.total_seconds(), "--deadline")
    return found


def _world(owner: str, plan: str | None, cfg: Any) -> Any:
    from gpuprov.rebalance import World
    from gpuprov.store.lease import Leases
    from gpuprov.store.plans import PlanStore
    from gpuprov.store.state import FleetStore, StateStore

    plans, state, fleets = PlanStore(), StateStore(), FleetStore()
    docs = []
    active = fleets.active_plan(owner)
    for pid in filter(None, [plan, active[0] if active else None]):
        docs.append(plans.get(pid))
    if not docs:
        raise UsageError(f"fleet {owner} follows no plan yet", hint="start it with gpuprov rebalance --once --plan ID")
    mirrored, _ = state.mirrored(owner)
    clouds, regions, zones = driver_factory.scope(docs, mirrored)
    drivers, _skipped = driver_factory.for_fleet(cfg, clouds | state.clouds_used(owner), regions, zones)

    def offers(names: Any) -> Any:
        catalog, _snaps = common.open_catalog()
        return common.read_offers(catalog, names)

    def snapshots() -> Any:
        return common.open_catalog()[1]

    return World(
        drivers=drivers,
        offers=offers,
        snapshots=snapshots,
        refresh=_refresher(clouds),
        plans=plans,
        state=state,
        fleets=fleets,
        leases=Leases(),
        unavailable=lambda now: set(state.unavailable(now)),
    )


def _emit(
    kind: str,
    who: str,
    plan: str | None,
    every: str | None,
    image: str | None,
    out: str | None,
    allow_sqlite: bool,
    annotation: list[str] | None,
    user: str,
    deadline: str,
    tuning: list[tuple[str, str]],
    cfg: Any,
    force: bool = False,
) -> None:
    from pathlib import Path

    from gpuprov import emit
    from gpuprov.store.db import database_url

    interval = common.parse_every(every) if every else timedelta(minutes=15)
    if plan is not None and not names.PLAN_ID.fullmatch(plan):
        raise UsageError(f"--plan: {names.show(plan)} is not a plan id")
    if plan is not None:  # the units' first pass reads it from this database: it must be there
        from gpuprov.store.plans import PlanStore

        plan = PlanStore().get(plan).plan_id
    if kind not in ("cronjob", "systemd"):
        raise UsageError(f"unknown --emit {names.show(kind)}", "choose cronjob or systemd")
    _settings(who, cfg, True, *[v for _f, v in tuning])  # the tuning values must parse as a pass would
    annotations = {}
    for item in common.split(annotation):
        key, sep, value = item.partition("=")
        if not sep or any(ord(c) < 32 for c in value) or len(value) > 1024:
            raise UsageError(f"--service-account-annotation: {names.show(item)} is not KEY=VALUE")
        annotations[key] = value
    job = emit.Job(
        owner=who,
        plan=plan,
        every=interval,
        tuning=tuning,
        annotations=annotations,
        deadline=_duration(deadline),
    )
    files: dict[str, tuple[str, int]] = {}
    if kind == "cronjob":
        url = database_url()
        if url.startswith("sqlite") and not allow_sqlite:
            raise UsageError(
                "a CronJob's filesystem lasts one Job: the lease and journal need PostgreSQL",
                hint="set GPUPROV_DATABASE_URL to PostgreSQL (the Secret gpuprov/database-url), or pass --allow-sqlite",
            )
        config_text: str | None = None
        config_files: dict[str, str] = {}
        secret_files: list[str] = []
        if cfg.path is not None:
            from gpuprov.safeyaml import read_text

            config_text, config_files, secret_files = emit.check_config(
                read_text(cfg.path, str(cfg.path)), str(cfg.path), dict(cfg.bootstrap.scripts)
            )
        from dataclasses import replace as _replace

        job = _replace(
            job,
            image=emit.check_image(image),
            config_yaml=config_text,
            config_files=config_files,
            secret_files=secret_files,
        )
        if secret_files:
            clouds = [f.removeprefix("bootstrap-").removesuffix(".sh") for f in secret_files]
            what = ", ".join(f"bootstrap.{c} ({cfg.bootstrap.credential(c)})" for c in clouds)
            sources = " ".join(
                f"--from-file={f}={names.show_path(cfg.bootstrap.paths.get(c, f))}"
                for f, c in zip(secret_files, clouds, strict=True)
            )
            common.warn(
                f"{what} look like they hold credentials: not copied into the manifest, read from the Secret "
                f"{emit.BOOTSTRAP_SECRET}; create it: kubectl create secret generic {emit.BOOTSTRAP_SECRET} {sources}"
            )
        files["rebalance.yaml"] = (emit.dump(emit.kubernetes(job, _cron(interval))), 0o644)
    else:
        import shutil

        exe = shutil.which("gpuprov", path=str(Path(sys.executable).parent)) or str(
            Path(sys.executable).parent / "gpuprov"
        )
        from gpuprov.store.db import sqlite_path

        env_file = str(Path(out).resolve() / "gpuprov.env") if out else "/etc/gpuprov/env"
        url = database_url()
        db_file = sqlite_path(url)
        writable = [str(db_file.resolve().parent)] if db_file is not None else []
        if db_file is not None and str(db_file.resolve()).startswith(("/tmp/", "/var/tmp/")):
            common.warn(
                f"the units run with PrivateTmp=yes: the database {names.show_path(str(db_file))} is under /tmp, "
                "which they do not see; put it elsewhere (GPUPROV_DATABASE_URL) and emit them again"
            )
        for name, text in emit.systemd(job, exe, user, env_file, writable).items():
            files[name] = (text, 0o644)
        env = {"GPUPROV_DATABASE_URL": url if db_file is None else f"sqlite:///{db_file.resolve()}"}
        if cfg.path is not None:
            env["GPUPROV_CONFIG"] = str(cfg.path.resolve())
        if out:
            from gpuprov.store.database import masked

            files["gpuprov.env"] = ("".join(f"{k}={emit.env_value(v)}\n" for k, v in env.items()), 0o600)
            common.warn(f"the units run {exe} as {user}; {masked(url)} is in {env_file} (mode 0600)")
            if db_file is not None:
                common.warn(f"{user} must be able to write {db_file.resolve().parent} (ReadWritePaths of the unit)")
    if out is None:
        for name, (text, _mode) in files.items():
            if not name.endswith(".env"):
                typer.echo(f"# {name}\n{text}", nl=False)
        return
    _write_files(common.output_path(out, "--out", force), files)
    for name in files:
        common.console().print(f"wrote {Path(out) / name}")


def _write_files(folder: Path, files: dict[str, tuple[str, int]]) -> None:
    """Each file written to a temporary name in the folder with its mode, then renamed."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, (text, mode) in files.items():
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            os.fchmod(fd, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, folder / name)
    except OSError as exc:
        raise UsageError(f"cannot write to {names.show(str(folder), 80)}: {exc.strerror}") from None


def _refresher(clouds: Any) -> Any:
    """A live refresh of the fleet's clouds; a failure is reported and the pass goes on with
    the prices it has (the refresh keeps the previous snapshot current)."""

    def run() -> None:
        from pricing.refresh import default_sources, refresh

        catalog, _ = common.open_catalog()
        try:
            refresh(default_sources(clouds), catalog).raise_for_failures()
        except GpuprovError as exc:
            common.warn(f"price refresh failed, planning on the prices we have: {exc.message}")

    return run


def _settings(
    owner: str, cfg: Any, dry: bool, share: str, min_saving: str, min_fraction: str, hysteresis: str, lead: str
) -> Any:
    from gpuprov.rebalance import Settings
    from gpuprov.store.lease import holder_id

    return Settings(
        owner=owner,
        holder=holder_id("gpuprov rebalance"),
        disruption_share=common.parse_fraction(share, "--disruption-share"),
        min_saving_usd=common.parse_decimal(min_saving, "--min-saving", Decimal(0)),
        min_saving_fraction=common.parse_fraction(min_fraction, "--min-saving-fraction"),
        hysteresis=common.parse_every(hysteresis),
        lead=common.parse_every(lead) if lead != "0" else timedelta(0),
        budget_per_hour=cfg.limits.budget_per_hour,
        max_launch=cfg.limits.max_launch_per_run,
        dry_run=dry,
    )


def _json_record(rec: Any) -> dict[str, Any]:
    """A pass record as JSON: times ISO 8601, money as decimal strings."""
    from gpuprov.plandoc import plain

    return {k: plain(v) for k, v in rec.__dict__.items()}


def _show(rec: Any, fmt: str) -> None:
    doc = _json_record(rec)
    if fmt == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    common.console().print(
        f"{rec.started_at:%Y-%m-%d %H:%M} {rec.decision}: {rec.reason}; launched {rec.launched}, "
        f"terminated {rec.terminated}; ${Decimal(rec.hourly_before_usd):,.2f}/h -> "
        f"${Decimal(rec.hourly_after_usd):,.2f}/h"
    )


@rebalance_app.callback()
def rebalance(
    ctx: typer.Context,
    once: bool = typer.Option(False, "--once", help="one pass, then exit (cron, a Kubernetes CronJob)"),
    every: str = typer.Option(None, "--every", help="run as a service: a pass every 15m, 1h, …"),
    emit: str = typer.Option(None, "--emit", help="print a manifest that runs it: cronjob or systemd"),
    yes: bool = typer.Option(False, "--yes", "-y", help="act; without it, decide and report only"),
    owner: str = typer.Option(None, "--owner", help="fleet name (config: owner)"),
    plan: str = typer.Option(
        None, "--plan", help="the plan a fleet starts from (first pass only): a saved plan's id or a plan file"
    ),
    share: str = typer.Option("0.25", "--disruption-share", help="most of a workload replaced per pass"),
    min_saving: str = typer.Option("5", "--min-saving", help="USD over the horizon a change must save"),
    min_fraction: str = typer.Option("0.02", "--min-saving-fraction", help="and this share of its cost"),
    hysteresis: str = typer.Option("2h", "--hysteresis", help="no new plan sooner than this after the last"),
    lead: str = typer.Option("15m", "--lead", help="follow schedule turns this far ahead"),
    image: str = typer.Option(None, "--image", help="--emit cronjob: the gpuprov image, pinned by tag or digest"),
    out: str = typer.Option(None, "--out", help="--emit: write the files into this directory"),
    allow_sqlite: bool = typer.Option(False, "--allow-sqlite", help="--emit cronjob on a SQLite database"),
    annotation: list[str] = typer.Option(
        None, "--service-account-annotation", help="KEY=VALUE on the ServiceAccount (IRSA, workload identity)"
    ),
    user: str = typer.Option("gpuprov", "--user", help="--emit systemd: the user the pass runs as"),
    force: bool = typer.Option(False, "--force", help="--emit --out: write through a link or into a system directory"),
    deadline: str = typer.Option(
        "30m", "--deadline", help="a pass is stopped after this long (seconds, or 90s, 15m, 1h); --emit: in the units"
    ),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
) -> None:
    """One rebalancing pass, or a service that runs one every interval."""
    if ctx.invoked_subcommand is not None:
        return
    fmt = common.parse_output(output, ("table", "json"))
    from gpuprov import config

    cfg = config.load()
    who = names.owner(owner) if owner is not None else cfg.owner
    modes = sum(bool(x) for x in (once, every and not emit, emit))  # --every also sets --emit's interval
    if modes != 1:
        raise UsageError("choose one of --once, --every DURATION or --emit cronjob|systemd")
    if emit is not None:
        _emit(
            emit,
            who,
            plan,
            every,
            image,
            out,
            allow_sqlite,
            annotation,
            user,
            deadline,
            [
                ("--disruption-share", share),
                ("--min-saving", min_saving),
                ("--min-saving-fraction", min_fraction),
                ("--hysteresis", hysteresis),
                ("--lead", lead),
            ],
            cfg,
            force,
        )
        return
    if plan is not None and not names.PLAN_ID.fullmatch(plan):  # a plan file: stored, then followed by id
        from gpuprov.store.plans import PlanStore

        doc = common.load_plan(plan)
        PlanStore().save(doc)
        plan = doc.plan_id
    budget = _duration(deadline).total_seconds()
    if once:
        common.start_deadline(budget, "rebalance")
    settings = _settings(who, cfg, not yes, share, min_saving, min_fraction, hysteresis, lead)
    interval = common.parse_every(every) if every else timedelta(0)
    from gpuprov.rebalance import SystemClock, run_pass
    from sdk import net

    clock = SystemClock()
    world = _world(who, plan, cfg)
    if once:
        _show(run_pass(world, settings, clock, initial_plan=plan), fmt)
        return
    stop = {"now": False}

    def on_term(_sig: int, _frame: Any) -> None:
        stop["now"] = True  # the pass in flight finishes; no new one starts

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while not stop["now"]:
        started = clock.now()
        net.start(budget, "gpuprov rebalance pass", started=time.monotonic())
        try:
            _show(run_pass(world, settings, clock, initial_plan=plan), fmt)
        except GpuprovError as exc:
            common.warn(f"pass failed: {exc.message}")
        finally:
            net.stop()
        wait = interval - (clock.now() - started)
        deadline = clock.now() + wait
        while not stop["now"] and clock.now() < deadline:
            clock.sleep(min(1.0, max(0.0, (deadline - clock.now()).total_seconds())))
    common.console().print("stopped: SIGTERM received, the last pass finished")


@rebalance_app.command("history")
def history(
    owner: str = typer.Option(None, "--owner", help="fleet name (config: owner)"),
    limit: int = typer.Option(20, "--limit", help="how many passes, newest first"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
) -> None:
    """What each rebalancing pass saw, decided and did."""
    fmt = common.parse_output(output, ("table", "json"))
    if not 1 <= limit <= 10_000:
        raise UsageError(f"--limit must be between 1 and 10000, got {limit}")
    from gpuprov import config
    from gpuprov.store.state import FleetStore

    who = names.owner(owner) if owner is not None else config.load().owner
    passes = FleetStore().history(who, limit)
    if fmt == "json":
        json.dump(
            [_json_record(p) for p in passes],
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return
    from rich.table import Table

    table = Table(title=f"rebalancing passes of fleet {who}, newest first", title_justify="left")
    for col in ("started (UTC)", "decision", "why", "plan", "launched", "ended", "$/h before", "$/h after"):
        table.add_column(col)
    for p in passes:
        table.add_row(
            f"{p.started_at:%Y-%m-%d %H:%M}",
            p.decision,
            p.reason,
            p.plan_after or "—",
            str(p.launched),
            str(p.terminated),
            f"${Decimal(p.hourly_before_usd):,.2f}",
            f"${Decimal(p.hourly_after_usd):,.2f}",
        )
    common.console().print(table)


@rebalance_app.command("health")
def health(
    owner: str = typer.Option(None, "--owner", help="fleet name (config: owner)"),
    max_age: str = typer.Option(..., "--max-age", help="healthy when a pass ended this recently: 2 × --every"),
) -> None:
    """The service mode's probe: exit 0 when the fleet's newest pass ended within --max-age, 4 when not."""
    from gpuprov import config
    from gpuprov.errors import GuardError
    from gpuprov.store.state import FleetStore

    limit = common.parse_every(max_age)
    who = names.owner(owner) if owner is not None else config.load().owner
    newest = FleetStore().history(who, 1)
    now = common.now()
    if not newest:
        raise GuardError(f"fleet {who}: no rebalancing pass recorded yet")
    last = newest[0]
    age = now - last.finished_at
    if age > limit:
        raise GuardError(
            f"fleet {who}: the newest pass ended {age.total_seconds() / 60:.0f} min ago "
            f"({last.finished_at:%Y-%m-%d %H:%M} UTC), more than --max-age {max_age}"
        )
    typer.echo(f"fleet {who}: healthy; the newest pass ended {age.total_seconds():.0f} s ago ({last.decision})")


def register(app: typer.Typer) -> None:
    app.add_typer(rebalance_app, name="rebalance")
