"""``gpuprov backtest``: replay stored price history through the planner and the rebalancer."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from decimal import Decimal
from typing import Any

import typer

from gpuprov import names
from gpuprov.commands import common
from gpuprov.errors import MissingExtraError, UsageError

CENT = Decimal("0.01")
MAX_STEPS = 200_000
SLACK = timedelta(hours=24)  # how far a backtest may reach before the first or past the last stored change


def _usd(x: Decimal) -> str:
    return str(x.quantize(CENT))


def to_json(r: Any) -> dict[str, Any]:
    return {
        "from": r.start.isoformat(),
        "to": r.end.isoformat(),
        "static_plan_id": r.static_plan_id,
        "realized_usd": _usd(r.realized_usd),
        "static_usd": _usd(r.static_usd),
        "hindsight_usd": _usd(r.hindsight_usd),
        "passes": r.passes,
        "migrations": r.migrations,
        "interruptions": r.interruptions,
        "replaced_instances": r.replaced_instances,
        "unmet_gpu_hours": str(r.unmet_gpu_hours.normalize()),
        "shortfall_usd": _usd(r.shortfall_usd),
        "realized_with_shortfall_usd": _usd(r.realized_usd + r.shortfall_usd),
        "catalogs": r.catalogs,
        "changes_applied": r.changes_applied,
        "solves": r.solves,
        "solves_reused": r.solves_reused,
        "seconds": round(r.seconds, 2),
        "days": [
            {
                "day": d.day.isoformat(),
                "realized_usd": _usd(d.realized_usd),
                "static_usd": _usd(d.static_usd),
                "hindsight_usd": _usd(d.hindsight_usd),
                "passes": d.passes,
                "migrations": d.migrations,
                "interruptions": d.interruptions,
                "replaced_instances": d.replaced_instances,
            }
            for d in r.days
        ],
    }


def write_chart(r: Any, path: str, title: str) -> None:
    """The three cumulative costs, step by step (needs matplotlib)."""
    import os
    import tempfile

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("--chart needs matplotlib", hint="pip install 'gpuprov[chart]'") from None
    xs = [s.at for s in r.steps]
    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    for attr, label, colour in (
        ("static_usd", "static (day-one plan held)", "#f2a541"),
        ("realized_usd", "realized (rebalanced)", "#1f4e9c"),
        ("hindsight_usd", "hindsight (best per hour)", "#4caf50"),
    ):
        total, ys = Decimal(0), []
        for s in r.steps:
            total += getattr(s, attr)
            ys.append(float(total))
        ax.plot(xs, ys, label=f"{label}: ${total:,.0f}", color=colour, linewidth=1.4)
    ax.set_ylabel("cumulative USD")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(suffix=".png", dir=folder)
        os.close(fd)
        fig.savefig(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write the chart to {names.show(path, 80)}: {exc.strerror}") from None
    finally:
        plt.close(fig)


def register(app: typer.Typer) -> None:
    @app.command()
    def backtest(
        policy: str = typer.Option("constant", "--policy", "-p", help="policy file or preset"),
        gpus: int = typer.Option(None, "--gpus", "-n", help="GPUs at the peak"),
        gpu_type: str = typer.Option(None, "--type", "-t", help="GPU type: a100, h100, …"),
        clouds: list[str] = typer.Option(None, "--clouds", help="allowed clouds (default: the policy's)"),
        region: list[str] = typer.Option(None, "--region", help="allowed region globs"),
        markets: list[str] = typer.Option(
            None, "--markets", help="on_demand, spot or both (the default; the history has no reserved prices)"
        ),
        node_gpus: int = typer.Option(None, "--node-gpus", help="GPUs per node; 8 or more makes a one-zone gang"),
        start: str = typer.Option(..., "--from", help="start (a date is midnight UTC)"),
        end: str = typer.Option(..., "--to", help="end, exclusive (a date means the end of that day)"),
        every: str = typer.Option("1h", "--every", help="a rebalancing pass every 15m, 1h, …"),
        seed: int = typer.Option(0, "--seed", help="seed of the spot interruptions"),
        interruptions: str = typer.Option("advisor", "--interruptions", help="advisor (pool rates) or none"),
        min_saving: str = typer.Option("5", "--min-saving", help="USD over the horizon a change must save"),
        min_fraction: str = typer.Option("0.02", "--min-saving-fraction", help="and this share of its cost"),
        hysteresis: str = typer.Option("2h", "--hysteresis", help="no new plan sooner than this after the last"),
        share: str = typer.Option("0.25", "--disruption-share", help="most of a workload replaced per pass"),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
        chart: str = typer.Option(None, "--chart", help="write the three cumulative costs as a PNG"),
    ) -> None:
        """Replay the stored price history: the rebalanced fleet against the day-one plan and hindsight."""
        fmt = common.parse_output(output, ("table", "json"))
        if not 0 <= seed < 2**63:  # Python's random takes |seed|: -1 would replay seed 1
            raise UsageError(f"--seed must be a whole number from 0 to 2^63-1, got {str(seed)[:30]}")

        lo, hi = common.parse_when(start, "--from"), common.parse_when(end, "--to", end=True)
        if lo >= hi:
            raise UsageError(f"the range is empty: --from {names.show(start)} is not before --to {names.show(end)}")
        step = common.parse_every(every)
        if step < timedelta(minutes=5):
            raise UsageError("--every must be at least 5m")
        if (hi - lo) / min(step, timedelta(hours=1)) > MAX_STEPS:
            raise UsageError(f"the range holds more than {MAX_STEPS:,} steps; shorten it or pass a longer --every")
        if interruptions not in ("advisor", "none"):
            raise UsageError(f"--interruptions: {names.show(interruptions)} is not advisor or none")
        if chart is not None and not chart.lower().endswith(".png"):
            raise UsageError(f"--chart writes a PNG: give a file name ending in .png, got {names.show(chart, 80)}")
        common.positive(gpus, "--gpus", 100_000)
        common.positive(node_gpus, "--node-gpus", 64)
        allowed_clouds = common.parse_clouds(clouds)
        from gpuprov.models import Market

        allowed_markets = common.parse_markets(markets or ["on_demand,spot"]) or [Market.ON_DEMAND, Market.SPOT]
        reserved = [m.value for m in allowed_markets if m not in (Market.ON_DEMAND, Market.SPOT)]
        if reserved:
            raise UsageError(
                f"--markets: the price history carries no reserved prices ({', '.join(reserved)}); "
                "a backtest plans on_demand and spot"
            )
        from gpuprov import planning
        from policies import constraints, loader
        from pricing.gpus import resolve

        pol = constraints.apply(
            loader.load(policy),
            constraints.Overrides(
                gpu=gpu_type,
                gpus=gpus,
                node_gpus=node_gpus,
                markets=tuple(m.value for m in allowed_markets),
                clouds=None if allowed_clouds is None else tuple(c.value for c in allowed_clouds),
                regions=None if not region else tuple(common.split(region)),
            ),
        )
        if pol.gpu is None or pol.gpus is None:
            raise UsageError(f"policy {pol.name!r} names no GPU type or total; pass --type and --gpus")
        gpu_names = resolve(pol.gpu)
        spec = planning.policy_spec(pol, gpu_names, "cbc", 0.001, 60.0)
        context = planning.policy_context(pol)
        from gpuprov.models import Cloud
        from gpuprov.store.history import HistoryStore

        scope = [c.value for c in Cloud if (not spec.clouds_allow or c.value in spec.clouds_allow)]
        scope = [c for c in scope if c not in spec.clouds_deny]
        store = HistoryStore()
        cover = [c for c in store.coverage() if c.cloud in scope]
        if not cover:
            raise UsageError(
                f"no price history is stored for {', '.join(scope)}",
                hint="gpuprov pricing history import FILE --format anycloud|daily-price",
            )
        # the range must lie within the stored span (a day's slack either side): past its end the
        # prices are made up, and a walk of years would run for minutes
        first, last = min(c.first for c in cover), max(c.last for c in cover)
        if lo < first - SLACK or hi > last + SLACK:
            spans = "; ".join(f"{c.cloud} {c.first:%Y-%m-%d %H:%M} to {c.last:%Y-%m-%d %H:%M}" for c in cover)
            raise UsageError(
                f"--from/--to ({lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M}) is outside the history "
                f"({first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC, give or take a day: {spans})"
            )
        catalog, snapshots = common.open_catalog()
        base = common.read_offers(catalog, gpu_names)
        base_as_of = {s.cloud: s.fetched_at for s in snapshots}
        changes = common.from_tuples(store.changes(scope))
        from gpuprov import backtest as bt

        cfg = bt.Config(
            spec=spec,
            context=context,
            gpus=pol.gpus,
            start=lo,
            end=hi,
            every=step,
            seed=seed,
            interruptions=interruptions == "advisor",
            min_saving_usd=common.parse_decimal(min_saving, "--min-saving", Decimal(0)),
            min_saving_fraction=common.parse_fraction(min_fraction, "--min-saving-fraction"),
            hysteresis=common.parse_every(hysteresis),
            disruption_share=common.parse_fraction(share, "--disruption-share"),
        )
        from gpuprov.progress import Line

        line = Line()
        total = max(1, int((hi - lo) / min(step, timedelta(hours=1))))
        seen = {"steps": 0, "passes": 0, "adopted": 0}

        def on_step(s: Any) -> None:
            seen["steps"] += 1
            seen["passes"] += int(s.passed)
            seen["adopted"] += int(s.decision == "adopt")
            line.update(
                f"backtest {s.at:%Y-%m-%d %H:%M} UTC: step {seen['steps']:,} of {total:,}, "
                f"{seen['passes']:,} passes, {seen['adopted']} plans adopted"
            )

        try:
            result = bt.run(cfg, base, base_as_of, changes, on_step=on_step)
        finally:
            line.close()
        if chart is not None:
            write_chart(result, chart, f"backtest {pol.name}: {pol.gpus} × {pol.gpu}, {lo:%Y-%m-%d} to {hi:%Y-%m-%d}")
        if fmt == "json":
            json.dump(to_json(result), sys.stdout, indent=2)
            sys.stdout.write("\n")
            return
        _table(result)


def _table(r: Any) -> None:
    from rich.table import Table

    out = common.console()
    table = Table(title=f"backtest {r.start:%Y-%m-%d %H:%M} to {r.end:%Y-%m-%d %H:%M} UTC (USD)", title_justify="left")
    for col in ("day", "realized", "static", "hindsight", "passes", "migrations", "interruptions", "replaced"):
        table.add_column(col, justify="right" if col != "day" else "left")
    for d in r.days:
        table.add_row(
            d.day.isoformat(),
            f"{d.realized_usd:,.2f}",
            f"{d.static_usd:,.2f}",
            f"{d.hindsight_usd:,.2f}",
            str(d.passes),
            str(d.migrations),
            str(d.interruptions),
            str(d.replaced_instances),
        )
    out.print(table)
    vs = (r.realized_usd / r.static_usd - 1) if r.static_usd else Decimal(0)
    out.print(
        f"realized ${r.realized_usd:,.2f}, static ${r.static_usd:,.2f} ({vs:+.2%}), hindsight ${r.hindsight_usd:,.2f}; "
        f"{r.passes} passes, {r.migrations} migrations, {r.interruptions} interruptions, "
        f"{r.replaced_instances} instances replaced, {r.unmet_gpu_hours.normalize()} GPU-hours short "
        f"(${r.shortfall_usd:,.2f} at hindsight prices); "
        f"{r.catalogs} catalogs, {r.solves} solves ({r.solves_reused} reused), {r.seconds:.1f} s"
    )
