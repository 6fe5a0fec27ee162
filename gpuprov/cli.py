"""The ``gpuprov`` command line: parse, compose, render. The only place that catches GpuprovError.

Heavy modules (SQLModel, PuLP, rich tables, cloud SDKs) are imported inside the commands
that use them, so ``gpuprov --help`` and ``gpuprov plan`` start fast.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import typer
from typer._click import exceptions as click_exc  # typer vendors click; pinned in pyproject
from typer.core import TyperGroup
from typer.exceptions import Abort, Exit

from gpuprov.errors import GpuprovError, UsageError
from gpuprov.models import Cloud, Market, Offer, SnapshotInfo, Workload


class _Group(TyperGroup):
    """Every failure a user can cause ends as one line ``error: …`` and a non-zero exit."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            rc = super().main(*args, **kwargs)
        except GpuprovError as exc:
            _fail(exc.message, exc.hint, exc.exit_code, exc)
        except click_exc.NoArgsIsHelpError as exc:
            typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
            sys.exit(0)
        except click_exc.UsageError as exc:
            hint = None
            if exc.ctx is not None:
                hint = f"see '{exc.ctx.command_path} --help'"
            _fail(exc.format_message(), hint, 2, exc)
        except Abort:
            _fail("aborted", None, 130, None)
        except Exit as exc:
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", None, 130, None)
        sys.exit(rc if isinstance(rc, int) else 0)


def _fail(message: str, hint: str | None, code: int, exc: BaseException | None) -> None:
    if os.environ.get("GPUPROV_DEBUG") == "1" and exc is not None:
        import traceback

        traceback.print_exception(exc)
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"hint: {hint}", err=True)
    sys.exit(code)


app = typer.Typer(
    cls=_Group, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Cost-optimizing GPU provisioner: the cheapest mix of reserved, on-demand and spot "
         "GPUs across AWS, GCP and Azure, hour by hour.",
)


def main() -> None:
    app()


