"""Demand in work units: what one replica of each GPU type does, from the throughput table, and
why a type is left out (no row, does not fit) — never an invented figure.

For a workload that asks for ``tokens_per_s`` (or ``samples_per_s``) of a model at a precision
(one of several it accepts) and input/output lengths, each GPU type considered gets, per
tensor-parallel size t the table measured (the best row per t; ``throughput.best_by_tp``), a
replica rate ρ_t = t × (work per GPU). When the model's dimensions are known (``model.KNOWN``
or its config.json), a t whose weights and KV cache do not fit (``memory.fit_serving`` at the
workload's context and concurrent sequences) is dropped. The optimizer then counts an instance
of g GPUs as max_t ⌊g / t⌋·ρ_t (``optimizer.problem.work``): a replica stays inside one instance
(tensor parallelism over NVLink, never across nodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpuprov.models import ReplicaRate
from gpuprov.sizing import memory, throughput
from gpuprov.sizing.model import ModelDims, canonical_name, known


@dataclass(frozen=True)
class WorkSpec:
    """What a work-unit workload asks for (policy ``workloads.<name>``)."""

    unit: str  # tokens_per_s | samples_per_s
    model: str
    precisions: tuple[str, ...]
    input_tokens: int | None = None
    output_tokens: int | None = None
    dataset: str | None = None
    sequences: int | None = None  # concurrent sequences a replica holds (for the memory fit)

    @property
    def what(self) -> str:
        lengths = (
            f"dataset {self.dataset}"
            if self.dataset
            else f"{self.input_tokens}/{self.output_tokens} tokens in/out"
            if self.unit == "tokens_per_s"
            else ""
        )
        return f"{canonical_name(self.model)} {'/'.join(self.precisions)}" + (f", {lengths}" if lengths else "")


@dataclass(frozen=True)
class TypeRates:
    """One GPU type for one workload: its replica rates, or why it has none."""

    gpu: str
    rates: tuple[ReplicaRate, ...]
    rows: tuple[throughput.Row, ...]
    reason: str | None = None  # why no rate (left out)
    min_tp: int | None = None  # the smallest tensor-parallel size the memory allows

    @property
    def best(self) -> tuple[ReplicaRate, throughput.Row] | None:
        """The rate with the most work per GPU, and its row."""
        if not self.rates:
            return None
        pairs = list(zip(self.rates, self.rows, strict=True))
        return max(pairs, key=lambda p: (p[0].work_per_s / p[0].tensor_parallel, -p[0].tensor_parallel))


def rates_for(
    spec: WorkSpec,
    gpu_types: Sequence[str],
    rows: Sequence[throughput.Row],
    dims: ModelDims | None = None,
    largest_instance: dict[str, int] | None = None,
) -> list[TypeRates]:
    """Per GPU type considered: replica rates from the rows that measure this work, minus the
    tensor-parallel sizes that do not fit in memory or in any instance of that type."""
    from pricing.gpus import memory_gib

    dims = dims if dims is not None else known(spec.model)
    found = throughput.matching(
        rows, spec.model, spec.precisions, spec.unit, spec.input_tokens, spec.output_tokens, spec.dataset
    )
    best = throughput.best_by_tp(found)
    out = []
    for gpu in gpu_types:
        mine = sorted((r for (g, _t), r in best.items() if g == gpu), key=lambda r: r.tensor_parallel)
        if not mine:
            out.append(
                TypeRates(gpu, (), (), f"no throughput row for {spec.what} on {gpu} (give one with --throughput)")
            )
            continue
        min_tp = None
        if dims is not None and spec.unit == "tokens_per_s":
            # each row at its own precision: its weights and KV cache at the workload's context and
            # concurrency must fit its tensor-parallel size (vLLM's arithmetic, memory.py)
            context = (spec.input_tokens or 0) + (spec.output_tokens or 0) or dims.max_positions or 4096
            cap_bytes = memory.usable_bytes(memory_gib(gpu))
            sequences = spec.sequences or 1
            kept = [r for r in mine if _fits(dims, r, context, sequences, cap_bytes)]
            if not kept:
                serving = memory.Serving(precision=_narrowest(mine), context=context, sequences=spec.sequences or 1)
                fit = memory.fit_serving(dims, serving, gpu, memory_gib(gpu))
                why = (
                    f"does not fit at the measured tensor-parallel sizes "
                    f"({', '.join(str(r.tensor_parallel) for r in mine)}): needs TP {fit.tensor_parallel}"
                    if fit.fits
                    else fit.reason
                )
                out.append(TypeRates(gpu, (), (), f"{why} ({spec.what}, {context} tokens × {spec.sequences or 1})"))
                continue
            min_tp = min(r.tensor_parallel for r in kept)
            mine = kept
        cap = (largest_instance or {}).get(gpu)
        if cap is not None:
            inside = [r for r in mine if r.tensor_parallel <= cap]
            if not inside:
                out.append(
                    TypeRates(
                        gpu,
                        (),
                        (),
                        f"its rows need TP {mine[0].tensor_parallel} or more; the largest instance offered "
                        f"has {cap} GPUs",
                        min_tp,
                    )
                )
                continue
            mine = inside
        out.append(
            TypeRates(
                gpu,
                tuple(ReplicaRate(gpu, r.tensor_parallel, r.per_gpu * r.tensor_parallel, r.ref) for r in mine),
                tuple(mine),
                None,
                min_tp,
            )
        )
    return out


def _fits(dims: ModelDims, r: throughput.Row, context: int, sequences: int, cap_bytes: int) -> bool:
    """Whether a row's replica holds the model at the row's precision, with the workload's context
    and concurrent sequences, in the usable memory of each of its GPUs (memory.py)."""
    if r.tensor_parallel not in memory.valid_tp(dims):
        return False
    use = memory.Serving(precision=r.precision, context=context, sequences=sequences)
    return memory.serving(dims, use, r.tensor_parallel).total <= cap_bytes


def _narrowest(rows: Sequence[throughput.Row]) -> str:
    """The narrowest precision among these rows (the one that needs the least memory)."""
    return min((r.precision for r in rows), key=lambda p: memory.BITS[p])


def usd_per_million(usd_per_gpu_hour: Decimal, work_per_gpu: Decimal) -> Decimal:
    """USD per million units of work on one busy GPU: price / (work a second × 3600) × 10⁶."""
    return (usd_per_gpu_hour / (work_per_gpu * 3600) * 1_000_000).quantize(Decimal("0.0001"))
