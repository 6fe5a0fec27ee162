"""``gpuprov apply PLAN``, ``gpuprov status`` and ``gpuprov destroy``: make the plan so, safely."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import typer

from gpuprov import names
from gpuprov.commands import common
from gpuprov.commands import drivers as driver_factory
from gpuprov.errors import (
    ConfigError,
    GuardError,
    InfeasibleError,
    ProvisioningError,
    StalePricesError,
    UsageError,
)
from gpuprov.models import Cloud, WorkloadSite
from sdk import net

if TYPE_CHECKING:
    from gpuprov.plandoc import PlanDocument
    from provisioner.apply import Diff

FAULT_ENV = "GPUPROV_FAULT"  # testing only: "after-launch:3" SIGKILLs the run after its 3rd launch
MAX_FAILOVERS = 10


def _slot(doc: PlanDocument, when: datetime) -> int:
    from gpuprov.planning import slot_at

    return slot_at(doc, when)


def _fault() -> Callable[[str, int], None] | None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return None
    event, _, count = spec.partition(":")

    def hook(name: str, n: int) -> None:
        if name == event and n == int(count):
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def check_fresh(doc: PlanDocument, limit_h: Decimal, allow_stale: bool, when: datetime) -> None:
    as_of = doc.catalog_as_of
    if as_of is None or allow_stale:
        return
    age = when - as_of
    if age > timedelta(hours=float(limit_h)):
        raise StalePricesError(
            f"plan {doc.plan_id} rests on prices from {as_of:%Y-%m-%d}, {age.days} days old (the limit is {limit_h} h)",
            hint="refresh prices and plan again, or pass --allow-stale to apply anyway",
        )


def diff_table(d: Diff, title: str) -> Any:
    from rich.table import Table

    from provisioner.apply import pool_of

    table = Table(title=title, title_justify="left")
    for col in ("action", "cloud", "location", "instance type", "market", "workload", "n", "$/h each"):
        table.add_column(col, no_wrap=True)
    rows: dict[tuple[str, WorkloadSite], int] = {}
    for action, pools in (
        ("launch", [pool_of(r) for r in d.launch]),
        ("terminate", [h.pool for h in d.terminate]),
        ("keep", [h.pool for h in d.keep]),
    ):
        for pool in pools:
            key = (action, pool.workload_site)
            rows[key] = rows.get(key, 0) + 1
    prices: dict[WorkloadSite, Decimal] = {}
    for pool, unit in d.prices.items():  # by site: the first price the diff has for it
        prices.setdefault(pool.workload_site, unit)
    for (action, site), n in sorted(rows.items()):
        price = prices.get(site)
        table.add_row(action, *site, str(n), "?" if price is None else f"${price:,.2f}")
    return table


WAIT_HELP = "wait up to this many seconds for another actor on the fleet to finish"


def _wait(seconds: float) -> timedelta:
    if not 0 <= seconds <= 86_400:
        raise UsageError(f"--wait must be between 0 and 86400 seconds, got {seconds:g}")
    return timedelta(seconds=seconds)


def _unasked(failed: Mapping[Cloud, str], skipped: Mapping[Cloud, str]) -> str:
    parts = [f"{c.value} ({why})" for c, why in sorted({**skipped, **failed}.items())]
    return "; ".join(parts)


def register(app: typer.Typer) -> None:
    @app.command()
    def apply(
        plan: str = typer.Argument(..., help="saved plan id (gpuprov plans) or a plan JSON file"),
        yes: bool = typer.Option(False, "--yes", "-y", help="act; without it, show the diff only"),
        owner: str = typer.Option(None, "--owner", help="fleet name tagged on every instance (config: owner)"),
        slot: int = typer.Option(None, "--slot", help="apply this slot instead of the current one"),
        allow_stale: bool = typer.Option(False, "--allow-stale", help="apply a plan on old prices"),
        max_launch: int = typer.Option(None, "--max-launch", help="circuit breaker: most launches per run"),
        budget: str = typer.Option(None, "--budget", help="never run more than this many USD per hour"),
        wait: float = typer.Option(0.0, "--wait", help=WAIT_HELP),
        concurrency: int = typer.Option(16, "--concurrency", help="launches in flight per cloud region (1-256)"),
        buy_later: bool = typer.Option(
            False, "--buy-later", help="launch reserved instances not bought yet: they bill on demand until bought"
        ),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
        deadline: float = typer.Option(None, "--deadline", help=common.deadline_help("apply")),
    ) -> None:
        """Launch and terminate instances until the clouds run the plan's current slot."""
        common.start_deadline(deadline, "apply")
        if not 1 <= concurrency <= 256:
            raise UsageError(f"--concurrency must be between 1 and 256, got {concurrency}")
        fmt = common.parse_output(output, ("table", "json"))
        from gpuprov import config
        from gpuprov.store.lease import FleetLock, Leases
        from gpuprov.store.plans import PlanStore
        from gpuprov.store.state import StateStore
        from provisioner import apply as engine

        cfg = config.load()
        who = names.owner(owner) if owner is not None else cfg.owner
        limit = max_launch if max_launch is not None else cfg.limits.max_launch_per_run
        if not 0 <= limit <= 1_000_000:
            raise UsageError("--max-launch must be between 0 and 1000000")
        patience = _wait(wait)
        doc = common.load_plan(plan)
        planned_cap = doc.request.budget_per_hour
        cap = (
            common.parse_decimal(budget, "--budget", Decimal(0), Decimal(10) ** 9)
            if budget
            else cfg.limits.budget_per_hour
            if cfg.limits.budget_per_hour is not None
            else planned_cap
        )
        when = common.now()
        try:
            check_fresh(doc, cfg.limits.max_price_age_hours, allow_stale, when)
        except StalePricesError as exc:
            if yes:
                raise
            common.warn(f"{exc.message}; --yes will refuse without --allow-stale")
        at = _slot(doc, when) if slot is None else slot
        if not 0 <= at < doc.horizon_hours:
            raise UsageError(f"--slot must be between 0 and {doc.horizon_hours - 1}")
        state = StateStore()
        buys = _to_buy(doc, when)
        if yes and buys and not buy_later:
            raise GuardError(
                f"plan {doc.plan_id} uses reservations not bought yet: "
                + "; ".join(f"{b.missing}× {b.reservation.instance_type} in {b.reservation.location}" for b in buys),
                hint="buy them (gpuprov apply PLAN shows how) and run gpuprov commitments discover, or pass "
                "--buy-later to run those instances on demand until then",
            )
        drivers, skipped = driver_factory.for_owner(cfg, who, [doc], state)
        out_console = common.console()
        if not yes:
            from gpuprov import fleet as service

            actual, failed = service.describe(drivers, who)
            service.must_answer(doc, failed)
            d = engine.diff(doc, at, actual, who, engine.unit_prices(_plans_of(actual)))
            _report(fmt, doc, at, d, dry=True, console=out_console, buys=buys)
            _fail_if_unasked(failed, skipped, "the diff leaves out")
            return
        from gpuprov import fleet as service

        def replanned(current: PlanDocument, tried: Sequence[str]) -> PlanDocument:
            new = _replan(current, state, list(tried))
            PlanStore().save(new)
            clouds2, regions2, zones2 = driver_factory.scope([new], [])
            for c in clouds2 - set(drivers):
                drivers.update(driver_factory.make({c}, regions2, zones2, cfg))
            return new

        from gpuprov.progress import Line

        line = Line()
        progress = _Progress(line, f"apply {doc.plan_id}")

        def failover(message: str) -> None:
            line.close()
            common.warn(f"{message}; planning again without that pool")

        try:
            with FleetLock(Leases(), who, "gpuprov apply", patience) as lock:
                done = service.reconcile(
                    doc,
                    lambda _doc: at,
                    drivers,
                    state,
                    who,
                    common.now,
                    service.Guards(
                        before_call=_checked(lock.guard),
                        budget_per_hour=cap,
                        max_launch=limit,
                        concurrency=concurrency,
                        fault=_fault(),
                        progress=progress,
                    ),
                    known_plans=_plans_of,
                    replan=replanned,
                    unavailable_for=timedelta(minutes=float(cfg.limits.unavailable_ttl_minutes)),
                    max_failovers=MAX_FAILOVERS,
                    on_failover=failover,
                )
        finally:
            line.close()
        _report(fmt, done.plan, at, done.diff, dry=False, console=out_console, buys=_to_buy(done.plan, when))
        _fail_if_unasked(done.unasked, skipped, "apply left alone whatever runs in")

    @app.command()
    def status(
        owner: str = typer.Option(None, "--owner", help="fleet name (config: owner)"),
        cached: bool = typer.Option(False, "--cached", help="show the database's mirror; call no cloud"),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
        deadline: float = typer.Option(None, "--deadline", help=common.deadline_help("status")),
    ) -> None:
        """Owned instances by plan, market and zone, with their hourly cost, against their plan."""
        common.start_deadline(deadline, "status")
        fmt = common.parse_output(output, ("table", "json"))
        from gpuprov import config, render
        from gpuprov import status as service
        from gpuprov.store.plans import PlanStore
        from gpuprov.store.state import StateStore

        cfg = config.load()
        who = names.owner(owner) if owner is not None else cfg.owner
        state = StateStore()
        mirrored, seen = state.mirrored(who)
        failed: dict[Cloud, str] = {}
        skipped: dict[Cloud, str] = {}
        if cached:
            handles = mirrored
        else:
            drivers, skipped = driver_factory.for_owner(cfg, who, [], state)
            if not drivers:
                _nothing_asked(skipped, "status has nothing live to show")
            handles, failed = _describe(drivers, who)
            if not failed:
                state.mirror(who, handles, common.now())
        plans = service.plans_of(handles, PlanStore().get)
        result = service.summarize(handles, plans, common.now(), common.held_commitments, _on_demand_rates)
        if fmt == "json":
            unasked = {c.value: why for c, why in sorted({**skipped, **failed}.items())}
            json.dump(render.status_dict(result, who, "mirror" if cached else "live", unasked), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            source = (
                f"the database's mirror from {seen:%Y-%m-%d %H:%M} UTC, no cloud asked"
                if cached and seen
                else "the database's mirror (empty), no cloud asked"
                if cached
                else "live"
            )
            out = common.console()
            out.print(render.status_table(result, who, source, out.width))
            if result.commitments:
                out.print(render.commitment_usage_table(result.commitments, out.width))
        _fail_if_unasked(failed, skipped, "status does not show what runs in")

    @app.command()
    def destroy(
        plan: str = typer.Option(None, "--plan", help="only the instances of this plan"),
        owner: str = typer.Option(None, "--owner", help="fleet name (config: owner)"),
        yes: bool = typer.Option(False, "--yes", "-y", help="act; without it, list what would end"),
        wait: float = typer.Option(0.0, "--wait", help=WAIT_HELP),
        deadline: float = typer.Option(None, "--deadline", help=common.deadline_help("destroy")),
    ) -> None:
        """Terminate every instance gpuprov owns (or one plan's), idempotently, in every cloud it can ask."""
        common.start_deadline(deadline, "destroy")
        from gpuprov import config
        from gpuprov.store.lease import FleetLock, Leases
        from gpuprov.store.state import StateStore
        from provisioner.apply import Diff, execute

        cfg = config.load()
        who = names.owner(owner) if owner is not None else cfg.owner
        patience = _wait(wait)
        state = StateStore()
        docs = []
        if plan:
            docs.append(common.load_plan(plan))
        drivers, skipped = driver_factory.for_owner(cfg, who, docs, state)
        out = common.console()
        if not drivers:
            _nothing_asked(skipped, "destroy terminated nothing")
        if not yes:
            actual, failed = _describe(drivers, who)
            doomed = [h for h in actual if not plan or h.plan_id == docs[0].plan_id]
            out.print(f"would terminate {len(doomed)} instances of fleet {who}; pass --yes to do it")
            _fail_if_unasked(failed, skipped, "the count leaves out")
            return
        with FleetLock(Leases(), who, "gpuprov destroy", patience) as lock:
            lock.guard()
            actual, failed = _describe(drivers, who)
            doomed = [h for h in actual if not plan or h.plan_id == docs[0].plan_id]
            d = Diff(plan_id=docs[0].plan_id if docs else "destroy", slot=0, terminate=doomed)
            net.did(f"terminated 0 of {len(doomed)} instances")
            ended: list[Any] = []

            def progress(kind: str, what: Any) -> None:
                ended.extend(what)
                net.did(f"terminated {len(ended)} of {len(doomed)} instances")

            execute(
                d,
                drivers,
                state,
                who,
                common.now,
                max_launch=0,
                fault=_fault(),
                before_call=_checked(lock.guard),
                progress=progress,
            )
            remaining, failed_after = _describe(drivers, who)
            failed = {**failed, **failed_after}
            if not failed:
                state.mirror(who, remaining, common.now())
        if failed or skipped:
            out.print(
                f"terminated {len(doomed)} instances of fleet {who}; {len(remaining)} remain where the clouds answered"
            )
        else:
            out.print(f"terminated {len(doomed)} instances of fleet {who}; {len(remaining)} remain")
        _fail_if_unasked(failed, skipped, "destroy could not end what runs in")


def _checked(guard: Callable[[], None]) -> Callable[[], None]:
    """Before every cloud call: the command's deadline (sdk/net.py), then the lease."""

    def check() -> None:
        net.check("calling the clouds")
        guard()

    return check


class _Progress:
    """What apply has done so far (launched, terminated): the terminal's progress line, and the
    message if its deadline passes."""

    def __init__(self, line: Any, title: str) -> None:
        self.counts: dict[str, int] = {"launched": 0, "terminated": 0}
        self.line, self.title = line, title
        self._lock = threading.Lock()

    def __call__(self, kind: str, what: Any) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + (len(what) if isinstance(what, list | tuple) else 1)
            n = self.counts[kind]
            text = f"{self.title}: {self.counts['launched']} launched, {self.counts['terminated']} terminated"
        self.line.update(text)
        net.did(f"{kind} {n} instances")


def _nothing_asked(skipped: Mapping[Cloud, str], what: str) -> None:
    """``status`` and ``destroy`` alike when no cloud could be made a driver: exit 2, naming why."""
    why = f" ({_unasked({}, skipped)})" if skipped else ""
    raise ConfigError(
        f"no cloud is configured or has credentials, and this fleet has used none{why}: nothing was asked, {what}",
        hint="configure the clouds the fleet runs in (see gpuprov/config.py), or use status --cached",
    )


def _describe(drivers: Mapping[Cloud, Any], who: str) -> tuple[list[Any], dict[Cloud, str]]:
    from gpuprov import fleet as service

    return service.describe(drivers, who)


def _fail_if_unasked(failed: Mapping[Cloud, str], skipped: Mapping[Cloud, str], what: str) -> None:
    if failed or skipped:
        raise ProvisioningError(
            f"{what} {_unasked(failed, skipped)}",
            hint="fix the configuration or credentials of those clouds and run it again",
        )


def _plans_of(handles: Sequence[Any]) -> list[PlanDocument]:
    """The saved plans the running instances came from (those still known)."""
    from gpuprov.status import plans_of
    from gpuprov.store.plans import PlanStore

    return [doc for doc in plans_of(handles, PlanStore().get).values() if doc is not None]


def _on_demand_rates() -> tuple[dict[tuple[str, str, str], Decimal], dict[str, dict[str, Decimal]]]:
    """The catalog's cheapest on-demand price per (cloud, region, instance type) and the Savings
    Plans discounts: what values a held Savings Plan in ``status``."""
    from gpuprov.models import Market
    from pricing.gpus import GPUS

    prices: dict[tuple[str, str, str], Decimal] = {}
    catalog, _snapshots = common.open_catalog()
    for o in common.read_offers(catalog, [g.name for g in GPUS]):
        if o.market is Market.ON_DEMAND:
            key = (o.cloud.value, o.region, o.instance_type)
            prices[key] = min(prices.get(key, o.hourly_usd), o.hourly_usd)
    return prices, common.savings_plan_discounts()


def _replan(doc: PlanDocument, state: Any, tried: list[str]) -> PlanDocument:
    from gpuprov import planning

    catalog, snapshots = common.open_catalog()
    offers = common.read_offers(catalog, doc.request.gpu_names)
    unavailable = set(state.unavailable(common.now()))
    try:
        return planning.replan(doc, offers, snapshots, unavailable, common.now())
    except InfeasibleError as exc:
        raise ProvisioningError("no plan fits the capacity left; tried: " + "; ".join(tried), hint=exc.message) from exc


def _to_buy(doc: PlanDocument, when: datetime) -> list[Any]:
    """The plan's reservations no held commitment covers (commitments/purchase.py)."""
    if not doc.reservations:
        return []
    from commitments.purchase import to_buy

    shapes: dict[tuple[str, str], tuple[int, Decimal]] = {}

    def shape(instance_type: str, region: str) -> tuple[int, Decimal] | None:
        if not shapes:
            catalog, _snaps = common.open_catalog()
            for o in catalog.offers([r.gpu for r in doc.reservations], [Cloud.GCP]):
                shapes[(o.instance_type, o.region)] = (o.vcpus, o.memory_gib)
        return shapes.get((instance_type, region))

    return to_buy(doc, common.held_commitments(), when, shape)


def _report(fmt: str, doc: PlanDocument, slot: int, d: Any, dry: bool, console: Any, buys: Sequence[Any] = ()) -> None:
    from gpuprov.buying import bill

    cost = bill(doc, d, buys)
    summary = {
        "plan_id": doc.plan_id,
        "slot": slot,
        "dry_run": dry,
        "launch": len(d.launch),
        "terminate": len(d.terminate),
        "keep": len(d.keep),
        "hourly_usd_before": str(cost.now_usd),
        "hourly_usd_after": str(cost.until_bought_usd),
        "hourly_usd_once_bought": str(cost.once_bought_usd),
        "to_buy": [
            {
                "kind": b.kind,
                "cloud": b.reservation.cloud,
                "region": b.reservation.region,
                "zone": b.reservation.zone,
                "instance_type": b.reservation.instance_type,
                "instances": b.missing,
                "term_hours": b.reservation.term_hours,
                "hourly_usd": str(b.hourly_usd),
                "liability_usd": str(b.liability_usd),
                "on_demand_hourly_usd": None if b.on_demand_hourly_usd is None else str(b.on_demand_hourly_usd),
                "purchase": b.purchase,
            }
            for b in buys
        ],
    }
    if fmt == "json":
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    verb = "would" if dry else "did"
    if buys:
        from gpuprov.render import money
        from gpuprov.tables import Column, fit

        rows = [
            (
                b.kind,
                f"{b.reservation.instance_type} in {b.reservation.location}",
                str(b.missing),
                b.reservation.term_label,
                money(b.hourly_usd),
                money(b.liability_usd),
                "?" if b.on_demand_hourly_usd is None else money(b.on_demand_hourly_usd),
            )
            for b in buys
        ]
        console.print(
            fit(
                f"reservations to buy first ({len(buys)}): apply buys nothing; until bought, their instances "
                "bill on demand",
                (
                    Column("kind", fold=2, narrowest=8),
                    Column("scope", fold=1, narrowest=14),
                    Column("inst.", "right"),
                    Column("term"),
                    Column("$/h bought", "right"),
                    Column("liability", "right"),
                    Column("$/h on demand", "right", fold=3, narrowest=9),
                ),
                rows,
                console.width,
            )
        )
        for b in buys:
            console.print(f"buy {b.missing}× {b.reservation.instance_type} in {b.reservation.location}: {b.purchase}")
    console.print(
        diff_table(
            d,
            f"plan {doc.plan_id}, slot {slot}: {verb} launch {len(d.launch)}, "
            f"terminate {len(d.terminate)}, keep {len(d.keep)}",
        )
    )
    tail = "   (dry run: pass --yes to act)" if dry else ""
    if buys:
        console.print(
            f"hourly cost ${cost.now_usd:,.2f} -> ${cost.until_bought_usd:,.2f} until the reservations are bought "
            f"(their instances on demand), ${cost.once_bought_usd:,.2f} once bought (paid whole, used or not)" + tail
        )
    else:
        console.print(f"hourly cost ${cost.now_usd:,.2f} -> ${cost.until_bought_usd:,.2f}" + tail)
    for what in cost.unknown:
        common.warn(f"no on-demand price known for {what}: counted at its reserved rate")
