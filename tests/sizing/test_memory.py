"""Memory arithmetic against the tools' published figures and against a second computation.

Published figures used (each quoted where it is checked):
* DeepSpeed, docs/code-docs/source/memory.rst: t5-3b (2,851M params, 32M largest layer), 1 node
  of 8 GPUs: ZeRO-3 "6.09GB" per GPU (cold estimator, offload none), ZeRO-2 "15.93GB"; t5-large
  (737.67M, 32.90M largest layer) on 4 GPUs: "case1 gpu memory: 3291MB".
* DeepSpeed issue #2131: OPT-66B (66e9 params), ZeRO-2 on 16 GPUs: "307.34GB" per GPU.
* Megatron-LM issue #654: "2 bytes for model parameters …, 4 bytes for main parameters, 4 bytes for
  gradients, 8 bytes for Adam states. 2 + 4 + 4 + 8 = 18" bytes per parameter without ZeRO.
* IETF draft-calabria-bmwg-ai-fabric-inference-bench, Appendix: a 70B model at FP16 with 4K
  context (80 layers, 8 KV heads, head size 128): S_KV = 1,342,177,280 bytes per sequence.
* The published parameter counts of Llama-2-70B and Llama-2-13B (tests/sizing/test_model.py).

DeepSpeed prints GB = 2^30 bytes (its estimator divides by 2**30).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from gpuprov.sizing import memory
from gpuprov.sizing.model import KNOWN
from tests.sizing.test_model import tensors

GIB = 2**30


def ds_zero3(total: float, largest: float, gpus: int) -> int:
    """DeepSpeed's estimate_zero3_model_states_mem_needs, offload none, as its code reads."""
    return int(4 * largest) + int(18 * total / gpus)


def ds_zero2(total: float, gpus: int) -> int:
    """DeepSpeed's estimate_zero2_model_states_mem_needs, offload none."""
    return int(4 * total) + int(16 * total / gpus)


@pytest.mark.parametrize(
    ("zero", "total", "largest", "gpus", "published_gib"),
    [
        (3, 2851e6, 32e6, 8, 6.09),  # t5-3b, docs
        (2, 2851e6, 0, 8, 15.93),  # t5-3b, docs
        (2, 66e9, 0, 16, 307.34),  # OPT-66B, DeepSpeed issue #2131
    ],
)
def test_zero_states_match_deepspeeds_published_estimates(
    zero: int, total: float, largest: float, gpus: int, published_gib: float
) -> None:
    parts = memory.model_states(Fraction(int(total)), Fraction(int(largest)), zero, gpus)
    ours = (parts.weights + parts.gradients + parts.optimizer + parts.buffers) / GIB
    assert round(ours, 2) == published_gib
    expected = ds_zero3(total, largest, gpus) if zero == 3 else ds_zero2(total, gpus)
    assert abs(ours * GIB - expected) <= 2  # rounding of the partitions only


def test_zero3_matches_the_docs_worked_example_in_mib() -> None:
    total, largest = 737.67e6, 32.90e6  # t5-large, 4 GPUs: "case1 gpu memory: 3291MB"
    parts = memory.model_states(Fraction(int(total)), Fraction(int(largest)), 3, 4)
    assert parts.total >> 20 == 3291


def test_without_zero_it_is_megatrons_18_bytes_a_parameter() -> None:
    psi = 13_015_864_320
    assert memory.model_states(Fraction(psi), Fraction(0), 0, 64).total == 18 * psi
    # ZeRO-1 is Megatron's distributed optimizer: 6 + 12/N
    assert memory.model_states(Fraction(psi), Fraction(0), 1, 8).total == 6 * psi + 12 * psi // 8


def test_zero_stages_only_shrink_with_more_gpus() -> None:
    psi = Fraction(13_015_864_320)
    for zero in (1, 2, 3):
        sizes = [memory.model_states(psi, Fraction(163_840_000), zero, n).total for n in (1, 2, 4, 8, 64)]
        assert sizes == sorted(sizes, reverse=True)


# ---------------------------------------------------------------- must show: Llama-2-70B serving


