"""``gpuprov plan``: the cheapest mix of reserved, on-demand and spot GPUs; ``gpuprov plans``."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from decimal import Decimal

import typer

from gpuprov.commands import common
from gpuprov.commands.plan_output import RESERVE_S
from gpuprov.errors import UsageError

DEFAULT_MAX_PRICE_AGE_H = Decimal(24)
# a plan the time limit stopped short of the gap asked: printed (and saved) as it is, exit 7 unless
# --accept-gap (no plan at all within the limit is TimeLimitError, exit 6)
WHAT_IF_SHARE = 0.6  # of the time limit for the plan itself when --what-if-demand solves twice more
SUSPECT_SHARE = 0.75  # of that for the plan itself when it solves again with suspect quotes let in


def register(app: typer.Typer) -> None:
    @app.command()
    def plan(
        gpus: int = typer.Option(None, "--gpus", "-n", help="GPUs the cluster needs (at its peak)"),
        gpu_type: str = typer.Option(None, "--type", "-t", help="GPU type: a100, a100-80gb, h100, …"),
        policy: str = typer.Option(
            None, "--policy", "-p", help="policy file or preset: constant, day-night, weekday-weekend"
        ),
        hours: int = typer.Option(None, "--hours", help="plan horizon with a policy: 24 or 168"),
        demand: str = typer.Option(
            None, "--demand", help="with --policy: GPUs per workload for every hour, from a CSV (hour,<workload>,…)"
        ),
        timezone: str = typer.Option(None, "--timezone", help="the policy's local time zone, e.g. Europe/Berlin"),
        node_gpus: int = typer.Option(None, "--node-gpus", help="GPUs per node; 8 or more makes a one-zone gang"),
        markets: list[str] = typer.Option(None, "--markets", help="allowed markets (default: all)"),
        max_spot_fraction: str = typer.Option(None, "--max-spot-fraction", help="at most this share on spot"),
        clouds: list[str] = typer.Option(None, "--clouds", help="allowed clouds (default: all)"),
        region: list[str] = typer.Option(None, "--region", help="allowed region globs"),
        budget: str = typer.Option(None, "--budget", help="at most this many USD per hour"),
        solver: str = typer.Option("cbc", "--solver", help="cbc or highs"),
        gap: float = typer.Option(0.001, "--gap", help="relative optimality gap"),
        time_limit: float = typer.Option(
            60.0, "--time-limit", help="time limit of the whole command (catalog, solve, baselines), seconds"
        ),
        accept_gap: bool = typer.Option(
            False, "--accept-gap", help="exit 0 with a plan the time limit stopped short of --gap (else exit 7)"
        ),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
        save: bool = typer.Option(False, "--save", help="store the plan for apply and terraform"),
        chart: str = typer.Option(None, "--chart", help="write a stacked-area PNG of GPUs by market"),
        include_suspect: bool = typer.Option(
            False,
            "--include-suspect",
            help="let in quotes flagged as suspect (left out by default; see gpuprov prices)",
        ),
        exclude_suspect: bool = typer.Option(
            False, "--exclude-suspect", help="leave out suspect quotes (the default; kept for scripts that pass it)"
        ),
        what_if_demand: str = typer.Option(
            None, "--what-if-demand", help="also cost the recommended commitments at this share of the demand, e.g. 0.7"
        ),
        ignore_held: bool = typer.Option(
            False, "--ignore-held", help="plan as if no commitment were held (gpuprov commitments list)"
        ),
        throughput_file: str = typer.Option(
            None, "--throughput", help="demand in tokens/s: your benchmark CSV (replaces the table's rows it names)"
        ),
    ) -> None:
        """The cheapest mix of reserved, on-demand and spot instances, hour by hour."""
        started = time.monotonic()
        fmt = common.parse_output(output, ("table", "json"))
        common.positive(gpus, "--gpus", 1_000_000)
        common.positive(node_gpus, "--node-gpus", 64)
        if not 0 <= gap < 1:
            raise UsageError(f"--gap must be between 0 and 1, got {gap}")
        if not 0 < time_limit <= 86_400:
            raise UsageError(f"--time-limit must be between 0 and 86400 seconds, got {time_limit}")
        if solver not in ("cbc", "highs"):
            raise UsageError(f"unknown solver {solver!r}", "choose cbc or highs")
        spot = None if max_spot_fraction is None else common.parse_fraction(max_spot_fraction, "--max-spot-fraction")
        scale = (
            None
            if what_if_demand is None
            else common.parse_decimal(what_if_demand, "--what-if-demand", Decimal("0.01"), Decimal(10))
        )
        cap = None if budget is None else common.parse_decimal(budget, "--budget", Decimal(0), Decimal(10) ** 9)
        allowed_clouds, allowed_markets = common.parse_clouds(clouds), common.parse_markets(markets)
        if chart is not None:
            common.check_output_file(chart, "--chart", ".png")
        from gpuprov import planning

        if demand is not None and gpus is not None:
            raise UsageError("--demand gives the GPUs of every hour; leave out --gpus")
        if policy is None:
            for flag, value in (
                ("--hours", hours),
                ("--timezone", timezone),
                ("--budget", budget),
                ("--demand", demand),
                ("--throughput", throughput_file),
            ):
                if value is not None:
                    raise UsageError(f"{flag} goes with --policy")
            if gpus is None or gpu_type is None:
                raise UsageError("give --gpus and --type (or --policy)")
            from pricing.gpus import resolve

            names = resolve(gpu_type)
            workload = planning.flags_workload(node_gpus, spot)
            spec = planning.flags_spec(
                names,
                gpus,
                workload,
                None if allowed_clouds is None else [c.value for c in allowed_clouds],
                None if allowed_markets is None else [m.value for m in allowed_markets],
                common.split(region),
                solver,
                gap,
                time_limit,
            )
            context = planning.flags_context()
            max_age, total = DEFAULT_MAX_PRICE_AGE_H, gpus
        else:
            from policies import constraints, loader
            from pricing.gpus import resolve

            if timezone is not None:
                loader.parse_timezone(timezone, "--timezone")
            pol = constraints.apply(
                loader.load(policy),
                constraints.Overrides(
                    gpu=gpu_type,
                    gpus=gpus,
                    hours=hours,
                    timezone=timezone,
                    max_spot_fraction=spot,
                    node_gpus=node_gpus,
                    budget_per_hour=cap,
                    markets=None if allowed_markets is None else tuple(m.value for m in allowed_markets),
                    clouds=None if allowed_clouds is None else tuple(c.value for c in allowed_clouds),
                    regions=None if not region else tuple(common.split(region)),
                ),
            )
            from gpuprov import work_planning

            if work_planning.is_work_policy(pol):  # demand in tokens or samples a second, over GPU types
                from gpuprov.commands import work_plan

                work_plan.run(
                    pol,
                    fmt=fmt,
                    solver=solver,
                    gap=gap,
                    time_limit=time_limit,
                    exclude_suspect=exclude_suspect,
                    ignore_held=ignore_held,
                    throughput_file=throughput_file,
                    save=save,
                    chart=chart,
                    what_if=scale,
                    curve=demand is not None,
                    accept_gap=accept_gap,
                    started=started,
                )
                return
            if throughput_file is not None:
                raise UsageError("--throughput goes with a policy whose demand is in tokens_per_s or samples_per_s")
            curve = None
            if demand is not None:  # read against the horizon the flags left (--hours checked)
                from policies import curve as curves

                curve = curves.read(demand, list(pol.workloads), pol.horizon_hours)
                pol = replace(pol, gpus=max(sum(row) for row in zip(*curve.values(), strict=True)))
            if pol.gpu is None:
                raise UsageError(f"policy {pol.name!r} names no GPU type; pass --type")
            if pol.gpus is None:
                raise UsageError(f"policy {pol.name!r} names no GPU total; pass --gpus")
            names = resolve(pol.gpu)
            spec = planning.policy_spec(pol, names, solver, gap, time_limit)
            context = planning.policy_context(pol)
            if curve is not None:  # the curve replaces the schedule: no windows, a demand per hour
                spec, context = planning.with_curve(spec, context, curve)
            max_age, total = pol.max_price_age_hours, pol.gpus
        if include_suspect and exclude_suspect:
            raise UsageError("--include-suspect and --exclude-suspect contradict each other")
        from dataclasses import replace as with_field

        from gpuprov import config

        if include_suspect or (config.load().include_suspect and not exclude_suspect):
            spec = with_field(spec, include_suspect=True)
        catalog, snapshots = common.open_catalog()
        offers = common.read_offers(catalog, names)

        held = [] if ignore_held else common.held_commitments()
        spec = planning.with_commitments(spec, held, offers, common.savings_plan_discounts())
        when = common.now()
        request = planning.request_for(spec, offers, context, when)
        # one deadline for the whole command; a what-if's two solves get a share of it
        reserve = min(RESERVE_S, time_limit / 10)  # for the baselines and the output after the solve
        from gpuprov import price_quality

        # the plan itself first; the solve with suspect quotes let in, then the what-if, share the rest
        suspect = bool(price_quality.screen(spec, offers).suspect)
        share = (WHAT_IF_SHARE if scale is not None else 1.0) * (SUSPECT_SHARE if suspect else 1.0)
        budget = time_limit - reserve
        request = replace(request, deadline=started + budget * share)
        common.warn_if_stale(snapshots, max_age, when)
        from gpuprov import progress

        with progress.on_terminal(started):
            solved = planning.run(request, {"catalog": time.monotonic() - started})
            extra = {"start": when.strftime("%Y-%m-%dT%H")} if spec.held else None
            if scale is not None:
                extra = {**(extra or {}), "what_if_demand": str(scale)}
            pid = planning.plan_id(spec, snapshots, context, extra=extra)
            quality_by = started + budget * (share + (1 - share) * ((1 - WHAT_IF_SHARE) if scale is not None else 1.0))
            quality = price_quality.price_quality(spec, offers, snapshots, context, when, solved, quality_by)
            scenario = (
                None
                if scale is None
                else planning.what_if(solved, spec, offers, context, when, scale, started + budget)
            )
        doc = planning.document(pid, solved, snapshots, total, spec, context, when, what_if=scenario, quality=quality)
        from gpuprov.commands.plan_output import emit

        emit(
            doc,
            fmt=fmt,
            snapshots=snapshots,
            when=when,
            time_limit=time_limit,
            gap=gap,
            accept_gap=accept_gap,
            save=save,
            chart=chart,
            held=held,
            more=lambda d, _width: price_quality.quality_lines(d),
        )

    schema_app = typer.Typer(help="JSON Schemas of gpuprov's documents.", no_args_is_help=True)

    @schema_app.command("plan")
    def schema_plan() -> None:
        """The JSON Schema of the plan document (plan --output json, plan --save), from its model."""
        from gpuprov.plandoc import json_schema

        json.dump(json_schema(), sys.stdout, indent=2)
        sys.stdout.write("\n")

    app.add_typer(schema_app, name="schema")

    @app.command()
    def plans(output: str = typer.Option("table", "--output", "-o", help="table or json")) -> None:
        """Saved plans, newest first."""
        fmt = common.parse_output(output, ("table", "json"))
        from gpuprov.store.plans import PlanStore

        saved = PlanStore().list()
        if fmt == "json":
            json.dump(
                [
                    {
                        "id": p.id,
                        "created_at": p.created_at.isoformat(),
                        "gpu": p.gpu,
                        "gpus": p.gpus,
                        "policy": p.policy,
                        "hourly_usd": p.hourly_usd,
                    }
                    for p in saved
                ],
                sys.stdout,
                indent=2,
            )
            sys.stdout.write("\n")
            return
        from rich.table import Table

        table = Table(title=f"{len(saved)} saved plans", title_justify="left")
        for col in ("id", "created (UTC)", "GPUs", "policy", "$/h"):
            table.add_column(col)
        for p in saved:
            table.add_row(
                str(p.id),
                f"{p.created_at:%Y-%m-%d %H:%M}",
                str(f"{p.gpus}× {p.gpu}"),
                str(p.policy),
                f"${Decimal(p.hourly_usd):,.2f}",
            )
        common.console().print(table)
