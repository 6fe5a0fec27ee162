"""``gpuprov plan --policy P`` when P's demand is in work units: read, call work_planning, render.

Thin: the offers of the types considered come from the catalog, the user's benchmark CSV (if
any) from ``--throughput``; ``gpuprov.work_planning`` does the rest. The output is the plan's
tables plus the work report (one row per workload and GPU type considered).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpuprov.commands import common
from gpuprov.errors import UsageError


def run(
    pol: Any,
    *,
    fmt: str,
    solver: str,
    gap: float,
    time_limit: float,
    exclude_suspect: bool,
    ignore_held: bool,
    throughput_file: str | None,
    save: bool,
    chart: str | None,
    what_if: Decimal | None,
    curve: bool,
    accept_gap: bool = False,
    started: float | None = None,
) -> None:
    from gpuprov import planning, work_planning
    from gpuprov.sizing import throughput

    if curve:
        raise UsageError("--demand gives GPUs per hour; this policy's demand is in work units (tokens or samples)")
    if what_if is not None:
        raise UsageError("--what-if-demand is not available for demand in work units")
    types = work_planning.types_considered(pol.gpu)
    user = throughput.read_user(throughput_file) if throughput_file else ()
    catalog, snapshots = common.open_catalog()
    offers = common.read_offers(catalog, types)
    if exclude_suspect:
        offers = [o for o in offers if not o.flags]
    setup = work_planning.setup(pol, types, offers, user, solver, gap, time_limit)
    held = [] if ignore_held else common.held_commitments()
    spec = planning.with_commitments(setup.spec, held, offers, common.savings_plan_discounts())
    setup = work_planning.Setup(spec, setup.rates, setup.types)
    context = planning.policy_context(pol)
    when = common.now()
    request = planning.request_for(spec, offers, context, when)
    common.warn_if_stale(snapshots, pol.max_price_age_hours, when)
    import time
    from dataclasses import replace

    from gpuprov.commands.plan_output import RESERVE_S

    began = time.monotonic() if started is None else started
    # one deadline for the mix and the solves of each type alone (work_planning.solve shares it)
    request = replace(request, deadline=began + time_limit - min(RESERVE_S, time_limit / 10))
    solved = work_planning.solve(request)
    extra = {"start": when.strftime("%Y-%m-%dT%H")} if spec.held else None
    doc = work_planning.document(solved, setup, request, snapshots, context, when, extra)
    from gpuprov import render_work as work_render
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
        more=lambda d, _width: work_render.work_tables(d),
    )
