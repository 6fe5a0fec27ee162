"""``gpuprov bill``: FOCUS billing exports imported, and the fleet's plans reconciled with them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from gpuprov.commands import common
from gpuprov.errors import UsageError


def _types() -> Any:
    """The GPU instance types of the price catalog, by cloud (what a charge is matched against)."""
    from gpuprov.billing.charges import Types

    catalog, _snapshots = common.open_catalog()
    known: dict[str, set[str]] = {}
    for cloud, _region, itype in catalog.places():
        known.setdefault(cloud, set()).add(itype)
    return Types(known)


def _money(value: Any) -> str:
    from gpuprov.render import money

    return money(value)


def register(app: typer.Typer) -> None:
    sub = typer.Typer(
        help="Planned against billed: FOCUS billing exports (AWS, Azure, GCP) and the plans the fleet followed.",
        no_args_is_help=True,
    )

    @sub.command("import")
    def import_(
        paths: list[Path] = typer.Argument(
            ..., help="FOCUS 1.0 or 1.2 exports: CSV (or .csv.gz, or - for stdin) or Parquet"
        ),
        fmt: str = typer.Option("focus", "--format", help="focus (the only format)"),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
    ) -> None:
        """Store the GPU-instance, commitment and gpuprov-tagged charges of FOCUS exports; every
        row is checked and one bad value stores nothing. The parts of one delivery go together in
        one command: an import replaces what earlier ones stored for the same provider, billing
        account and billing period."""
        out_fmt = common.parse_output(output, ("table", "json"))
        if fmt != "focus":
            raise UsageError(f"unknown bill format {fmt!r}", hint="choose from focus")
        if sum(1 for p in paths if str(p) == "-") > 1:
            raise UsageError("standard input (-) can be read once")
        from gpuprov.billing.importer import import_files
        from gpuprov.store.billing import BillStore

        summaries = import_files(paths, BillStore(), _types())
        if out_fmt == "json":
            json.dump({"imports": [s.as_dict() for s in summaries]}, sys.stdout, indent=2)
            sys.stdout.write("\n")
            return
        for s in summaries:
            for note in s.notes:
                common.warn(f"{s.source}: {note}")
            kept = ", ".join(f"{n:,} {k}" for k, n in sorted(s.kept.items())) or "none"
            typer.echo(
                f"{s.source}: FOCUS {s.focus_version} {s.format.upper()}, {s.rows:,} rows "
                f"(BilledCost {_money(s.billed_usd)}, EffectiveCost {_money(s.effective_usd)}); "
                f"kept {sum(s.kept.values()):,} charges ({kept}): "
                f"BilledCost {_money(s.kept_billed_usd)}, EffectiveCost {_money(s.kept_effective_usd)}"
            )
        replaced = sum(s.replaced for s in summaries)
        if replaced:
            typer.echo(f"replaced {replaced:,} charges of earlier imports of the same billing periods")

    @sub.command("imports")
    def imports(output: str = typer.Option("table", "--output", "-o", help="table or json")) -> None:
        """The bills imported, and how many of their charges are still stored."""
        out_fmt = common.parse_output(output, ("table", "json"))
        from gpuprov.store.billing import BillStore

        found = BillStore().imports()
        if out_fmt == "json":
            body = [
                {
                    "id": r.id,
                    "source": r.source,
                    "sha256": r.sha256,
                    "focus_version": r.focus_version,
                    "format": r.format,
                    "imported_at": r.imported_at.isoformat(),
                    "rows": r.rows_read,
                    "kept": r.rows_stored,
                    "stored_now": r.charges_now,
                    "billed_usd": format(r.billed_usd, "f"),
                    "effective_usd": format(r.effective_usd, "f"),
                    "coverage": [
                        {"provider": p, "cloud": c, "from": a.isoformat(), "to": b.isoformat()}
                        for p, c, a, b in r.coverage
                    ],
                    "notes": list(r.notes),
                }
                for r in found
            ]
            json.dump(body, sys.stdout, indent=2)
            sys.stdout.write("\n")
            return
        from rich.table import Table

        table = Table(title=f"{len(found)} bills imported", title_justify="left")
        for col in ("id", "source", "FOCUS", "rows", "kept", "stored now", "BilledCost", "charge periods"):
            table.add_column(col)
        for r in found:
            spans = "; ".join(f"{c or p}: {a:%Y-%m-%d %H:%M} to {b:%Y-%m-%d %H:%M}" for p, c, a, b in r.coverage)
            table.add_row(
                str(r.id),
                r.source,
                f"{r.focus_version} {r.format}",
                f"{r.rows_read:,}",
                f"{r.rows_stored:,}",
                f"{r.charges_now:,}",
                _money(r.billed_usd),
                spans or "-",
            )
        common.console().print(table)

    @sub.command("report")
    def report(
        owner: str = typer.Option(None, "--owner", help="fleet name (config: owner)"),
        plan: str = typer.Option(None, "--plan", help="one plan of the fleet: the hours it was in force"),
        start: str = typer.Option(None, "--from", help="UTC date or ISO time (default: where the bills start)"),
        end: str = typer.Option(None, "--to", help="UTC date (its end) or ISO time (default: where the bills end)"),
        by: str = typer.Option("day", "--by", help="day, plan, workload or market"),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
        chart: str = typer.Option(None, "--chart", help="FILE.png: planned, effective, billed by day (needs [chart])"),
    ) -> None:
        """Planned against billed: what the plans the fleet followed said each hour would cost,
        against what the imported bills charged (billed, effective, list), the difference by
        cause, commitment utilization, and instances on one side only."""
        out_fmt = common.parse_output(output, ("table", "json"))
        from gpuprov import config, names
        from gpuprov.billing import render
        from gpuprov.billing.report import BY, build
        from gpuprov.store.billing import BillStore
        from gpuprov.store.plans import PlanStore
        from gpuprov.store.state import FleetStore, StateStore

        if by not in BY:
            raise UsageError(f"--by {by!r}: choose from {', '.join(BY)}")
        if chart is not None and not chart.lower().endswith(".png"):
            raise UsageError(f"--chart writes a PNG: give a file name ending in .png, got {names.show(chart)}")
        who = names.owner(owner) if owner is not None else config.load().owner
        when = common.parse_when(start, "--from") if start else None
        until = common.parse_when(end, "--to", end=True) if end else None
        result = build(
            who,
            plan,
            when,
            until,
            by,
            BillStore(),
            FleetStore(),
            PlanStore(),
            StateStore(),
            [c.id for c in common.held_commitments()],
        )
        if chart is not None:
            from gpuprov.billing.chart import write_png

            write_png(result, chart)
        if out_fmt == "json":
            json.dump(render.as_dict(result), sys.stdout, indent=2)
            sys.stdout.write("\n")
            return
        for note in result.notes:
            common.warn(note)
        console = common.console()
        for table in render.tables(result):
            console.print(table)

    app.add_typer(sub, name="bill")
