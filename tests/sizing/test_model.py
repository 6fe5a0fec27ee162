"""Model dimensions: parameter counts against the published ones, config.json read offline and bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprov.errors import ConfigError, UsageError
from gpuprov.sizing import model

# published parameter counts (the models' safetensors metadata, as quoted by the Hugging Face Hub
# and by the toolkits that list them: e.g. Together's fine-tuning table for Llama-2-70B)
PUBLISHED = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2-7b": 7_615_616_512,
}


def tensors(m: model.ModelDims) -> dict[str, int]:
    """Every tensor of a Llama-style Hugging Face checkpoint, by name, with its element count:
    the state dict enumerated, a count written apart from ModelDims.params."""
    h, a, k, dh, f = m.hidden, m.heads, m.kv_heads, m.dh, m.intermediate
    out = {"model.embed_tokens.weight": m.vocab * h, "model.norm.weight": h}
    if not m.tied_embeddings:
        out["lm_head.weight"] = m.vocab * h
    for i in range(m.layers):
        p = f"model.layers.{i}."
        out[p + "self_attn.q_proj.weight"] = a * dh * h
        out[p + "self_attn.k_proj.weight"] = k * dh * h
        out[p + "self_attn.v_proj.weight"] = k * dh * h
        out[p + "self_attn.o_proj.weight"] = h * a * dh
        if m.qkv_bias:
            out[p + "self_attn.q_proj.bias"] = a * dh
            out[p + "self_attn.k_proj.bias"] = k * dh
            out[p + "self_attn.v_proj.bias"] = k * dh
        if m.experts > 1:
            out[p + "block_sparse_moe.gate.weight"] = m.experts * h
            for e in range(m.experts):
                for w in ("w1", "w2", "w3"):
                    out[p + f"block_sparse_moe.experts.{e}.{w}.weight"] = f * h
        else:
            for w in ("gate_proj", "up_proj", "down_proj"):
                out[p + f"mlp.{w}.weight"] = f * h
        out[p + "input_layernorm.weight"] = h
        out[p + "post_attention_layernorm.weight"] = h
    return out


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_are_the_published_ones(name: str) -> None:
    m = model.KNOWN[name]
    assert m.params == PUBLISHED[name]
    assert sum(tensors(m).values()) == PUBLISHED[name]


def test_largest_layer_is_the_largest_tensor_of_one_module() -> None:
    for m in model.KNOWN.values():
        assert m.largest_layer == max(tensors(m).values())


def config(tmp_path: Path, **overrides: object) -> Path:
    base = {
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_attention_heads": 64,
        "num_hidden_layers": 80,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }
    base.update(overrides)
    path = tmp_path / "Llama-2-70b-hf" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({k: v for k, v in base.items() if v is not None}))
    return path


def test_a_config_json_gives_the_published_count(tmp_path: Path) -> None:
    dims = model.read_config(str(config(tmp_path)))
    assert dims.params == PUBLISHED["llama-2-70b"]
    assert dims.name == "llama-2-70b"  # named after its folder
    assert dims.kv_values_per_token == 2 * 80 * 8 * 128


def test_mixtral_and_qwen2_configs(tmp_path: Path) -> None:
    moe = config(
        tmp_path,
        model_type="mixtral",
        hidden_size=4096,
        intermediate_size=14336,
        num_attention_heads=32,
        num_hidden_layers=32,
        num_key_value_heads=8,
        num_local_experts=8,
        num_experts_per_tok=2,
    )
    assert model.read_config(str(moe)).params == PUBLISHED["mixtral-8x7b"]
    qwen = config(
        tmp_path,
        model_type="qwen2",
        hidden_size=3584,
        intermediate_size=18944,
        num_attention_heads=28,
        num_hidden_layers=28,
        num_key_value_heads=4,
        vocab_size=152064,
    )
    assert model.read_config(str(qwen)).params == PUBLISHED["qwen2-7b"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model_type": "bert"}, "model_type must be one of"),
        ({"model_type": None}, "model_type must be one of"),
        ({"hidden_size": -1}, "hidden_size must be a whole number"),
        ({"hidden_size": 8192.0}, "hidden_size must be a whole number"),
        ({"num_hidden_layers": True}, "num_hidden_layers must be a whole number"),
        ({"num_hidden_layers": 10**9}, "num_hidden_layers must be a whole number"),
        ({"vocab_size": "32000"}, "vocab_size must be a whole number"),
        ({"num_key_value_heads": 7}, "multiple of num_key_value_heads"),
        ({"hidden_size": 8191}, "multiple of num_attention_heads"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings must be true or false"),
        ({"intermediate_size": None}, "intermediate_size must be a whole number"),
    ],
)
def test_bad_configs_are_one_clear_error(tmp_path: Path, overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        model.read_config(str(config(tmp_path, **overrides)))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{", "not JSON"),
        (b"[1, 2]", "a JSON object"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"a":' * 30 + b"1" + b"}" * 30, "nested deeper than 20"),
        (b" " * (model.MAX_CONFIG_BYTES + 1), "larger than 1024 KiB"),
    ],
)
def test_hostile_files_are_refused_without_reading_them_whole(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as err:
        model.read_config(str(path))
    assert "\n" not in err.value.message


def test_a_missing_file_and_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        model.read_config(str(tmp_path / "nope.json"))
    with pytest.raises(ConfigError, match="is a directory"):
        model.read_config(str(tmp_path))


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("LLaMA v3.1 70B", "llama-3.1-70b"),
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Llama-2-70b-hf", "llama-2-70b"),
        ("Llama-2-13b-chat-hf", "llama-2-13b"),
        ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
        ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
        ("Mixtral 8x7B", "mixtral-8x7b"),
        ("Llama 3.3 70B", "llama-3.3-70b"),
    ],
)
def test_spellings_of_one_model_are_one_name(spelling: str, name: str) -> None:
    assert model.canonical_name(spelling) == name


def test_dims_from_flags() -> None:
    assert model.from_flags("llama-2-70b", None, None, None, None, None, None, None) == model.KNOWN["llama-2-70b"]
    given = model.from_flags("", 13_000_000_000, 40, 5120, 40, None, None, None)
    assert given.params == 13_000_000_000 and given.kv_heads == 40
    with pytest.raises(UsageError, match="--layers"):
        model.from_flags("my-model", 10**9, None, 4096, 32, 8, None, None)
    with pytest.raises(UsageError, match="multiple"):
        model.from_flags("", 10**9, 32, 4096, 30, 7, None, None)
