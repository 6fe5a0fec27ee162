r"""Memory per GPU for training and for serving a model, and the fewest GPUs of each model it fits on.

Notation: Ψ parameters (``model.ModelDims.params``), Λ the largest layer's parameters, h hidden
size, L layers, V vocabulary, s sequence length, b micro-batch, t tensor-, p pipeline-, N data-
parallel degree (ZeRO shards over N), B bytes per value of a precision (fp32 4, bf16/fp16 2,
fp8 and int8 1, int4 and fp4 ½). All results are bytes per GPU, rounded up to a whole byte.

Training (Adam; mixed precision ``bf16``: 2-byte weights and gradients, fp32 master weights and
both Adam moments; pure ``fp32``: 4-byte everything, no master copy)

    Ψ_s, the parameters of the most loaded model-parallel shard (Megatron-LM,
    megatron/training/theoretical_memory_usage.py, ``num_parameters_on_most_loaded_model_shard``):
        Ψ_s = (Ψ_layers / p + V·h) / t, plus V·h / t more when the output head is untied and p = 1

    model states per GPU, mixed precision (weights | gradients | optimizer | buffers):
      ZeRO 0  2Ψ_s | 4Ψ_s | 12Ψ_s                 = 18 Ψ_s         Megatron, no distributed optimizer
      ZeRO 1  2Ψ_s | 4Ψ_s | 12Ψ_s/N               = 6 + 12/N       Megatron's distributed optimizer
      ZeRO 2  2Ψ_s | 2Ψ_s + 4Ψ_s/N | 12Ψ_s/N      = 4Ψ + 16Ψ/N     DeepSpeed, estimate_zero2_model_states_mem_needs
      ZeRO 3  2Ψ_s/N | 4Ψ_s/N | 12Ψ_s/N | 4Λ/t    = 18Ψ/N + 4Λ     DeepSpeed, estimate_zero3_model_states_mem_needs
    (DeepSpeed's docs, docs/code-docs/source/memory.rst: "16b for fp32: 4b params, 4b grads, 4b
    momentum and 4b variance per parameter; +2b for fp16 params"; "largest_layer_memory =
    4*largest_layer_params … 2 bytes fp16 params are gathered and 2 bytes fp16 grads are computed".
    Pure fp32 drops the master copy: 4 | 4 | 8 in the same partitions, and ZeRO 3 gathers 8Λ/t.)
    DeepSpeed's published outputs are matched: t5-3b (2,851M params, 32M largest layer) on 8 GPUs,
    ZeRO 3: 6.09 GB; ZeRO 2: 15.93 GB; OPT-66B on 16 GPUs, ZeRO 2: 307.34 GB (tests).

    activations per GPU (Megatron, ``compute_activation_memory_without_sp``, from Korthikanti et
    al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 2, with
    flash attention: no s×s score matrices are kept):
        per layer      A = s·b·h·(10 + 24/t)
        no checkpoint  L·A
        checkpointing  L·2·s·b·h + A          (each layer keeps only its 2-byte input; one layer is
                                               recomputed at a time; Korthikanti §4, "full")
        + 8·s·b·p + s·b·h·p                    (embedding input and dropout, p micro-batches in flight)
        + 2·(s·b·V/t + s·b·h) when p = 1       (logits and the final norm's output)
        × 1.05                                  (Megatron's allowance for temporaries)
    The first pipeline stage holds L/p layers for p micro-batches in flight: L layers' worth.
    fp32 training doubles every activation.

Serving (vLLM's paged KV cache, vllm/v1/kv_cache_interface.py)

    weights per GPU    Ψ·B/t                          (vLLM shards every linear layer and the
                                                       vocabulary over the t ranks)
    KV page per layer  2 · block · k_r · d_h · B_kv   (``AttentionSpec.real_page_size_bytes``;
                                                       block = 16 tokens, k_r = max(1, k // t) KV
                                                       heads on each rank, d_h the head size)
    KV per GPU         sequences · ⌈context / block⌉ · L · page   (``max_memory_usage_bytes``)
    B_kv is the activations' precision (2 bytes; 4 for fp32), vLLM's ``kv_cache_dtype=auto``
    for fp8/int8/int4 weights too, unless a KV precision is given.
    t must divide the attention heads, and the KV heads or be divided by them (vLLM's rule).
    For Llama-2-70B (k = 8, d_h = 128, L = 80) at bf16 a 4,096-token sequence holds 2·80·8·128·
    4096·2 = 1,342,177,280 bytes, as in the IETF draft draft-calabria-bmwg-ai-fabric-inference-
    bench ("70B parameter model at FP16 with 4K context", Appendix); 64 of them 80 GiB.

Fitting: a GPU holds ``utilization`` (0.9) of its memory (``pricing.gpus`` memory_gib × 2^30):
vLLM's default ``gpu_memory_utilization``; for training the same tenth is left to the CUDA
context, the allocator's fragmentation and communication buckets. Serving: the smallest valid
t whose bytes fit. Training: with the t and p given, the smallest N ≥ 1 that fits (ZeRO 0 does
not shrink with N). A replica over more GPUs than a node holds needs a fabric across nodes
(EFA, InfiniBand); t > 1 wants NVLink inside the node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from gpuprov.sizing.model import ModelDims

GIB = 1 << 30
BITS = {"fp32": 32, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4, "fp4": 4}
ALIASES = {"fp16": "bf16", "float16": "bf16", "bfloat16": "bf16", "half": "bf16", "float32": "fp32", "fp4": "fp4"}
TRAINING_PRECISIONS = ("fp32", "bf16")
BLOCK = 16  # vLLM's default KV block (tokens)
UTILIZATION = Decimal("0.9")
MAX_DATA_PARALLEL = 65_536


def precision(text: str) -> str:
    """fp32, bf16 (fp16 is the same two bytes), fp8, int8, int4 or fp4."""
    key = text.strip().lower()
    key = ALIASES.get(key, key)
    if key not in BITS:
        from gpuprov.errors import UsageError

        raise UsageError(f"unknown precision {text[:20]!r}", hint="fp32, bf16 (or fp16), fp8, int8, int4, fp4")
    return key


def _bytes(values: Fraction | int, bits: int) -> int:
    return math.ceil(Fraction(values) * bits / 8)


@dataclass(frozen=True)
class Parts:
    """Bytes per GPU."""

    weights: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0
    buffers: int = 0
    kv_cache: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers + self.kv_cache


@dataclass(frozen=True)
class Training:
    precision: str = "bf16"
    zero: int = 0
    tp: int = 1
    pp: int = 1
    micro_batch: int = 1
    seq_len: int = 2048
    checkpointing: bool = False


@dataclass(frozen=True)
class Serving:
    precision: str = "bf16"
    context: int = 4096
    sequences: int = 1
    kv_precision: str | None = None


def shard_params(m: ModelDims, tp: int, pp: int) -> Fraction:
    """Ψ_s: the parameters of the most loaded (first) model-parallel shard (Megatron)."""
    embedding = m.vocab * m.hidden
    layers = m.params - embedding * (1 if m.tied_embeddings else 2)
    shard = (Fraction(layers, pp) + embedding) / tp
    if not m.tied_embeddings and pp == 1:
        shard += Fraction(embedding, tp)
    return shard


def model_states(psi: Fraction, largest: Fraction, zero: int, n: int, mixed: bool = True) -> Parts:
    """Weights, gradients, optimizer states and ZeRO-3's gathered layer, bytes per GPU (see above)."""
    w, g, o = (2, 4, 12) if mixed else (4, 4, 8)
    if zero == 0:
        return Parts(weights=_bytes(psi, 8 * w), gradients=_bytes(psi, 8 * g), optimizer=_bytes(psi, 8 * o))
    if zero == 1:
        return Parts(weights=_bytes(psi, 8 * w), gradients=_bytes(psi, 8 * g), optimizer=_bytes(psi / n, 8 * o))
    if zero == 2:
        full = 2 if mixed else 0  # the 2-byte gradients before the fp32 partition (DeepSpeed's 4Ψ = 2Ψ + 2Ψ)
        return Parts(
            weights=_bytes(psi, 8 * w),
            gradients=_bytes(psi, 8 * full) + _bytes(psi / n, 8 * g),
            optimizer=_bytes(psi / n, 8 * o),
        )
    if zero == 3:
        return Parts(
            weights=_bytes(psi / n, 8 * w),
            gradients=_bytes(psi / n, 8 * g),
            optimizer=_bytes(psi / n, 8 * o),
            buffers=_bytes(largest, 8 * (4 if mixed else 8)),
        )
    raise ValueError(f"ZeRO stage {zero}")


