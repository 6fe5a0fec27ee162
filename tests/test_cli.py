"""The CLI as a user meets it: through typer's CliRunner, on the bundled catalog."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_plan_json_has_the_documented_shape() -> None:
    code, out, err = run("plan", "--gpus", "64", "--type", "a100", "--output", "json")
    assert code == 0, err
    doc = json.loads(out)
    for key in ("plan_id", "gpu", "gpus", "hourly_cost_usd", "allocations", "baselines", "catalog"):
        assert key in doc
    assert doc["gpus"] == 64
    assert doc["catalog"]["as_of"].startswith("2025-12-01")
    held = sum(a["instances"] * a["gpus_per_instance"] for a in doc["allocations"])
    assert held >= 64
    spot = sum(a["instances"] * a["gpus_per_instance"] for a in doc["allocations"] if a["market"] == "spot")
    assert spot <= 32
    for a in doc["allocations"]:
        assert {"cloud", "region", "zone", "instance_type", "market", "instances",
                "gpus_per_instance", "hourly_usd"} <= set(a)
    assert doc["hourly_cost_usd"] == pytest.approx(sum(a["hourly_usd"] for a in doc["allocations"]))
    assert doc["hourly_cost_usd"] <= doc["baselines"]["all_on_demand_hourly_usd"]


def test_plan_gang_keeps_every_node_in_one_zone() -> None:
    code, out, err = run("plan", "--gpus", "64", "--type", "a100-80gb", "--node-gpus", "8", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert len({(a["cloud"], a["zone"] or a["region"]) for a in doc["allocations"]}) == 1
    assert all(a["gpus_per_instance"] == 8 for a in doc["allocations"])


def test_plan_table_prints_cost_and_saving() -> None:
    code, out, _ = run("plan", "--gpus", "64", "--type", "a100")
    assert code == 0
    assert "monthly (730 h)" in out and "plan saves" in out and "prices: aws" in out


def test_on_demand_only_plan_equals_its_own_baseline_or_beats_it() -> None:
    code, out, _ = run("plan", "--gpus", "16", "--type", "h100", "--markets", "on_demand", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert {a["market"] for a in doc["allocations"]} == {"on_demand"}
    assert doc["hourly_cost_usd"] <= doc["baselines"]["all_on_demand_hourly_usd"] + 1e-9


@pytest.mark.parametrize(("args", "code", "message"), [
    (("plan", "--gpus", "64", "--type", "zz100"), 2, "error: unknown GPU type 'zz100'"),
    (("plan", "--gpus", "0", "--type", "a100"), 2, "error: --gpus must be a positive whole number"),
    (("plan", "--gpus", "-8", "--type", "a100"), 2, "error: --gpus must be a positive whole number"),
    (("plan", "--gpus", "lots", "--type", "a100"), 2, "error: Invalid value for '--gpus'"),
    (("plan", "--gpus", "8", "--type", "a100", "--markets", "spotty"), 2, "error: unknown market 'spotty'"),
    (("plan", "--gpus", "8", "--type", "a100", "--max-spot-fraction", "1.5"), 2,
     "error: --max-spot-fraction must be a number between 0 and 1"),
    (("plan", "--gpus", "8", "--type", "a100", "--clouds", "ibm"), 2, "error: unknown cloud 'ibm'"),
    (("plan", "--gpus", "8", "--type", "l4", "--clouds", "azure"), 3, "error: cluster (L4): no offer"),
    (("plan", "--gpus", "8", "--type", "a100", "--markets", "spot"), 3, "error: cluster (A100-40GB/A100-80GB): "
     "only spot offers are allowed"),
    (("prices", "--type", "a100", "--output", "xml"), 2, "error: unknown output format 'xml'"),
])
def test_bad_input_is_one_line_and_a_non_zero_exit(args: tuple[str, ...], code: int, message: str) -> None:
    got, out, err = run(*args)
    assert got == code
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message), err
    assert "Traceback" not in err + out
    assert all(line.startswith(("error:", "hint:", "warning:")) for line in err.splitlines()), err


def test_prices_cheapest_first_in_every_format() -> None:
    code, out, _ = run("prices", "--type", "a100", "--market", "spot", "--cloud", "aws,gcp", "-o", "json")
    assert code == 0
    offers = json.loads(out)["offers"]
    assert offers and {o["market"] for o in offers} == {"spot"} and {o["cloud"] for o in offers} <= {"aws", "gcp"}
    per_gpu = [o["usd_per_gpu_hour"] for o in offers]
    assert per_gpu == sorted(per_gpu)
    code, out, _ = run("prices", "--type", "h100", "--region", "us-*", "-o", "csv")
    assert code == 0
    rows = out.splitlines()[1:]
    assert rows and all(r.split(",")[1].startswith("us-") for r in rows)
    code, out, _ = run("prices", "--type", "h100", "--limit", "3")
    assert code == 0 and "(first 3" in out and "days old" in out


def test_debug_env_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_DEBUG", "1")
    _, _, err = run("plan", "--gpus", "8", "--type", "zz100")
    assert "Traceback" in err and "error: unknown GPU type" in err
