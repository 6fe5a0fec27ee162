"""plan --policy, --save, plans, --chart and policy check, as a user runs them."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.plandoc import from_json

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_day_night_plan_meets_the_schedule_and_reports_baselines() -> None:
    code, out, err = run("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "-o", "json")
    assert code == 0, err
    doc = from_json(out)
    assert doc.horizon_hours == 24 and len(doc.costs.slot_usd) == 24
    assert doc.timezone == "UTC" and [(w.name, w.start_slot, w.end_slot) for w in doc.windows] == [
        ("day", 8, 20),
        ("night", 20, 8),
    ]
    for t in range(24):
        for w in ("training", "inference"):
            held = sum(a.instances_by_slot[t] * a.gpus_per_instance for a in doc.allocations if a.workload == w)
            held += sum(r.gpus_used_by_slot.get(w, (0,) * 24)[t] for r in doc.reservations)
            assert held >= doc.demand[w][t]
            # what apply would run for w (whole instances) holds it too
            runs = sum(a.instances_by_slot[t] * a.gpus_per_instance for a in doc.placements() if a.workload == w)
            assert runs >= doc.demand[w][t]
    assert doc.demand["inference"][12] == 45 and doc.demand["training"][2] == 51
    assert doc.costs.horizon_usd == sum(doc.costs.slot_usd, Decimal(0))
    for b in doc.baselines:
        assert b.horizon_usd is None or b.horizon_usd >= doc.costs.horizon_usd, b
    assert doc.costs.lower_bound_usd <= doc.costs.objective_usd
    training_sites = {(a.cloud, a.location, a.gpu) for a in doc.placements() if a.workload == "training"}
    assert len(training_sites) <= 1
    for r in doc.reservations:  # training takes whole reserved nodes
        assert all(g % r.gpus_per_instance == 0 for g in r.gpus_used_by_slot.get("training", ()))


def test_table_output_has_the_chart_and_savings(tmp_path: Path) -> None:
    png = tmp_path / "plan.png"
    code, out, err = run("plan", "--policy", "day-night", "--gpus", "32", "--type", "a100-80gb", "--chart", str(png))
    assert code == 0, err
    assert "GPUs by market" in out and "08:00–20:00" in out and "plan saves" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_flags_override_the_policy() -> None:
    code, out, err = run(
        "plan",
        "--policy",
        "day-night",
        "--gpus",
        "16",
        "--type",
        "h100",
        "--hours",
        "168",
        "--max-spot-fraction",
        "0",
        "--timezone",
        "Europe/Berlin",
        "-o",
        "json",
    )
    assert code == 0, err
    doc = from_json(out)
    assert doc.horizon_hours == 168 and doc.timezone == "Europe/Berlin"
    assert all(a.market != "spot" for a in doc.allocations)


def test_save_then_list_then_same_id_again() -> None:
    code, out, _ = run("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json")
    assert code == 0
    pid = json.loads(out)["plan_id"]
    code, out, _ = run("plans", "-o", "json")
    assert code == 0 and [p["id"] for p in json.loads(out)] == [pid]
    code, out, _ = run("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json")
    assert json.loads(out)["plan_id"] == pid  # same inputs, same snapshot: same id
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


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("plan", "--policy", "nightshift", "--gpus", "8", "--type", "a100"), 2, "error: no policy file or preset"),
        (("plan", "--policy", "day-night", "--type", "a100"), 2, "error: policy 'day-night' names no GPU total"),
        (
            ("plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "--hours", "48"),
            2,
            "error: --hours must be 24 or 168",
        ),
        (
            ("plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "--timezone", "Moon/Base"),
            2,
            "error: --timezone: unknown time zone",
        ),
        (("plan", "--gpus", "8", "--type", "a100", "--hours", "24"), 2, "error: --hours goes with --policy"),
        (
            ("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--budget", "5"),
            3,
            "error: budget $5/h is below the cheapest cover",
        ),
        (
            ("plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--chart", "x.jpg"),
            2,
            "error: --chart writes a PNG",
        ),
    ],
)
def test_policy_bad_input(args: tuple[str, ...], code: int, message: str) -> None:
    got, out, err = run(*args)
    assert got == code, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message), err
    assert "Traceback" not in out + err