def activations(m: ModelDims, t: Training) -> int:
    """Megatron's activation bytes on the first pipeline stage (see above), 2-byte activations."""
    s, b, h = t.seq_len, t.micro_batch, m.hidden
    layer = Fraction(s * b * h) * (10 + Fraction(24, t.tp))
    total = (m.layers * 2 * s * b * h + layer) if t.checkpointing else m.layers * layer
    total += 8 * s * b * t.pp + s * b * h * t.pp
    if t.pp == 1:
        total += 2 * (Fraction(s * b * m.vocab, t.tp) + s * b * h)
    total *= Fraction(105, 100)
    if t.precision == "fp32":
        total *= 2
    return math.ceil(total)


def training(m: ModelDims, t: Training, n: int) -> Parts:
    """Bytes per GPU of a training run over t·p·n GPUs."""
    psi = shard_params(m, t.tp, t.pp)
    states = model_states(psi, Fraction(m.largest_layer, t.tp), t.zero, n, mixed=t.precision == "bf16")
    return Parts(
        weights=states.weights,
        gradients=states.gradients,
        optimizer=states.optimizer,
        buffers=states.buffers,
        activations=activations(m, t),
    )


def kv_bytes_per_gpu(m: ModelDims, s: Serving, tp: int) -> int:
    bits = BITS[s.kv_precision] if s.kv_precision else (32 if s.precision == "fp32" else 16)
    per_rank = max(1, m.kv_heads // tp)
    page = Fraction(2 * BLOCK * per_rank * m.dh * bits, 8)  # one layer's page, bytes
    blocks = math.ceil(s.context / BLOCK)
    return math.ceil(s.sequences * blocks * m.layers * page)


def serving(m: ModelDims, s: Serving, tp: int) -> Parts:
    return Parts(weights=_bytes(Fraction(m.params, tp), BITS[s.precision]), kv_cache=kv_bytes_per_gpu(m, s, tp))


def valid_tp(m: ModelDims, limit: int = 64) -> list[int]:
    """Tensor-parallel sizes vLLM accepts for this model: t divides the attention heads, and t
    divides the KV heads or is a multiple of them."""
    return [t for t in range(1, limit + 1) if m.heads % t == 0 and (m.kv_heads % t == 0 or t % m.kv_heads == 0)]


def usable_bytes(memory_gib: int, utilization: Decimal = UTILIZATION) -> int:
    return int(Decimal(memory_gib * GIB) * utilization)


@dataclass(frozen=True)
class Fit:
    """How one GPU model holds the job: the fewest GPUs, their tensor-parallel size, bytes per GPU."""

    gpu: str
    memory_gib: int
    fits: bool
    min_gpus: int | None = None
    tensor_parallel: int | None = None
    data_parallel: int | None = None
    parts: Parts = field(default_factory=Parts)
    usable: int = 0
    reason: str | None = None

    def interconnect(self, node_gpus: int) -> tuple[bool, bool]:
        """(NVLink inside a node, a fabric across nodes): t > 1 wants NVLink; more GPUs than a
        node holds need EFA/InfiniBand between nodes."""
        if not self.fits or self.min_gpus is None:
            return False, False
        return (self.tensor_parallel or 1) > 1, self.min_gpus > node_gpus


def fit_serving(m: ModelDims, s: Serving, gpu: str, memory_gib: int, utilization: Decimal = UTILIZATION) -> Fit:
    cap = usable_bytes(memory_gib, utilization)
    last = Parts()
    for tp in valid_tp(m):
        parts = serving(m, s, tp)
        last = parts
        if parts.total <= cap:
            return Fit(gpu, memory_gib, True, tp, tp, 1, parts, cap)
    return Fit(
        gpu,
        memory_gib,
        False,
        parts=last,
        usable=cap,
        reason=f"does not fit: {last.total / GIB:.1f} GiB a GPU even at the largest tensor-parallel size "
        f"({valid_tp(m)[-1]}), over the {cap / GIB:.1f} GiB usable",
    )


def fit_training(m: ModelDims, t: Training, gpu: str, memory_gib: int, utilization: Decimal = UTILIZATION) -> Fit:
    cap = usable_bytes(memory_gib, utilization)
    one = training(m, t, 1)
    if one.total <= cap:
        return Fit(gpu, memory_gib, True, t.tp * t.pp, t.tp, 1, one, cap)
    if t.zero == 0:
        return Fit(
            gpu,
            memory_gib,
            False,
            parts=one,
            usable=cap,
            reason=f"does not fit: {one.total / GIB:.1f} GiB a GPU without ZeRO (over {cap / GIB:.1f} GiB); "
            "raise --zero, --tp or --pp",
        )
    # bytes fall with N: the smallest N that fits, by doubling then bisection
    high = 1
    while high < MAX_DATA_PARALLEL and training(m, t, high).total > cap:
        high *= 2
    if training(m, t, high).total > cap:
        floor = training(m, t, MAX_DATA_PARALLEL)
        return Fit(
            gpu,
            memory_gib,
            False,
            parts=floor,
            usable=cap,
            reason=f"does not fit: still {floor.total / GIB:.1f} GiB a GPU at {MAX_DATA_PARALLEL:,}-way data "
            f"parallel (activations and unsharded states alone exceed {cap / GIB:.1f} GiB)",
        )
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        if training(m, t, mid).total <= cap:
            high = mid
        else:
            low = mid
    parts = training(m, t, high)
    return Fit(gpu, memory_gib, True, t.tp * t.pp * high, t.tp, high, parts, cap)
