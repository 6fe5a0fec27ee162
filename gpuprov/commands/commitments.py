"""``gpuprov commitments``: the inventory of commitments held (import, list, remove, discover)."""

from __future__ import annotations

import json
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpuprov.commands import common
from gpuprov.errors import ConfigError, ProvisioningError, UsageError

if TYPE_CHECKING:
    from commitments.records import Known
    from gpuprov.billing.report import CommitmentUse


def _known() -> Known:
    from commitments.records import known_in

    catalog, _snapshots = common.open_catalog()
    return known_in(sorted(catalog.places()))


def _billed(records: list[Any]) -> dict[str, CommitmentUse]:
    """Each record's use by the imported bills (gpuprov bill import), where they show it."""
    from gpuprov.billing.report import held_usage
    from gpuprov.store.billing import BillStore

    return held_usage([c.id for c in records], BillStore())


def _billed_row(u: CommitmentUse | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {
        "commitment_discount_id": u.id,
        "from": u.first.isoformat(),
        "to": u.last.isoformat(),
        "used_usd": format(u.used_usd, "f"),
        "unused_usd": format(u.unused_usd, "f"),
        "utilization": None if u.utilization is None else format(u.utilization.quantize(Decimal("0.0001")), "f"),
    }


def _show(records: list[Any], fmt: str, billed: dict[str, CommitmentUse] | None = None) -> None:
    billed = billed or {}
    if fmt == "json":
        rows = [c.row() | ({"billed": _billed_row(billed.get(c.id))} if billed else {}) for c in records]
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    from rich.table import Table

    from gpuprov.render import money

    table = Table(title=f"{len(records)} commitments held", title_justify="left")
    for col in ("id", "cloud", "kind", "scope", "size", "$/h", "term", "starts", "ends", "source"):
        table.add_column(col)
    if billed:
        table.add_column("billed use (30 d)")
    for c in records:
        size = f"{c.count} inst." if c.count is not None else f"{money(c.usd_per_hour or Decimal(0))}/h"
        u = billed.get(c.id)
        use = [] if not billed else ["-" if u is None or u.utilization is None else f"{u.utilization:.0%}"]
        table.add_row(
            c.id,
            c.cloud,
            c.kind.value,
            c.scope,
            size,
            money(c.committed_hourly_usd),
            c.term or "-",
            f"{c.starts:%Y-%m-%d}",
            f"{c.ends:%Y-%m-%d}",
            c.source,
            *use,
        )
    common.console().print(table)


def register(app: typer.Typer) -> None:
    sub = typer.Typer(
        help="Commitments already held (reservations, committed use, Savings Plans): used first by plans.",
        no_args_is_help=True,
    )

    @sub.command("import")
    def import_(path: Path = typer.Argument(..., help="YAML (commitments: [...]) or CSV with a header")) -> None:
        """Add the commitments in FILE; one bad entry stores nothing."""
        from commitments.records import read_file
        from gpuprov.store.commitments import CommitmentStore

        store = CommitmentStore()
        records = read_file(path, _known(), store.ids())
        store.add(records)
        typer.echo(f"stored {len(records)} commitments from {str(path)[:200]}")

    @sub.command("list")
    def list_(output: str = typer.Option("table", "--output", "-o", help="table or json")) -> None:
        """The commitments held; where imported bills show one, its use by the bill over their
        last 30 days (Used and Unused rows, by EffectiveCost: ``billed`` in JSON)."""
        fmt = common.parse_output(output, ("table", "json"))
        from gpuprov.store.commitments import CommitmentStore

        records = CommitmentStore().list()
        _show(records, fmt, _billed(records))

    @sub.command("remove")
    def remove(commitment_id: str = typer.Argument(..., help="the id gpuprov commitments list shows")) -> None:
        """Forget a commitment (it expired, or was sold)."""
        from gpuprov.store.commitments import CommitmentStore

        CommitmentStore().remove(commitment_id)
        typer.echo(f"removed commitment {commitment_id}")

    @sub.command("discover")
    def discover(
        clouds: list[str] = typer.Option(None, "--clouds", help="clouds to ask: aws, gcp, azure (default: all)"),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
        dry_run: bool = typer.Option(False, "--dry-run", help="show what the clouds hold; store nothing"),
        deadline: float = typer.Option(None, "--deadline", help=common.deadline_help("commitments discover")),
    ) -> None:
        """Ask each configured cloud for the commitments the account holds and store them (ids
        start with the cloud and kind, so they never clash with imported ones; found again, a
        record is replaced). What the clouds that answered hold is stored; a configured cloud
        that could not be asked is named and the command exits 4; none configured, 2."""
        common.start_deadline(deadline, "commitments discover")
        fmt = common.parse_output(output, ("table", "json"))
        from commitments import discover as finder
        from commitments.records import known_in
        from gpuprov import config
        from gpuprov.store.commitments import CommitmentStore
        from pricing.gpus import GPUS

        chosen = common.parse_clouds(clouds)
        names = [c.value for c in chosen] if chosen else list(finder.CLOUDS)
        catalog, _snapshots = common.open_catalog()
        offers = common.read_offers(catalog, [g.name for g in GPUS])
        known = known_in(sorted(catalog.places()))
        cfg = config.load()
        records, notes, failed = finder.discover(names, cfg, offers, common.now(), known)
        if all(finder.not_configured(c, cfg) for c in names):
            raise ConfigError(
                f"no cloud of {', '.join(names)} is configured: nothing was asked",
                hint="configure the clouds (see gpuprov/config.py) or name one with --clouds",
            )
        stored = 0 if dry_run or not records else CommitmentStore().add(records, replace=True)
        if fmt == "json":
            body = {"commitments": [c.row() for c in records], "notes": notes, "stored": stored, "unasked": failed}
            json.dump(body, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            for line in notes:
                common.warn(line)
            _show(records, fmt)
            verb = "would store" if dry_run else "stored"
            typer.echo(f"{verb} {len(records)} commitments from {', '.join(c for c in names if c not in failed)}")
        if failed:
            raise ProvisioningError(
                "commitments discover could not ask " + "; ".join(f"{c} ({why})" for c, why in sorted(failed.items())),
                hint="what the other clouds hold was stored; fix those clouds and run it again",
            )

    rates = typer.Typer(
        help="AWS Savings Plans rates: refreshed live, they take precedence over the config's savings_plans.",
        no_args_is_help=True,
    )

    @rates.command("refresh")
    def rates_refresh(
        region: list[str] = typer.Option(
            None, "--region", help="AWS region(s) (default: config aws.regions, else us-east-1)"
        ),
    ) -> None:
        """Ask DescribeSavingsPlansOfferingRates for the catalog's AWS GPU types and store the discounts."""
        from gpuprov import config
        from gpuprov.store.savings_plans import SavingsPlanRates
        from pricing import savings_plans
        from pricing.gpus import GPUS

        regions = common.split(region) or list(config.load().aws.get("regions", [])) or ["us-east-1"]
        for name in regions:
            if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-[0-9]{1,2}", name):
                raise UsageError(f"--region {name[:40]!r} is not an AWS region name such as us-east-1")
        catalog, _snapshots = common.open_catalog()
        offers = common.read_offers(catalog, [g.name for g in GPUS])
        store = SavingsPlanRates()
        for name in regions:
            found, notes = savings_plans.fetch(name, offers)
            for line in notes:
                common.warn(line)
            store.save(name, [r.row() for r in found], common.now())
            typer.echo(f"stored {len(found)} Savings Plans rates for {name}")

    @rates.command("list")
    def rates_list(output: str = typer.Option("table", "--output", "-o", help="table or json")) -> None:
        """The refreshed rates and the discount per family that plans use (config where none)."""
        fmt = common.parse_output(output, ("table", "json"))
        from gpuprov.store.savings_plans import SavingsPlanRates
        from pricing import savings_plans

        found = savings_plans.from_rows(SavingsPlanRates().list())
        used = common.savings_plan_discounts()
        if fmt == "json":
            body = {
                "rates": [{**r.row(), "discount": format(r.discount, "f")} for r in found],
                "discounts": {k: {f: format(v, "f") for f, v in t.items()} for k, t in sorted(used.items())},
            }
            json.dump(body, sys.stdout, indent=2)
            sys.stdout.write("\n")
            return
        from rich.table import Table

        table = Table(title=f"{len(found)} refreshed Savings Plans rates", title_justify="left")
        for col in ("kind", "region", "instance type", "rate $/h", "on-demand $/h", "discount"):
            table.add_column(col)
        for r in found:
            table.add_row(r.kind, r.region, r.instance_type, str(r.rate), str(r.on_demand), f"{r.discount:.1%}")
        common.console().print(table)
        for kind, fams in sorted(used.items()):
            typer.echo(f"{kind}: " + ", ".join(f"{f} {v:.1%}" for f, v in sorted(fams.items())))

    sub.add_typer(rates, name="rates")
    app.add_typer(sub, name="commitments")
