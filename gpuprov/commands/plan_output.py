"""What ``plan`` does with a plan document once solved, for GPU and work-unit demand alike: the
time-limit notice, warnings, the imported bills' word on its commitments, --save, --chart, then
JSON or the tables, and exit 7 when the plan is short of the gap asked (unless --accept-gap)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import typer

from gpuprov.commands import common
from gpuprov.models import SolveStatus

EXIT_GAP_NOT_MET = 7
RESERVE_S = 1.5  # of the time limit kept for the baselines and the output, and a solver's overrun


def emit(
    doc: Any,
    *,
    fmt: str,
    snapshots: Sequence[Any],
    when: datetime,
    time_limit: float,
    gap: float,
    accept_gap: bool,
    save: bool,
    chart: str | None,
    held: Sequence[Any] = (),
    more: Callable[[Any, int], Iterable[Any]] | None = None,
) -> None:
    """``more(doc, width)``: blocks printed after the plan's tables (the price-quality lines, the
    work report)."""
    short = doc.solve.status != SolveStatus.OPTIMAL
    stopped = (
        f"STOPPED BY THE TIME LIMIT ({time_limit:g} s): gap {doc.costs.gap:.2%} reached, {gap:.2%} asked; "
        "the plan below is feasible but not proven within the gap"
        + ("" if accept_gap else f" (exit {EXIT_GAP_NOT_MET}; --accept-gap exits 0)")
    )
    if short and fmt == "json":
        common.warn(stopped)
    for line in doc.warnings:
        common.warn(line)
    if held and (doc.commitments.held or doc.commitments.recommended):
        from gpuprov.billing.advice import warnings as billed
        from gpuprov.store.billing import BillStore

        for line in billed(doc, held, BillStore()):  # the imported bills' word on those assumptions
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
    else:
        from gpuprov import render

        out = common.console()
        if short:
            out.print(stopped, style="bold")
        out.print(render.catalog_header(snapshots, when))
        for block in render.plan_tables(doc, out.width):
            out.print(block)
        for block in more(doc, out.width) if more is not None else ():
            out.print(block)
        if doc.horizon_hours > 1:
            out.print(render.slot_chart(doc))
        if save:
            out.print(f"saved plan {doc.plan_id}: gpuprov terraform {doc.plan_id} --out infra/")
        if chart:
            out.print(f"chart written to {chart}")
    if short and not accept_gap:
        raise typer.Exit(EXIT_GAP_NOT_MET)
