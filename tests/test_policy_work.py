"""Policies whose demand is work a second: read, validated, turned into demand per slot."""

from __future__ import annotations

import pytest

from gpuprov.errors import ConfigError
from policies import constraints, loader
from policies.schedule import demand_slots

SERVE = """
name: serve
gpu: [h100, a100-80gb, l40s, l4]
workloads:
  inference:
    model: meta-llama/Llama-3.1-70B-Instruct
    precision: [fp8, fp16]
    input_tokens: 128
    output_tokens: 2048
    max_spot_fraction: 0.3
schedule:
  windows:
    - {name: day, start: "08:00", end: "20:00", demand: {inference: {tokens_per_s: 20000}}}
    - {name: night, start: "20:00", end: "08:00", demand: {inference: {tokens_per_s: 4999.5}}}
"""


def test_a_serving_policy_in_tokens_per_second() -> None:
    pol = loader.parse(SERVE, "serve.yaml")
    w = pol.workloads["inference"].work
    assert w is not None and w.unit == "tokens_per_s" and w.precisions == ("fp8", "bf16")
    assert (w.model, w.input_tokens, w.output_tokens) == ("meta-llama/Llama-3.1-70B-Instruct", 128, 2048)
    assert pol.gpu == "h100,a100-80gb,l40s,l4" and pol.gpus is None
    demand = demand_slots(pol, 0)["inference"]
    assert demand == tuple([5000] * 8 + [20000] * 12 + [5000] * 4)  # 4,999.5 rounds up to whole tokens
    with pytest.raises(ConfigError, match="asks for work a second, not GPUs"):
        constraints.demand(pol)  # what the GPU paths (plan by GPUs, backtest) read


def edit(old: str, new: str) -> str:
    assert old in SERVE
    return SERVE.replace(old, new)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (edit("{inference: {tokens_per_s: 20000}}", "{inference: 70%}"), "asks for {tokens_per_s: N}"),
        (edit("{inference: {tokens_per_s: 20000}}", "{inference: 8}"), "asks for {tokens_per_s: N}"),
        (edit("    model: meta-llama/Llama-3.1-70B-Instruct\n", ""), "goes with model"),
        (edit("    precision: [fp8, fp16]\n", ""), "precision: is required with model"),
        (edit("[fp8, fp16]", "[fp8, fp9]"), "precision[1]: unknown precision"),
        (edit("    input_tokens: 128\n", ""), "needs input_tokens and output_tokens"),
        (edit("{tokens_per_s: 20000}", "{tokens_per_s: 1, samples_per_s: 2}"), "give one of"),
        (edit("{tokens_per_s: 20000}", "{tokens_per_s: -1}"), "must be between 0 and"),
        (edit("{tokens_per_s: 20000}", "{tokens_per_s: [1]}"), "must be a number"),
        (edit("{tokens_per_s: 20000}", "{watts: 1}"), "unknown key"),
        (edit("{tokens_per_s: 20000}", "{samples_per_s: 20000}"), "mixes samples_per_s and tokens_per_s"),
        (edit("    input_tokens: 128\n", "    input_tokens: 0\n"), "input_tokens: must be between 1"),
    ],
)
def test_bad_work_policies_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("{", r"\{")) as err:
        loader.parse(text, "serve.yaml")
    assert err.value.message.startswith("serve.yaml: ")


def test_a_gpu_workload_still_needs_a_total() -> None:
    pol = loader.parse(
        "workloads: {training: {}}\nschedule: {default: {training: 50%}}\n",
        "p.yaml",
    )
    with pytest.raises(ConfigError, match="names no total"):
        constraints.demand(pol)


def test_policy_check_shows_the_unit(tmp_path: object) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from gpuprov.cli import app

    path = Path(str(tmp_path)) / "serve.yaml"
    path.write_text(SERVE)
    r = CliRunner().invoke(app, ["policy", "check", str(path)])
    assert r.exit_code == 0, r.stderr
    assert "100 GPUs" not in r.stdout and "20000" in r.stdout and "tokens/s of" in r.stdout
