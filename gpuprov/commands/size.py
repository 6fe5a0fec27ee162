"""``gpuprov size``: memory per GPU of training or serving a model, and the fewest GPUs of each model."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuprov.commands import common
from gpuprov.errors import UsageError

if TYPE_CHECKING:
    from gpuprov.sizing.model import ModelDims


def register(app: typer.Typer) -> None:
    @app.command()
    def size(
        model: str = typer.Argument(
            None, help="a Hugging Face config.json (read offline), or a known model name, e.g. llama-2-70b"
        ),
        precision: str = typer.Option(None, "--precision", help="fp32, bf16 (fp16), fp8, int8, int4, fp4"),
        train: bool = typer.Option(False, "--train", help="size a training run (Adam)"),
        serve: bool = typer.Option(False, "--serve", help="size serving (weights + vLLM's paged KV cache)"),
        zero: int = typer.Option(0, "--zero", help="training: ZeRO stage 0-3"),
        tp: int = typer.Option(1, "--tp", help="training: tensor-parallel degree"),
        pp: int = typer.Option(1, "--pp", help="training: pipeline-parallel degree"),
        micro_batch: int = typer.Option(1, "--micro-batch", help="training: sequences per GPU per step"),
        seq_len: int = typer.Option(2048, "--seq-len", help="training: sequence length, tokens"),
        checkpointing: bool = typer.Option(False, "--checkpointing", help="training: full activation checkpointing"),
        context: int = typer.Option(4096, "--context", help="serving: tokens of context per sequence"),
        sequences: int = typer.Option(1, "--sequences", help="serving: concurrent sequences"),
        kv_precision: str = typer.Option(None, "--kv-precision", help="serving: KV cache precision (default: 16-bit)"),
        gpu_type: str = typer.Option(None, "--type", "-t", help="only these GPU types, comma-separated"),
        node_gpus: int = typer.Option(8, "--node-gpus", help="GPUs in one node (when a fabric across nodes is needed)"),
        params: int = typer.Option(None, "--params", help="parameters (instead of counting them from the dims)"),
        layers: int = typer.Option(None, "--layers", help="transformer layers"),
        hidden: int = typer.Option(None, "--hidden", help="hidden size"),
        heads: int = typer.Option(None, "--heads", help="attention heads"),
        kv_heads: int = typer.Option(None, "--kv-heads", help="KV heads (grouped-query attention)"),
        intermediate: int = typer.Option(None, "--intermediate", help="MLP intermediate size"),
        vocab: int = typer.Option(None, "--vocab", help="vocabulary size"),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
    ) -> None:
        """Memory per GPU (weights, gradients, optimizer, activations, KV cache, buffers) and the
        fewest GPUs of each GPU model for training or serving a model."""
        fmt = common.parse_output(output, ("table", "json"))
        if train == serve:
            raise UsageError("give --train or --serve")
        if precision is None:
            raise UsageError("give --precision (fp32, bf16, fp8, int8, int4, fp4)")
        for flag, value, low, high in (
            ("--zero", zero, 0, 3),
            ("--tp", tp, 1, 64),
            ("--pp", pp, 1, 512),
            ("--micro-batch", micro_batch, 1, 4096),
            ("--seq-len", seq_len, 1, 10_000_000),
            ("--context", context, 1, 10_000_000),
            ("--sequences", sequences, 1, 1_000_000),
            ("--node-gpus", node_gpus, 1, 64),
            ("--params", params, 1, 10**14),
            ("--layers", layers, 1, 1024),
            ("--hidden", hidden, 1, 1 << 17),
            ("--heads", heads, 1, 1024),
            ("--kv-heads", kv_heads, 1, 1024),
            ("--intermediate", intermediate, 1, 1 << 20),
            ("--vocab", vocab, 1, 1 << 22),
        ):
            if value is not None and not low <= value <= high:
                raise UsageError(f"{flag} must be a whole number from {low} to {high:,}, got {str(value)[:20]}")
        from gpuprov.sizing import memory, report

        prec = memory.precision(precision)
        dims = _dims(model, params, layers, hidden, heads, kv_heads, intermediate, vocab)
        use: memory.Training | memory.Serving
        if train:
            if prec not in memory.TRAINING_PRECISIONS:
                raise UsageError(f"training is sized at fp32 or bf16 (mixed precision), not {prec}")
            if dims.heads % tp:
                raise UsageError(f"--tp {tp} must divide the model's {dims.heads} attention heads")
            if pp > dims.layers:
                raise UsageError(f"--pp {pp} is more than the model's {dims.layers} layers")
            use = memory.Training(prec, zero, tp, pp, micro_batch, seq_len, checkpointing)
        else:
            kv = None if kv_precision is None else memory.precision(kv_precision)
            use = memory.Serving(prec, context, sequences, kv)
        result = report.size(dims, use, _gpus(gpu_type), node_gpus)
        if fmt == "json":
            json.dump(result, sys.stdout, indent=2)
            sys.stdout.write("\n")
            return
        from gpuprov import render_work

        out = common.console()
        for block in render_work.size_table(result):
            out.print(block)


def _dims(
    model: str | None,
    params: int | None,
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    kv_heads: int | None,
    intermediate: int | None,
    vocab: int | None,
) -> ModelDims:
    from gpuprov.sizing import model as models

    flags = (params, layers, hidden, heads, kv_heads, intermediate, vocab)
    if model is not None and (model.endswith(".json") or Path(model).is_file()):
        dims = models.read_config(model)
        if any(v is not None for v in flags):
            raise UsageError("give a config.json or the dimension flags, not both")
        return dims
    if model is None and all(v is None for v in flags):
        raise UsageError("give a config.json, a known model name or the model's dimensions")
    return models.from_flags(model or "", *flags)


def _gpus(spec: str | None) -> list[tuple[str, int]]:
    from pricing.gpus import GPUS, memory_gib, resolve

    if spec is None:
        return [(g.name, g.memory_gib) for g in GPUS]
    names: list[str] = []
    for part in spec.split(","):
        if part.strip():
            names.extend(resolve(part.strip()))
    return [(n, memory_gib(n)) for n in dict.fromkeys(names)]
