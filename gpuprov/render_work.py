"""Tables for demand in work units: a plan's work report, and ``gpuprov size``. No computing."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpuprov.plandoc import PlanDocument

GIB = Decimal(1 << 30)
WORD = {"tokens_per_s": "tokens", "samples_per_s": "samples"}


def _money(v: Decimal | None, places: str = "0.01") -> str:
    return "—" if v is None else f"${v.quantize(Decimal(places)):,}"


def work_tables(doc: PlanDocument) -> list[Any]:
    from rich.table import Table

    rep = doc.work
    if rep is None:
        return []
    units = {w.name: WORD.get(w.unit, "units") for w in doc.request.workloads}
    table = Table(
        title="GPU types considered (work per GPU from the throughput table, at full load)", title_justify="left"
    )
    for col, just in (
        ("workload", "left"),
        ("GPU", "left"),
        ("status", "left"),
        ("TP", "right"),
        ("/s per GPU", "right"),
        ("$/GPU-h OD", "right"),
        ("$/M OD", "right"),
        ("$/M spot", "right"),
        ("peak GPUs", "right"),
        ("why", "left"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for t in rep.types:
        table.add_row(
            t.workload,
            t.gpu,
            t.status,
            "—" if t.tensor_parallel is None else str(t.tensor_parallel),
            "—" if t.work_per_gpu is None else f"{t.work_per_gpu:,}",
            _money(t.on_demand_usd_per_gpu_hour, "0.0001"),
            _money(t.on_demand_usd_per_million, "0.0001"),
            _money(t.spot_usd_per_million, "0.0001"),
            str(t.peak_gpus),
            t.reason + ("" if t.source is None else f" [{t.source}]"),
        )
    single = Table(title="the same demand on one GPU type (baseline, same rules)", title_justify="left")
    for col in ("GPU", f"over the {doc.horizon_hours} h horizon", "objective", "note"):
        single.add_column(col)
    for s in rep.single_type:
        single.add_row(s.gpu, _money(s.horizon_usd), _money(s.objective_usd), s.reason or "")
    summary = Table(show_header=False, box=None)
    summary.add_column(no_wrap=True)
    summary.add_column()
    for name, v in rep.usd_per_million.items():
        summary.add_row(f"{name}: cost of the work", f"${v:,} per million {units.get(name, 'units')} asked")
    if rep.best_single_type is not None:
        summary.add_row(
            "best single type",
            f"{rep.best_single_type} {_money(rep.best_single_type_horizon_usd)} over the horizon; "
            f"the plan saves {_money(rep.saving_usd)}",
        )
    for note in rep.notes:
        summary.add_row("note", note)
    return [table, single, summary]


def size_table(result: dict[str, Any]) -> list[Any]:
    """The per-GPU-model fit of ``gpuprov size`` (its JSON form as input)."""
    from rich.table import Table

    head = Table(show_header=False, box=None)
    head.add_column(no_wrap=True)
    head.add_column()
    head.add_row("model", f"{result['model']} ({int(result['params']):,} parameters)")
    head.add_row("use", result["use"])
    head.add_row("total", f"{Decimal(result['total_bytes']) / GIB:,.1f} GiB ({int(result['total_bytes']):,} bytes)")
    table = Table(title="per GPU model (usable: 90% of its memory)", title_justify="left")
    for col, just in (
        ("GPU", "left"),
        ("memory", "right"),
        ("fits", "left"),
        ("GPUs", "right"),
        ("TP", "right"),
        ("GiB per GPU", "right"),
        ("weights", "right"),
        ("grads", "right"),
        ("optimizer", "right"),
        ("activations", "right"),
        ("KV cache", "right"),
        ("buffers", "right"),
        ("fabric", "left"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]

    def gib(v: Any) -> str:
        return f"{Decimal(v) / GIB:,.1f}"

    for g in result["gpus"]:
        p = g["parts"]
        fabric = ", ".join(x for x, on in (("NVLink", g["nvlink"]), ("EFA/InfiniBand", g["cross_node"])) if on)
        table.add_row(
            g["gpu"],
            f"{g['memory_gib']} GiB",
            "yes" if g["fits"] else "no",
            "—" if g["min_gpus"] is None else str(g["min_gpus"]),
            "—" if g["tensor_parallel"] is None else str(g["tensor_parallel"]),
            gib(g["bytes_per_gpu"]),
            gib(p["weights"]),
            gib(p["gradients"]),
            gib(p["optimizer"]),
            gib(p["activations"]),
            gib(p["kv_cache"]),
            gib(p["buffers"]),
            fabric or ("—" if g["fits"] else g["reason"] or ""),
        )
    return [head, table]
