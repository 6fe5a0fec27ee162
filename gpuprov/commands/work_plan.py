"""``gpuprov plan --policy P`` when P's demand is in work units: read, call work_planning, render.

Thin: the offers of the types considered come from the catalog, the user's benchmark CSV (if
any) from ``--throughput``; ``gpuprov.work_planning`` does the rest. The output is the plan's
tables plus the work report (one row per workload and GPU type considered).
"""

from __future__ import annotations

import sys
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
    solved = work_planning.solve(request)
    extra = {"start": when.strftime("%Y-%m-%dT%H")} if spec.held else None
    doc = work_planning.document(solved, setup, request, snapshots, context, when, extra)
    for line in doc.warnings:
        common.warn(line)
    if save:
        from gpuprov.store.plans import PlanStore

        PlanStore().save(doc)
    if chart:
        from gpuprov import chart as charts

        charts.write_png(doc, chart)
    if fmt == "json":
        from gpuprov.plandoc import to_json

        sys.stdout.write(to_json(doc) + "\n")
        return
    from gpuprov import render
    from gpuprov import render_work as work_render

    out = common.console()
    out.print(render.catalog_header(snapshots, when))
    for block in render.plan_tables(doc):
        out.print(block)
    for block in work_render.work_tables(doc):
        out.print(block)
    if doc.horizon_hours > 1:
        out.print(render.slot_chart(doc))
    if save:
        out.print(f"saved plan {doc.plan_id}: gpuprov terraform {doc.plan_id} --out infra/")
    if chart:
        out.print(f"chart written to {chart}")
