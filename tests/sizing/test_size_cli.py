"""gpuprov size as a user runs it: the must-show cases in JSON, bad input one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from tests.sizing.test_memory import independent_serving, independent_training
from tests.sizing.test_model import config

runner = CliRunner()
GIB = 2**30


def size(*args: str) -> dict:  # type: ignore[type-arg]
    r = runner.invoke(app, ["size", *args, "--output", "json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def by_gpu(result: dict) -> dict:  # type: ignore[type-arg]
    return {g["gpu"]: g for g in result["gpus"]}


def test_llama2_70b_bf16_serving_4k_by_64_from_its_config(tmp_path: Path) -> None:
    out = size(str(config(tmp_path)), "--precision", "bf16", "--serve", "--context", "4096", "--sequences", "64")
    assert out["params"] == 68_976_648_192
    assert out["total_bytes"] == pytest.approx(independent_serving(1), rel=0.05)
    gpus = by_gpu(out)
    for name, tp in (("H100", 4), ("A100-80GB", 4), ("A100-40GB", 8), ("L40S", 8), ("L4", 16)):
        g = gpus[name]
        assert (g["fits"], g["tensor_parallel"], g["min_gpus"]) == (True, tp, tp)
        assert g["bytes_per_gpu"] == pytest.approx(independent_serving(tp), rel=0.05)
        assert g["bytes_per_gpu"] == sum(g["parts"].values())
        assert g["parts"]["weights"] > 0 and g["parts"]["kv_cache"] > 0 and g["parts"]["optimizer"] == 0
        assert g["bytes_per_gpu"] <= g["usable_bytes"] == int(0.9 * g["memory_gib"] * GIB)
    assert gpus["L4"]["cross_node"] and not gpus["H100"]["cross_node"] and gpus["H100"]["nvlink"]
    assert gpus["K80"]["fits"] is False and "does not fit" in gpus["K80"]["reason"]


def test_13b_zero3_training_by_name() -> None:
    out = size(
        "llama-2-13b",
        *("--precision", "bf16", "--train", "--zero", "3", "--seq-len", "4096", "--checkpointing"),
        *("--type", "h100,a100,l4"),
    )
    gpus = by_gpu(out)
    assert set(gpus) == {"H100", "A100-40GB", "A100-80GB", "L4"}
    for g in gpus.values():
        n = g["min_gpus"]
        assert g["bytes_per_gpu"] == pytest.approx(independent_training(n), rel=0.05)
        assert independent_training(n - 1) > 0.9 * g["memory_gib"] * GIB  # one fewer does not fit
        assert g["parts"]["optimizer"] > g["parts"]["gradients"] > g["parts"]["weights"] > 0
        assert g["parts"]["buffers"] == 4 * 163_840_000  # ZeRO-3's gathered largest layer
    assert gpus["L4"]["cross_node"] and not gpus["H100"]["cross_node"]


def test_a_table_for_people() -> None:
    r = runner.invoke(app, ["size", "llama-2-70b", "--precision", "fp8", "--serve", "--type", "h100"])
    assert r.exit_code == 0, r.stderr
    assert "68,976,648,192 parameters" in r.stdout and "H100" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["llama-2-70b", "--precision", "bf16"], "give --train or --serve"),
        (["llama-2-70b", "--precision", "bf16", "--train", "--serve"], "give --train or --serve"),
        (["llama-2-70b", "--serve"], "give --precision"),
        (["llama-2-70b", "--precision", "fp9", "--serve"], "unknown precision"),
        (["llama-2-70b", "--precision", "fp8", "--train"], "training is sized at fp32 or bf16"),
        (["llama-2-70b", "--precision", "bf16", "--train", "--zero", "4"], "--zero must be"),
        (["llama-2-70b", "--precision", "bf16", "--train", "--tp", "3"], "must divide the model's 64"),
        (["llama-2-70b", "--precision", "bf16", "--train", "--pp", "81"], "more than the model's 80"),
        (["llama-2-70b", "--precision", "bf16", "--serve", "--sequences", "0"], "--sequences must be"),
        (["llama-2-70b", "--precision", "bf16", "--serve", "--type", "a1000"], "unknown GPU type"),
        (["no-such-model", "--precision", "bf16", "--serve"], "give --layers"),
        (["--precision", "bf16", "--serve"], "a known model name"),
        (
            ["--precision", "bf16", "--serve", "--params", "9", "--layers", "2", "--hidden", "64", "--heads", "3"],
            "multiple",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    r = runner.invoke(app, ["size", *args])
    assert r.exit_code == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_bad_config_file_is_one_line(tmp_path: Path) -> None:
    path = config(tmp_path, model_type="gpt2")
    r = runner.invoke(app, ["size", str(path), "--precision", "bf16", "--serve"])
    assert r.exit_code == 2 and "model_type must be one of" in r.stderr
    r = runner.invoke(app, ["size", str(path), "--precision", "bf16", "--serve", "--layers", "3"])
    assert r.exit_code == 2


def test_dimensions_from_flags() -> None:
    out = size(
        *("--params", "13015864320", "--layers", "40", "--hidden", "5120", "--heads", "40", "--vocab", "32000"),
        *("--precision", "bf16", "--serve", "--context", "4096", "--sequences", "8", "--type", "h100"),
    )
    [g] = out["gpus"]
    assert out["params"] == 13_015_864_320 and g["tensor_parallel"] == 1
    kv = 8 * 4096 * 2 * 40 * 40 * 128 * 2  # MHA: 40 KV heads
    assert g["parts"]["kv_cache"] == kv and g["parts"]["weights"] == 2 * 13_015_864_320
