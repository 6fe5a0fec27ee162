r"""A decoder-only transformer's dimensions, its parameter count, and where they come from.

Parameters of a Llama-style decoder (Llama, Mistral, Mixtral, Qwen2: RMSNorm, rotary positions,
grouped-query attention, a gated SwiGLU MLP, optionally a mixture of E experts), counted as the
Hugging Face implementation allocates them (h hidden size, a attention heads of d_h each, k KV
heads, f the MLP's intermediate size, V the vocabulary, L layers)::

    attention  = h·(a·d_h) + 2·h·(k·d_h) + (a·d_h)·h  [+ a·d_h + 2·k·d_h with q/k/v biases (Qwen2)]
    mlp        = E · 3·h·f  [+ h·E, the router, when E > 1]
    norms      = 2·h (two RMSNorm weights a layer)
    total      = L·(attention + mlp + norms) + V·h·(1 if tied else 2) + h (the final norm)

This is Megatron's ``compute_weight_and_optimizer_memory`` count (megatron/training/
theoretical_memory_usage.py: 2·h·h·(1 + k/a)·(a·d_h/h) for attention, 2·h·f·3/2 for a SwiGLU MLP,
norm_size·h per norm) written per matrix. It gives the published counts exactly: Llama-2-7B
6,738,415,616; Llama-2-13B 13,015,864,320; Llama-2-70B 68,976,648,192; Llama-3-8B 8,030,261,248;
Mixtral-8x7B 46,702,792,704 (tests/sizing/test_model.py).

``largest_layer`` is the largest single module's parameters (DeepSpeed's ZeRO-3 estimator gathers
one module at a time: ``sum(p.numel() for p in m.parameters(recurse=False))``): the embedding or
the output head (V·h) or one MLP matrix (h·f), whichever is larger.

A Hugging Face ``config.json`` is read offline (``read_config``): a JSON object of at most 1 MiB,
UTF-8, nested at most 20 levels, its model_type one of ``SUPPORTED``, each dimension a whole
number in range; anything else is one ``ConfigError`` naming the file and the key.

``KNOWN`` holds the dimensions of the models the throughput table names, transcribed from their
config.json on the Hugging Face Hub (huggingface.co/<repo>/blob/main/config.json, repos below);
the counts they give are checked against the published ones above.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpuprov.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20
SUPPORTED = ("llama", "mistral", "mixtral", "qwen2")
LIMITS = {
    "hidden_size": (1, 1 << 17),
    "num_hidden_layers": (1, 1024),
    "num_attention_heads": (1, 1024),
    "num_key_value_heads": (1, 1024),
    "intermediate_size": (1, 1 << 20),
    "vocab_size": (1, 1 << 22),
    "head_dim": (1, 4096),
    "num_local_experts": (1, 1024),
    "num_experts_per_tok": (1, 1024),
    "max_position_embeddings": (1, 1 << 24),
}


@dataclass(frozen=True)
class ModelDims:
    """What sizing needs to know about a model (see the module docstring for the count)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    experts: int = 1
    experts_per_token: int = 1
    tied_embeddings: bool = False
    qkv_bias: bool = False
    max_positions: int | None = None
    params_given: int | None = None  # a count given by the user wins over the formula

    @property
    def dh(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def params(self) -> int:
        if self.params_given is not None:
            return self.params_given
        h, dh = self.hidden, self.dh
        attention = h * self.heads * dh * 2 + 2 * h * self.kv_heads * dh
        if self.qkv_bias:
            attention += self.heads * dh + 2 * self.kv_heads * dh
        mlp = self.experts * 3 * h * self.intermediate + (h * self.experts if self.experts > 1 else 0)
        layer = attention + mlp + 2 * h
        return self.layers * layer + self.vocab * h * (1 if self.tied_embeddings else 2) + h

    @property
    def largest_layer(self) -> int:
        return max(self.vocab * self.hidden, self.hidden * self.intermediate, self.hidden * self.heads * self.dh)

    @property
    def kv_values_per_token(self) -> int:
        """K and V values one token keeps in the cache, over all layers: 2·L·k·d_h."""
        return 2 * self.layers * self.kv_heads * self.dh


def _llama(name: str, h: int, layers: int, heads: int, kv: int, f: int, vocab: int, **kw: Any) -> ModelDims:
    return ModelDims(name, h, layers, heads, kv, f, vocab, **kw)


# name -> dims (config.json of the Hugging Face repo in the comment)
KNOWN: dict[str, ModelDims] = {
    m.name: m
    for m in (
        _llama("llama-2-7b", 4096, 32, 32, 32, 11008, 32000, max_positions=4096),  # meta-llama/Llama-2-7b-hf
        _llama("llama-2-13b", 5120, 40, 40, 40, 13824, 32000, max_positions=4096),  # meta-llama/Llama-2-13b-hf
        _llama("llama-2-70b", 8192, 80, 64, 8, 28672, 32000, max_positions=4096),  # meta-llama/Llama-2-70b-hf
        _llama("llama-3-8b", 4096, 32, 32, 8, 14336, 128256, max_positions=8192),  # meta-llama/Meta-Llama-3-8B
        _llama("llama-3-70b", 8192, 80, 64, 8, 28672, 128256, max_positions=8192),  # meta-llama/Meta-Llama-3-70B
        _llama("llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256, max_positions=131072),  # meta-llama/Llama-3.1-8B
        _llama("llama-3.1-70b", 8192, 80, 64, 8, 28672, 128256, max_positions=131072),  # meta-llama/Llama-3.1-70B
        _llama("llama-3.1-405b", 16384, 126, 128, 8, 53248, 128256, max_positions=131072),  # …/Llama-3.1-405B
        _llama("llama-3.3-70b", 8192, 80, 64, 8, 28672, 128256, max_positions=131072),  # …/Llama-3.3-70B-Instruct
        _llama("mistral-7b", 4096, 32, 32, 8, 14336, 32000, max_positions=32768),  # mistralai/Mistral-7B-v0.1
        _llama(  # mistralai/Mixtral-8x7B-v0.1
            "mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, experts=8, experts_per_token=2, max_positions=32768
        ),
        _llama(  # mistralai/Mixtral-8x22B-v0.1
            "mixtral-8x22b", 6144, 56, 48, 8, 16384, 32768, experts=8, experts_per_token=2, max_positions=65536
        ),
        _llama("qwen2-7b", 3584, 28, 28, 4, 18944, 152064, qkv_bias=True, max_positions=131072),  # Qwen/Qwen2-7B
        _llama("qwen2-72b", 8192, 80, 64, 8, 29568, 152064, qkv_bias=True, max_positions=131072),  # Qwen/Qwen2-72B
    )
}


def canonical_name(text: str) -> str:
    """A model name as the table and KNOWN spell it: ``meta-llama/Llama-3.1-70B-Instruct`` and
    ``LLaMA v3.1 70B`` are ``llama-3.1-70b`` (an instruct or chat tune has the base's shape)."""
    s = text.strip().lower().rsplit("/", 1)[-1]
    s = re.sub(r"[\s_]+", "-", s)
    s = re.sub(r"-(instruct|chat|hf|base)(?=-|$)", "", s)
    s = s.replace("meta-llama-", "llama-").replace("llama-v", "llama-").replace("llama2", "llama-2")
    s = re.sub(r"^llama(\d)", r"llama-\1", s)
    s = re.sub(r"llama-(\d)[_.-](\d)", r"llama-\1.\2", s) if re.match(r"llama-\d[_.-]\d-", s) else s
    s = re.sub(r"-v0\.\d$", "", s)  # mistral-7b-v0.1
    return s.strip("-")


def known(name: str) -> ModelDims | None:
    return KNOWN.get(canonical_name(name))


def read_config(path: str) -> ModelDims:
    """A Hugging Face config.json (read offline, bounded, validated) as dims."""
    from gpuprov.names import show
    from gpuprov.safeyaml import read_text

    where = show(path, 80)
    text = read_text(Path(path), where, MAX_CONFIG_BYTES)
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply") from None
    except ValueError as exc:
        raise ConfigError(f"{where}: not JSON ({str(exc).splitlines()[0][:80]})") from None
    return from_config(obj, where, Path(path).parent.name or Path(path).stem)


def from_config(obj: Any, where: str, name: str = "model") -> ModelDims:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: a config.json is a JSON object")
    _depth(obj, where)
    kind = obj.get("model_type")
    if kind not in SUPPORTED:
        raise ConfigError(
            f"{where}: model_type must be one of {', '.join(SUPPORTED)}",
            hint="or give the model's dimensions with --params, --layers, --hidden, --heads and --kv-heads",
        )

    def number(key: str, default: int | None = None) -> int:
        value = obj.get(key, default)
        low, high = LIMITS[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{where}: {key} must be a whole number from {low} to {high:,}")
        return value

    heads = number("num_attention_heads")
    hidden = number("hidden_size")
    kv = number("num_key_value_heads", heads)
    head_dim = number("head_dim", hidden // heads) if obj.get("head_dim") is not None else 0
    if not head_dim and hidden % heads:
        raise ConfigError(f"{where}: hidden_size must be a multiple of num_attention_heads (or give head_dim)")
    if heads % kv:
        raise ConfigError(f"{where}: num_attention_heads must be a multiple of num_key_value_heads")
    tied = obj.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ConfigError(f"{where}: tie_word_embeddings must be true or false")
    experts = number("num_local_experts", 1) if kind == "mixtral" else 1
    dims = ModelDims(
        name=canonical_name(name) or "model",
        hidden=hidden,
        layers=number("num_hidden_layers"),
        heads=heads,
        kv_heads=kv,
        intermediate=number("intermediate_size"),
        vocab=number("vocab_size"),
        head_dim=head_dim,
        experts=experts,
        experts_per_token=number("num_experts_per_tok", 2) if experts > 1 else 1,
        tied_embeddings=tied,
        qkv_bias=kind == "qwen2",
        max_positions=number("max_position_embeddings", 1 << 24) if "max_position_embeddings" in obj else None,
    )
    return dims


def _depth(node: Any, where: str, level: int = 0) -> None:
    if level > 20:
        raise ConfigError(f"{where}: nested deeper than 20 levels")
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        _depth(child, where, level + 1)


def from_flags(
    name: str,
    params: int | None,
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    kv_heads: int | None,
    intermediate: int | None,
    vocab: int | None,
) -> ModelDims:
    """Dims from command-line flags: a known model's, overridden by what is given; or, for an
    unknown one, every dimension the arithmetic needs."""
    base = known(name) if name else None
    given = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "intermediate": intermediate,
        "vocab": vocab,
    }
    if base is None:
        missing = [f"--{k.replace('_', '-')}" for k in ("layers", "hidden", "heads") if given[k] is None]
        if params is None and (given["intermediate"] is None or given["vocab"] is None):
            missing.append("--params (or --intermediate and --vocab)")
        if missing:
            from gpuprov.errors import UsageError

            known_names = ", ".join(sorted(KNOWN))
            raise UsageError(f"give {', '.join(missing)}", hint=f"or a config.json, or a known model: {known_names}")
        heads_n = given["heads"] or 1
        base = ModelDims(
            name=canonical_name(name) if name else "model",
            hidden=given["hidden"] or 1,
            layers=given["layers"] or 1,
            heads=heads_n,
            kv_heads=given["kv_heads"] or heads_n,
            intermediate=given["intermediate"] or 0,
            vocab=given["vocab"] or 0,
        )
    else:
        base = replace(
            base,
            layers=layers or base.layers,
            hidden=hidden or base.hidden,
            heads=heads or base.heads,
            kv_heads=kv_heads or base.kv_heads,
            intermediate=intermediate or base.intermediate,
            vocab=vocab or base.vocab,
        )
    if params is not None:
        base = replace(base, params_given=params)
    if base.hidden % base.heads or base.heads % base.kv_heads:
        from gpuprov.errors import UsageError

        raise UsageError("--hidden must be a multiple of --heads, and --heads a multiple of --kv-heads")
    return base
