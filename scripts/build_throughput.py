#!/usr/bin/env python3
"""Rebuild the bundled throughput table from the source files in data/sources/throughput/.

    python scripts/build_throughput.py [--check] [--out FILE]

Writes gpuprov/sizing/data/throughput.csv: one row per measurement the sources publish for a
GPU of gpuprov's vocabulary (pricing/gpus.py), with the output tokens per second per GPU and the
source row it comes from (file and line, the value as printed, how it was divided). With --check,
writes nothing and exits 1 if the shipped file differs from what the sources give. See
data/sources/throughput/PROVENANCE.md for the sources and what is taken from each.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuprov.sizing.model import canonical_name  # noqa: E402
from pricing import gpus  # noqa: E402

SRC = ROOT / "data" / "sources" / "throughput"
OUT = ROOT / "gpuprov" / "sizing" / "data" / "throughput.csv"
COLUMNS = (
    "gpu",
    "model",
    "precision",
    "tensor_parallel",
    "input_tokens",
    "output_tokens",
    "dataset",
    "batch",
    "tokens_per_s_per_gpu",
    "source",
    "source_line",
    "source_value",
    "derivation",
)
CENT = Decimal("0.01")

# how each source spells a GPU gpuprov knows; every other accelerator is left out (GH200, GB200,
# PCIe/NVL variants, RTX PRO 6000, MI325X, …: no cloud offer of them is in the catalog)
GPU_SPELLINGS = {
    "H200 141GB HBM3": "H200",
    "H100 80GB HBM3": "H100",
    "L40S": "L40S",
    "A100-SXM4-80GB": "A100-80GB",
    "B200": "B200",
    "H200": "H200",
    "H100": "H100",
    "NVIDIA H100-SXM-80GB": "H100",
    "NVIDIA H200-SXM-141GB": "H200",
    "NVIDIA L40S": "L40S",
    "NVIDIA B200-SXM-180GB": "B200",
    "AMD Instinct MI300X 192GB HBM3": "MI300X",
    "Nvidia H100 GPU": "H100",
}
PRECISIONS = {"FP16": "bf16", "BF16": "bf16", "fp16": "bf16", "bf16": "bf16", "FP8": "fp8", "fp8": "fp8"}
PRECISIONS |= {"FP4": "fp4", "fp4": "fp4", "int8": "int8", "int4": "int4"}
MLPERF_MODELS = {
    "llama2-70b-99": "llama-2-70b",
    "llama2-70b-99.9": "llama-2-70b",
    "llama3.1-8b": "llama-3.1-8b",
    "llama3_1-8b": "llama-3.1-8b",
    "llama3.1-405b": "llama-3.1-405b",
    "llama3_1-405b": "llama-3.1-405b",
    "mixtral-8x7b": "mixtral-8x7b",
}


def _gpu(spelling: str) -> str | None:
    name = GPU_SPELLINGS.get(spelling.strip())
    if name is not None:
        gpus.memory_gib(name)  # a KeyError here is a mapping to a name pricing/gpus.py does not have
    return name


def _rows(name: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number in the file, row) for every data row; line 1 is the header."""
    with open(SRC / name, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        for row in reader:
            yield reader.line_num, row


def _per_gpu(value: Decimal, divisor: Decimal) -> str:
    return str((value / divisor).quantize(CENT, rounding=ROUND_HALF_EVEN))


def trtllm_017() -> Iterator[dict[str, str]]:
    """TensorRT-LLM v0.17 "Throughput Measurements": offline max throughput of one TP group."""
    name = "trtllm_perf_overview_v0.17_throughput.csv"
    for line, r in _rows(name):
        gpu = _gpu(r["gpu"])
        if gpu is None:
            continue
        value, n = Decimal(r["throughput_tokens_per_s"]), int(r["num_gpus"])
        yield {
            "gpu": gpu,
            "model": canonical_name(r["model"]),
            "precision": PRECISIONS[r["precision"]],
            "tensor_parallel": r["tp"],
            "input_tokens": r["isl"],
            "output_tokens": r["osl"],
            "dataset": "synthetic",
            "batch": "",
            "tokens_per_s_per_gpu": _per_gpu(value, Decimal(n)),
            "source": name,
            "source_line": str(line),
            "source_value": r["throughput_tokens_per_s"],
            "derivation": f"throughput_tokens_per_s / {n} GPUs (tp)",
        }


def trtllm_10() -> Iterator[dict[str, str]]:
    """TensorRT-LLM v1.0 tables: total output tokens/s of one TP (x PP) group."""
    name = "trtllm_perf_overview_v1.0_throughput.csv"
    for line, r in _rows(name):
        gpu = _gpu(r["gpu"])
        if gpu is None or r["pp"]:  # pipeline-parallel groups only on GPUs gpuprov does not know
            continue
        value, n = Decimal(r["total_output_tokens_per_s"]), int(r["num_gpus"])
        yield {
            "gpu": gpu,
            "model": canonical_name(r["model"]),
            "precision": PRECISIONS[r["precision"]],
            "tensor_parallel": r["tp"],
            "input_tokens": r["isl"],
            "output_tokens": r["osl"],
            "dataset": "synthetic",
            "batch": "",
            "tokens_per_s_per_gpu": _per_gpu(value, Decimal(n)),
            "source": name,
            "source_line": str(line),
            "source_value": r["total_output_tokens_per_s"],
            "derivation": f"total_output_tokens_per_s / {n} GPUs (tp)",
        }


def mlperf_51() -> Iterator[dict[str, str]]:
    """MLPerf Inference v5.1, closed datacenter, Offline, available systems of one node: output
    tokens/s of the whole system; a replica is the node as submitted (its TP/DP split is not in
    the summary), so tensor_parallel is the node's accelerators."""
    name = "mlperf_inference_v5.1_datacenter_closed_llm.csv"
    for line, r in _rows(name):
        gpu = _gpu(r["accelerator_model_name"])
        model = MLPERF_MODELS.get(r["mlperf_model"])
        if (
            gpu is None
            or model is None
            or r["scenario"] != "Offline"
            or r["availability"] != "available"
            or r["division"] != "closed"
            or r["number_of_nodes"] != "1"
            or r["units"] != "Tokens/s"
            or r["weight_data_types"] not in PRECISIONS
        ):
            continue
        value, n = Decimal(r["result"]), int(r["total_accelerators"])
        yield {
            "gpu": gpu,
            "model": model,
            "precision": PRECISIONS[r["weight_data_types"]],
            "tensor_parallel": r["accelerators_per_node"],
            "input_tokens": "",
            "output_tokens": "",
            "dataset": f"mlperf:{r['mlperf_model'].replace('_', '.')}",
            "batch": "",
            "tokens_per_s_per_gpu": _per_gpu(value, Decimal(n)),
            "source": name,
            "source_line": str(line),
            "source_value": r["result"],
            "derivation": f"result (Offline, Tokens/s) / {n} total_accelerators",
        }


def argonne() -> Iterator[dict[str, str]]:
    """Argonne LLM-Inference-Bench, vLLM on H100 (vLLM/H100/benchmark_latency.py): Throughput =
    batch x (input + output) / latency with input = output = "Input Output Length", so output
    tokens/s = Throughput / 2."""
    name = "argonne_llm_inference_bench_All_results.csv"
    for line, r in _rows(name):
        if r["Framework"] != "vLLM" or r["Hardware"] != "Nvidia H100 GPU":
            continue
        gpu = _gpu(r["Hardware"])
        assert gpu is not None
        value, n = Decimal(r["Throughput"]), int(r["Num of Hardware"])
        yield {
            "gpu": gpu,
            "model": canonical_name(r["Model"]),
            "precision": "bf16",
            "tensor_parallel": r["Num of Hardware"],
            "input_tokens": r["Input Output Length"],
            "output_tokens": r["Input Output Length"],
            "dataset": "synthetic",
            "batch": r["Batch Size"],
            "tokens_per_s_per_gpu": _per_gpu(value, Decimal(2 * n)),
            "source": name,
            "source_line": str(line),
            "source_value": r["Throughput"],
            "derivation": f"Throughput / 2 (input and output counted, equal) / {n} GPUs (tp)",
        }


def build() -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    rows = [*trtllm_017(), *trtllm_10(), *mlperf_51(), *argonne()]
    for row in rows:
        writer.writerow(row)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file; write nothing")
    parser.add_argument("--out", default=str(OUT), help="where to write (default: the shipped file)")
    args = parser.parse_args(argv)
    text = build()
    target = Path(args.out)
    if args.check:
        if target.read_text(encoding="utf-8") != text:
            print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target} is out of date")
            return 1
        print(f"{target.name} up to date ({text.count(chr(10)) - 1} rows)")
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({text.count(chr(10)) - 1} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
