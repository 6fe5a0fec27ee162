"""``gpuprov prices``: offers for a GPU type, cheapest per GPU-hour first."""

from __future__ import annotations

import sys

import typer

from gpuprov.commands import common
from gpuprov.errors import UsageError


def register(app: typer.Typer) -> None:
    @app.command()
    def prices(
        gpu_type: str = typer.Option(..., "--type", "-t", help="GPU type: a100, a100-80gb, h100, l4, …"),
        cloud: list[str] = typer.Option(None, "--cloud", help="aws, gcp, azure (repeat or comma-separate)"),
        market: list[str] = typer.Option(None, "--market", help="on_demand, spot, reserved_1y, reserved_3y"),
        region: list[str] = typer.Option(None, "--region", help="region glob, e.g. 'us-*'"),
        output: str = typer.Option("table", "--output", "-o", help="table, json or csv"),
        limit: int = typer.Option(30, "--limit", help="rows in the table (json and csv show all)"),
        exclude_suspect: bool = typer.Option(
            False, "--exclude-suspect", help="leave out flagged quotes (plans leave them out by default)"
        ),
    ) -> None:
        """Offers for a GPU type, cheapest per GPU-hour first."""
        fmt = common.parse_output(output, ("table", "json", "csv"))
        clouds, markets = common.parse_clouds(cloud), common.parse_markets(market)
        catalog, snapshots = common.open_catalog()
        names, offers = common.select_offers(catalog, gpu_type, clouds, markets, region, exclude_suspect)
        offers.sort(key=lambda o: (o.usd_per_gpu_hour, o.hourly_usd, o.key))
        from gpuprov import config, render

        factors = {k: float(v) for k, v in config.load().discounts.items()}
        if fmt == "json":
            render.prices_json(offers, snapshots, sys.stdout, factors)
            return
        if fmt == "csv":
            render.prices_csv(offers, sys.stdout)
            return
        console = common.console()
        console.print(render.catalog_header(snapshots, common.now()))
        from pricing.quality import as_of_line, as_of_spans

        console.print(as_of_line(as_of_spans(offers, {s.cloud.value: s.fetched_at for s in snapshots})))
        if not offers:
            console.print(f"no offers for {', '.join(names)} with these filters")
            return
        title = f"{len(offers)} offers for {', '.join(names)}, cheapest first"
        if factors:
            title += " (negotiated discounts: " + ", ".join(f"{k} ×{v:g}" for k, v in sorted(factors.items())) + ")"
        if not 0 <= limit <= 1_000_000:
            raise UsageError(f"--limit must be between 0 and 1000000, got {limit}")
        if limit > 0 and len(offers) > limit:
            title += f" (first {limit}; --limit 0 for all)"
            offers = offers[:limit]
        console.print(render.prices_table(offers, title, console.width))
