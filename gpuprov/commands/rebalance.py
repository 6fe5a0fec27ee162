"""``gpuprov rebalance``: one pass (--once), a service (--every 15m), its manifests (--emit), history."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from datetime import timedelta
from decimal import Decimal
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

IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")


def cronjob(owner: str, cron: str, image: str, plan: str | None) -> str:
    """A Kubernetes CronJob running one pass, written by a YAML serializer (no string pasting)."""
    import yaml

    args = ["rebalance", "--once", "--yes", "--owner", owner] + (["--plan", plan] if plan else [])
    doc = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": f"gpuprov-rebalance-{owner}"},
        "spec": {
            "schedule": cron,
            "concurrencyPolicy": "Forbid",  # the database lease also keeps a second run from acting
            "startingDeadlineSeconds": 300,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "rebalance",
                                    "image": image,
                                    "args": args,
                                    "env": [
                                        {
                                            "name": "GPUPROV_DATABASE_URL",
                                            "valueFrom": {"secretKeyRef": {"name": "gpuprov", "key": "database-url"}},
                                        }
                                    ],
                                }
                            ],
                        }
                    },
                }
            },
        },
    }
    return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))


def systemd_quote(word: str) -> str:
    """One argument of ExecStart, quoted per systemd.syntax: no control characters at all."""
    if any(ord(c) < 32 or ord(c) == 127 for c in word):
        raise UsageError("a value for a systemd unit holds a control character (a newline?)")
    if word and all(c.isalnum() or c in "-_./:=@+" for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$") + '"'


def systemd_units(owner: str, exe: str, plan: str | None, every: timedelta) -> str:
    args = [exe, "rebalance", "--once", "--yes", "--owner", owner] + (["--plan", plan] if plan else [])
    exec_start = " ".join(systemd_quote(a) for a in args)
    return (
        f"# /etc/systemd/system/gpuprov-rebalance-{owner}.service\n"
        "[Unit]\n"
        f"Description=gpuprov rebalancing pass for fleet {owner}\n"
        "After=network-online.target\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"ExecStart={exec_start}\n"
        "EnvironmentFile=-/etc/gpuprov/env\n\n"
        f"# /etc/systemd/system/gpuprov-rebalance-{owner}.timer\n"
        "[Unit]\n"
        f"Description=Run the gpuprov rebalancing pass for fleet {owner} every {every}\n\n"
        "[Timer]\n"
        "OnBootSec=2min\n"
        f"OnUnitActiveSec={int(every.total_seconds())}s\n"
        "Persistent=true\n\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )


def parse_every(text: str) -> timedelta:
    m = re.fullmatch(r"\s*(\d{1,9})\s*([smh])\s*", text)
    if not m or int(m.group(1)) == 0:
        raise UsageError(f"a duration like 15m, 1h or 90s is needed, got {names.show(text)}")
    n, unit = int(m.group(1)), m.group(2)
    seconds = n * {"s": 1, "m": 60, "h": 3600}[unit]
    if seconds > 366 * 86400:
        raise UsageError(f"a duration of at most a year is needed, got {names.show(text)}")
    return timedelta(seconds=seconds)


def _cron(every: timedelta) -> str:
    minutes = int(every.total_seconds() // 60)
    if minutes < 1 or (minutes < 60 and 60 % minutes) or (minutes >= 60 and (minutes % 60 or 24 % (minutes // 60))):
        raise UsageError("a CronJob needs --every that divides an hour or a day (e.g. 5m, 15m, 1h, 6h)")
    return f"*/{minutes} * * * *" if minutes < 60 else f"0 */{minutes // 60} * * *"


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
    from gpuprov.commands.fleet import scope

    clouds, regions, zones = scope(docs, mirrored)
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
        hysteresis=parse_every(hysteresis),
        lead=parse_every(lead) if lead != "0" else timedelta(0),
        budget_per_hour=cfg.limits.budget_per_hour,
        max_launch=cfg.limits.max_launch_per_run,
        dry_run=dry,
    )


def _show(rec: Any, fmt: str) -> None:
    doc = {
        k: (v.isoformat() if hasattr(v, "isoformat") else list(v) if isinstance(v, tuple) else v)
        for k, v in rec.__dict__.items()
    }
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
    plan: str = typer.Option(None, "--plan", help="the plan a fleet starts from (first pass only)"),
    share: str = typer.Option("0.25", "--disruption-share", help="most of a workload replaced per pass"),
    min_saving: str = typer.Option("5", "--min-saving", help="USD over the horizon a change must save"),
    min_fraction: str = typer.Option("0.02", "--min-saving-fraction", help="and this share of its cost"),
    hysteresis: str = typer.Option("2h", "--hysteresis", help="no new plan sooner than this after the last"),
    lead: str = typer.Option("15m", "--lead", help="follow schedule turns this far ahead"),
    image: str = typer.Option("ghcr.io/example/gpuprov:latest", "--image", help="container image for --emit cronjob"),
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
        interval = parse_every(every) if every else timedelta(minutes=15)
        if plan is not None and not names.PLAN_ID.fullmatch(plan):
            raise UsageError(f"--plan: {names.show(plan)} is not a plan id")
        if emit == "cronjob":
            if not IMAGE.fullmatch(image):
                raise UsageError(f"--image: {names.show(image)} is not a container image reference")
            typer.echo(cronjob(who, _cron(interval), image, plan), nl=False)
        elif emit == "systemd":
            exe = (
                os.path.abspath(sys.argv[0])
                if sys.argv and sys.argv[0].endswith("gpuprov")
                else "/usr/local/bin/gpuprov"
            )
            typer.echo(systemd_units(who, exe, plan, interval), nl=False)
        else:
            raise UsageError(f"unknown --emit {names.show(emit)}", "choose cronjob or systemd")
        return
    settings = _settings(who, cfg, not yes, share, min_saving, min_fraction, hysteresis, lead)
    interval = parse_every(every) if every else timedelta(0)
    from gpuprov.rebalance import SystemClock, run_pass

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
        try:
            _show(run_pass(world, settings, clock, initial_plan=plan), fmt)
        except GpuprovError as exc:
            common.warn(f"pass failed: {exc.message}")
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
            [
                {
                    k: (v.isoformat() if hasattr(v, "isoformat") else list(v) if isinstance(v, tuple) else v)
                    for k, v in p.__dict__.items()
                }
                for p in passes
            ],
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


def register(app: typer.Typer) -> None:
    app.add_typer(rebalance_app, name="rebalance")