# -- parsing helpers --------------------------------------------------------------------
def _split(values: Sequence[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or ():
        out += [p.strip() for p in v.split(",") if p.strip()]
    return out


def parse_clouds(values: Sequence[str] | None) -> list[Cloud] | None:
    names = _split(values)
    if not names or names == ["all"]:
        return None
    out = []
    for n in names:
        try:
            out.append(Cloud(n.lower()))
        except ValueError:
            raise UsageError(f"unknown cloud {n!r}",
                             f"choose from {', '.join(c.value for c in Cloud)}") from None
    return out


def parse_markets(values: Sequence[str] | None) -> list[Market] | None:
    names = _split(values)
    if not names or names == ["all"]:
        return None
    aliases = {"ondemand": "on_demand", "on-demand": "on_demand", "od": "on_demand",
               "reserved": "reserved_1y", "reserved-1y": "reserved_1y", "reserved-3y": "reserved_3y"}
    out = []
    for n in names:
        key = aliases.get(n.lower(), n.lower())
        try:
            out.append(Market(key))
        except ValueError:
            raise UsageError(f"unknown market {n!r}",
                             f"choose from {', '.join(m.value for m in Market)}") from None
    return out


def parse_fraction(text: str, flag: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise UsageError(f"{flag} must be a number between 0 and 1, got {text!r}") from None
    if not value.is_finite() or not 0 <= value <= 1:
        raise UsageError(f"{flag} must be a number between 0 and 1, got {text!r}")
    return value


def parse_output(value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise UsageError(f"unknown output format {value!r}", f"choose from {', '.join(allowed)}")
    return value


# -- composition ------------------------------------------------------------------------
def open_catalog() -> tuple[Any, list[SnapshotInfo]]:
    """The catalog, with the bundled snapshot loaded on first use; and its current snapshots."""
    from gpuprov.store.catalog import Catalog

    catalog = Catalog()
    current = catalog.snapshots(current_only=True)
    have = {s.cloud for s in current}
    if not have:
        from pricing.snapshot import load_bundled

        for snap in load_bundled():
            if snap.cloud not in have:
                catalog.add_snapshot(snap.source, snap.cloud, snap.as_of, snap.offers, note=snap.note)
        current = catalog.snapshots(current_only=True)
    return catalog, current


def select_offers(catalog: Any, gpu_type: str, clouds: list[Cloud] | None,
                  markets: list[Market] | None, region_globs: Sequence[str]) -> tuple[tuple[str, ...], list[Offer]]:
    from pricing.gpus import resolve

    names = resolve(gpu_type)
    offers: list[Offer] = catalog.offers(names, clouds, markets)
    globs = _split(region_globs)
    if globs:
        offers = [o for o in offers if any(fnmatch.fnmatchcase(o.region, g) for g in globs)]
    return names, offers


def _now() -> datetime:
    return datetime.now(UTC)


def _console() -> Any:
    """A rich console; wide enough for the tables when output is piped to a file."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


@app.command()
def prices(
    gpu_type: str = typer.Option(..., "--type", "-t", help="GPU type: a100, a100-80gb, h100, l4, …"),
    cloud: list[str] = typer.Option(None, "--cloud", help="aws, gcp, azure (repeat or comma-separate)"),
    market: list[str] = typer.Option(None, "--market", help="on_demand, spot, reserved_1y, reserved_3y"),
    region: list[str] = typer.Option(None, "--region", help="region glob, e.g. 'us-*'"),
    output: str = typer.Option("table", "--output", "-o", help="table, json or csv"),
    limit: int = typer.Option(30, "--limit", help="rows in the table (json and csv show all)"),
) -> None:
    """Offers for a GPU type, cheapest per GPU-hour first."""
    fmt = parse_output(output, ("table", "json", "csv"))
    clouds, markets = parse_clouds(cloud), parse_markets(market)
    catalog, snapshots = open_catalog()
    names, offers = select_offers(catalog, gpu_type, clouds, markets, region)
    offers.sort(key=lambda o: (o.usd_per_gpu_hour, o.hourly_usd, o.key))
    from gpuprov import render

    if fmt == "json":
        render.prices_json(offers, snapshots, sys.stdout)
        return
    if fmt == "csv":
        render.prices_csv(offers, sys.stdout)
        return
    console = _console()
    console.print(render.catalog_header(snapshots, _now()))
    if not offers:
        console.print(f"no offers for {', '.join(names)} with these filters")
        return
    title = f"{len(offers)} offers for {', '.join(names)}, cheapest first"
    if limit > 0 and len(offers) > limit:
        title += f" (first {limit}; --limit 0 for all)"
        offers = offers[:limit]
    console.print(render.prices_table(offers, title))


def plan_id(payload: dict[str, Any]) -> str:
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


@app.command()
def plan(
    gpus: int = typer.Option(..., "--gpus", "-n", help="GPUs the cluster needs"),
    gpu_type: str = typer.Option(..., "--type", "-t", help="GPU type: a100, a100-80gb, h100, …"),
    node_gpus: int = typer.Option(None, "--node-gpus", help="GPUs per node; 8 or more makes a one-zone gang"),
    markets: list[str] = typer.Option(None, "--markets", help="allowed markets (default: all)"),
    max_spot_fraction: str = typer.Option("0.5", "--max-spot-fraction", help="at most this share on spot"),
    clouds: list[str] = typer.Option(None, "--clouds", help="allowed clouds (default: all)"),
    region: list[str] = typer.Option(None, "--region", help="allowed region globs"),
    solver: str = typer.Option("cbc", "--solver", help="cbc or highs"),
    gap: float = typer.Option(0.001, "--gap", help="relative optimality gap"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
) -> None:
    """The cheapest mix of reserved, on-demand and spot instances holding N GPUs."""
    fmt = parse_output(output, ("table", "json"))
    if gpus <= 0:
        raise UsageError(f"--gpus must be a positive whole number, got {gpus}")
    if node_gpus is not None and node_gpus <= 0:
        raise UsageError(f"--node-gpus must be a positive whole number, got {node_gpus}")
    if not 0 <= gap < 1:
        raise UsageError(f"--gap must be between 0 and 1, got {gap}")
    spot = parse_fraction(max_spot_fraction, "--max-spot-fraction")
    allowed_clouds, allowed_markets = parse_clouds(clouds), parse_markets(markets)
    if solver not in ("cbc", "highs"):
        raise UsageError(f"unknown solver {solver!r}", "choose cbc or highs")

    catalog, snapshots = open_catalog()
    names, offers = select_offers(catalog, gpu_type, allowed_clouds, allowed_markets, region)
    label = names[0] if len(names) == 1 else "/".join(names)
    workload = Workload(name="cluster", max_spot_fraction=spot, node_gpus=node_gpus,
                        gang=node_gpus is not None and node_gpus >= 8)
    from gpuprov import render
    from gpuprov.optimizer import baselines
    from gpuprov.optimizer.problem import PlanRequest, prepare
    from gpuprov.optimizer.solve import solve

    request = PlanRequest(gpu=label, workloads=(workload,), demand={"cluster": (gpus,)},
                          offers=offers, gap=gap, solver=solver)
    result = solve(request)
    usable, _ = prepare(request)
    aod = baselines.all_on_demand(request, usable)
    single = baselines.best_single_offer(request, usable)
    base = render.Baselines(
        all_on_demand_usd=aod[0] if aod else None, all_on_demand_where=aod[1] if aod else None,
        best_single_offer_usd=single[0] if single else None,
        best_single_offer=single[1] if single else None,
        reserved_plus_spot_usd=baselines.reserved_plus_spot(request, usable))
    pid = plan_id({"gpus": gpus, "type": names, "node_gpus": node_gpus, "spot": str(spot),
                   "markets": allowed_markets, "clouds": allowed_clouds, "region": region,
                   "snapshots": [s.id for s in snapshots]})
    doc = render.plan_dict(pid, result, base, snapshots, gpus)
    if fmt == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    console = _console()
    console.print(render.catalog_header(snapshots, _now()))
    for block in render.plan_tables(doc):
        console.print(block)


if __name__ == "__main__":
    main()