def independent_serving(tp: int) -> int:
    """Weights from the checkpoint's tensors at 2 bytes, split over tp; KV cache of 64 sequences of
    4,096 tokens: per token and layer a K and a V vector for each KV head on this rank."""
    m = KNOWN["llama-2-70b"]
    weights = sum(tensors(m).values()) * 2 / tp
    heads_here = max(1, m.kv_heads // tp)
    kv = 64 * 4096 * m.layers * 2 * heads_here * m.dh * 2
    return math.ceil(weights + kv)


def published_serving(tp: int) -> float:
    weights = 68_976_648_192 * 2 / tp
    kv = 64 * 1_342_177_280 * max(1, 8 // tp) / 8
    return weights + kv


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_llama2_70b_bf16_4k_x_64_per_gpu_within_5_percent(tp: int) -> None:
    m = KNOWN["llama-2-70b"]
    ours = memory.serving(m, memory.Serving("bf16", context=4096, sequences=64), tp).total
    assert ours == pytest.approx(independent_serving(tp), rel=0.05)
    assert ours == pytest.approx(published_serving(tp), rel=0.05)
    assert memory.kv_bytes_per_gpu(m, memory.Serving("bf16", 4096, 1), 1) == 1_342_177_280


@pytest.mark.parametrize(
    ("gpu", "gib", "tp"),
    [("H100", 80, 4), ("A100-80GB", 80, 4), ("A100-40GB", 40, 8), ("L40S", 48, 8), ("L4", 24, 16), ("H200", 141, 2)],
)
def test_llama2_70b_smallest_tensor_parallel_per_gpu_model(gpu: str, gib: int, tp: int) -> None:
    fit = memory.fit_serving(KNOWN["llama-2-70b"], memory.Serving("bf16", 4096, 64), gpu, gib)
    assert fit.fits and fit.tensor_parallel == tp and fit.min_gpus == tp
    # brute force over the sizes vLLM accepts (heads 64, KV heads 8): the first that fits 90%
    usable = 0.9 * gib * GIB
    brute = next(t for t in (1, 2, 4, 8, 16, 32, 64) if independent_serving(t) <= usable)
    assert brute == tp


def test_vllm_rounds_each_sequence_up_to_whole_blocks() -> None:
    m = KNOWN["llama-2-70b"]
    one = memory.kv_bytes_per_gpu(m, memory.Serving("bf16", 16, 1), 1)
    assert memory.kv_bytes_per_gpu(m, memory.Serving("bf16", 1, 1), 1) == one  # 1 token holds a block
    assert memory.kv_bytes_per_gpu(m, memory.Serving("bf16", 17, 1), 1) == 2 * one
    assert memory.kv_bytes_per_gpu(m, memory.Serving("fp8", 16, 1, kv_precision="fp8"), 1) == one // 2


def test_valid_tensor_parallel_sizes_follow_vllms_head_rule() -> None:
    assert memory.valid_tp(KNOWN["llama-2-70b"]) == [1, 2, 4, 8, 16, 32, 64]
    assert memory.valid_tp(KNOWN["llama-2-13b"]) == [1, 2, 4, 5, 8, 10, 20, 40]


# ---------------------------------------------------------------- must show: a 13B ZeRO-3 run


def independent_training(n: int, seq: int = 4096, batch: int = 1) -> float:
    """Llama-2-13B, bf16 + Adam, ZeRO-3 over n GPUs, TP = PP = 1, full checkpointing: DeepSpeed's
    estimator for the states on the checkpoint's tensors; Korthikanti et al.'s full-recompute
    activations (each layer's 2-byte input kept, one layer's s·b·h·34 recomputed at a time, with
    flash attention's 10 + 24/t), the embedding and the logits, Megatron's 5% allowance."""
    m = KNOWN["llama-2-13b"]
    t = tensors(m)
    states = ds_zero3(sum(t.values()), max(t.values()), n)
    s, b, h, v = seq, batch, m.hidden, m.vocab
    kept = sum(2 * s * b * h for _layer in range(m.layers))
    one_layer = s * b * h * 34
    embedding = 8 * s * b + s * b * h
    logits = 2 * (s * b * v + s * b * h)
    return states + 1.05 * (kept + one_layer + embedding + logits)


@pytest.mark.parametrize("n", [4, 8, 16, 64])
def test_13b_zero3_per_gpu_within_5_percent_of_an_independent_computation(n: int) -> None:
    run = memory.Training("bf16", zero=3, tp=1, pp=1, micro_batch=1, seq_len=4096, checkpointing=True)
    ours = memory.training(KNOWN["llama-2-13b"], run, n)
    assert ours.total == pytest.approx(independent_training(n), rel=0.05)
    states = ours.weights + ours.gradients + ours.optimizer + ours.buffers
    assert states == pytest.approx(ds_zero3(13_015_864_320, 163_840_000, n), abs=4)


@pytest.mark.parametrize(("gpu", "gib"), [("H100", 80), ("A100-40GB", 40), ("L40S", 48), ("L4", 24)])
def test_13b_zero3_fewest_gpus_per_gpu_model(gpu: str, gib: int) -> None:
    run = memory.Training("bf16", zero=3, tp=1, pp=1, micro_batch=1, seq_len=4096, checkpointing=True)
    fit = memory.fit_training(KNOWN["llama-2-13b"], run, gpu, gib)
    brute = next(n for n in range(1, 513) if independent_training(n) <= 0.9 * gib * GIB)
    assert fit.fits and fit.min_gpus == brute and fit.data_parallel == brute


def test_without_checkpointing_activations_follow_megatron() -> None:
    m = KNOWN["llama-2-13b"]
    run = memory.Training("bf16", zero=3, micro_batch=2, seq_len=2048, tp=2, pp=1)
    s, b, h = 2048, 2, m.hidden
    layer = s * b * h * (10 + 24 / 2)
    expected = 1.05 * (m.layers * layer + 8 * s * b + s * b * h + 2 * (s * b * m.vocab / 2 + s * b * h))
    assert memory.activations(m, run) == pytest.approx(expected, rel=1e-9)


def test_zero0_that_does_not_fit_says_what_to_raise() -> None:
    fit = memory.fit_training(KNOWN["llama-2-70b"], memory.Training("bf16", zero=0), "H100", 80)
    assert not fit.fits and fit.reason is not None and "--zero" in fit.reason
