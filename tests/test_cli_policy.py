"""plan --policy, --save, plans, --chart and policy check, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_day_night_plan_meets_the_schedule_and_reports_baselines() -> None:
    code, out, err = run("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["horizon_hours"] == 24 and len(doc["slot_cost_usd"]) == 24
    assert doc["timezone"] == "UTC" and doc["windows"] == [
        {"name": "day", "start_slot": 8, "end_slot": 20}, {"name": "night", "start_slot": 20, "end_slot": 8}]
    for t in range(24):
        for w in ("training", "inference"):
            held = sum(a["instances_by_slot"][t] * a["gpus_per_instance"]
                       for a in doc["allocations"] if a["workload"] == w)
            held += sum(r["used_by_slot"].get(w, [0] * 24)[t] * r["gpus_per_instance"] for r in doc["reserved"])
            assert held >= doc["demand"][w][t] - 0.01
    assert doc["demand"]["inference"][12] == 45 and doc["demand"]["training"][2] == 51
    total = sum(doc["slot_cost_usd"])
    assert doc["total_cost_usd"] == pytest.approx(total)
    for key in ("all_on_demand_usd", "best_single_offer_usd", "reserved_plus_spot_usd"):
        assert doc["baselines"][key] >= doc["total_cost_usd"] - 1e-6
    assert doc["lower_bound_usd"] <= doc["objective_usd"] + 1e-6
    training_places = {(a["cloud"], a["zone"] or a["region"]) for a in doc["allocations"]
                       if a["workload"] == "training"}
    assert len(training_places) <= 1


def test_table_output_has_the_chart_and_savings(tmp_path: Path) -> None:
    png = tmp_path / "plan.png"
    code, out, err = run("plan", "--policy", "day-night", "--gpus", "32", "--type", "a100-80gb", "--chart", str(png))
    assert code == 0, err
    assert "GPUs by market" in out and "08:00–20:00" in out and "plan saves" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_flags_override_the_policy() -> None:
    code, out, err = run("plan", "--policy", "day-night", "--gpus", "16", "--type", "h100", "--hours", "168",
                         "--max-spot-fraction", "0", "--timezone", "Europe/Berlin", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["horizon_hours"] == 168 and doc["timezone"] == "Europe/Berlin"
    assert all(a["market"] != "spot" for a in doc["allocations"])


def test_save_then_list_then_same_id_again() -> None:
    code, out, _ = run("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json")
    assert code == 0
    pid = json.loads(out)["plan_id"]
    code, out, _ = run("plans", "-o", "json")
    assert code == 0 and [p["id"] for p in json.loads(out)] == [pid]
    code, out, _ = run("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json")
    assert json.loads(out)["plan_id"] == pid                       # same inputs, same snapshot: same id
    code, out, _ = run("plan", "--policy", "day-night", "--gpus", "48", "--type", "a100", "--save", "-o", "json")
    assert json.loads(out)["plan_id"] != pid
    code, out, _ = run("plans")
    assert code == 0 and pid in out and "2 saved plans" in out


def test_policy_check(tmp_path: Path) -> None:
    code, out, _ = run("policy", "check", "weekday-weekend")
    assert code == 0 and "valid policy" in out and "168 slots" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("workloads: {training: {node_gpus: 0}}\nschedule: {default: {training: 8}}\n")
    code, _, err = run("policy", "check", str(bad))
    assert code == 2 and err.startswith(f"error: {bad}: workloads.training.node_gpus: must be between 1 and 64")


@pytest.mark.parametrize(("args", "code", "message"), [
    (("plan", "--policy", "nightshift", "--gpus", "8", "--type", "a100"), 2, "error: no policy file or preset"),
    (("plan", "--policy", "day-night", "--type", "a100"), 2, "error: policy 'day-night' names no GPU total"),
    (("plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "--hours", "48"), 2,
     "error: --hours must be 24 or 168"),
    (("plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "--timezone", "Moon/Base"), 2,
     "error: --timezone: unknown time zone"),
    (("plan", "--gpus", "8", "--type", "a100", "--hours", "24"), 2, "error: --hours goes with --policy"),
    (("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--budget", "5"), 3,
     "error: budget $5/h is below the cheapest cover"),
    (("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--chart", "x.jpg"), 2,
     "error: --chart writes a PNG"),
])
def test_policy_bad_input(args: tuple[str, ...], code: int, message: str) -> None:
    got, out, err = run(*args)
    assert got == code, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message), err
    assert "Traceback" not in out + err
