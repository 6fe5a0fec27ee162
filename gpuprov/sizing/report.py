"""``gpuprov size``'s answer: per GPU model the fewest GPUs, the tensor-parallel size, bytes per GPU
with their parts and the fabric it needs; the model's parameters and total bytes (see memory.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from decimal import Decimal
from typing import Any

from gpuprov.sizing import memory
from gpuprov.sizing.model import ModelDims


def describe(use: memory.Training | memory.Serving) -> str:
    if isinstance(use, memory.Serving):
        kv = f", KV cache {use.kv_precision}" if use.kv_precision else ""
        return f"serve at {use.precision}: {use.context:,} tokens of context x {use.sequences:,} sequences{kv}"
    return (
        f"train at {use.precision} (Adam): ZeRO-{use.zero}, TP {use.tp}, PP {use.pp}, micro-batch {use.micro_batch}, "
        f"sequence {use.seq_len:,}" + (", activation checkpointing" if use.checkpointing else "")
    )


def total_bytes(m: ModelDims, use: memory.Training | memory.Serving) -> int:
    """What the job holds in all, unsharded: one replica on one GPU's worth of arithmetic."""
    if isinstance(use, memory.Serving):
        return memory.serving(m, use, 1).total
    return memory.training(m, memory.Training(**{**asdict(use), "tp": 1, "pp": 1}), 1).total


def size(
    m: ModelDims,
    use: memory.Training | memory.Serving,
    gpus: Sequence[tuple[str, int]],
    node_gpus: int = 8,
    utilization: Decimal = memory.UTILIZATION,
) -> dict[str, Any]:
    out = []
    for gpu, mem in gpus:
        if isinstance(use, memory.Serving):
            fit = memory.fit_serving(m, use, gpu, mem, utilization)
        else:
            fit = memory.fit_training(m, use, gpu, mem, utilization)
        nvlink, cross = fit.interconnect(node_gpus)
        out.append(
            {
                "gpu": gpu,
                "memory_gib": mem,
                "usable_bytes": fit.usable,
                "fits": fit.fits,
                "min_gpus": fit.min_gpus,
                "tensor_parallel": fit.tensor_parallel,
                "data_parallel": fit.data_parallel,
                "bytes_per_gpu": fit.parts.total,
                "parts": asdict(fit.parts),
                "nvlink": nvlink,
                "cross_node": cross,
                "reason": fit.reason,
            }
        )
    return {
        "model": m.name,
        "params": m.params,
        "largest_layer_params": m.largest_layer,
        "use": describe(use),
        "precision": use.precision,
        "total_bytes": total_bytes(m, use),
        "utilization": str(utilization),
        "node_gpus": node_gpus,
        "gpus": out,
    }
