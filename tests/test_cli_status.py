"""What gpuprov plan says about how it ended, as a user runs it: a plan short of the gap asked
says so first and exits 7 (0 with --accept-gap), no plan within the time limit is exit 6, an
infeasible request (proven) is exit 3, and --output json carries the gap asked and the phases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.errors import TimeLimitError
from gpuprov.optimizer import solve as solve_module

runner = CliRunner()


def test_a_proven_plan_carries_the_gap_asked_and_the_phases_of_the_whole_command() -> None:
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100", "--gap", "0.002", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    solve = json.loads(r.stdout)["solve"]
    assert solve["status"] == "Optimal" and solve["gap_asked"] == 0.002
    phases = solve["phases"]
    assert {"catalog", "reductions", "baselines"} <= set(phases)
    assert all(v >= 0 for v in phases.values())
    assert "STOPPED" not in r.stderr


def _short_of_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The solver's answer as a time limit leaves it: a plan, its bound 5% below."""
    real = solve_module.solve

    def stopped(request):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        plan = real(request)
        return replace(plan, status="Feasible", lower_bound_usd=plan.objective_usd * 95 / 100)

    monkeypatch.setattr("gpuprov.planning.solve", stopped)


def test_a_plan_short_of_the_gap_says_so_first_and_exits_7(monkeypatch: pytest.MonkeyPatch) -> None:
    _short_of_the_gap(monkeypatch)
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100", "--time-limit", "30"])
    assert r.exit_code == 7, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("STOPPED BY THE TIME LIMIT (30 s): gap 5.00% reached, 0.10% asked")
    assert "exit 7; --accept-gap exits 0" in first
    accepted = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100", "--time-limit", "30", "--accept-gap"])
    assert accepted.exit_code == 0, accepted.stderr
    assert accepted.stdout.splitlines()[0].startswith("STOPPED BY THE TIME LIMIT")
    as_json = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100", "-o", "json"])
    assert as_json.exit_code == 7
    assert json.loads(as_json.stdout)["solve"]["status"] == "Feasible"  # stdout stays one document
    assert "warning: STOPPED BY THE TIME LIMIT" in as_json.stderr


def test_no_plan_within_the_time_limit_is_exit_6_and_no_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    def out_of_time(request):  # type: ignore[no-untyped-def]
        raise TimeLimitError(
            "no plan found within the 5 s time limit (tried the LP relaxation); this does not prove that none exists",
            hint="raise --time-limit",
        )

    monkeypatch.setattr("gpuprov.planning.solve", out_of_time)
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100", "--time-limit", "5"])
    assert r.exit_code == 6
    assert r.stderr.splitlines()[-2].startswith("error: no plan found within the 5 s time limit")
    assert "does not prove" in r.stderr


def test_a_budget_no_plan_can_meet_is_proven_infeasible_with_exit_3(tmp_path: Path) -> None:
    policy = tmp_path / "tight.yaml"
    policy.write_text(
        "gpu: a100\ngpus: 64\nbudget_per_hour: 1\nworkloads: {training: {}}\nschedule: {default: {training: 64}}\n",
        encoding="utf-8",
    )
    r = runner.invoke(app, ["plan", "--policy", str(policy)])
    assert r.exit_code == 3
    assert "budget $1/h" in r.stderr and r.stdout == ""


def test_no_progress_line_on_a_pipe() -> None:
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100", "-o", "json"])
    assert r.exit_code == 0
    assert "planning:" not in r.stderr and "\r" not in r.stderr


class _Terminal:
    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_progress_on_a_terminal_shows_elapsed_stage_best_and_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from gpuprov import progress
    from gpuprov.optimizer import cbc

    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    term = _Terminal()
    with progress.on_terminal(time.monotonic(), term):  # type: ignore[arg-type]
        report = cbc.progress.get()
        assert report is not None
        report("MILP", 100.0, 90.0)
        time.sleep(0.8)
    assert cbc.progress.get() is None
    line = term.text.split("\r\033[K")[-2]
    assert line.startswith("planning: ") and "MILP, best $100.00, bound $90.00, gap 10.00%" in line
    assert term.text.endswith("\r\033[K")  # the line is cleared at the end


def test_progress_reads_the_incumbent_and_bound_from_a_cbc_log() -> None:
    from gpuprov.optimizer.cbc import log_progress

    # lines in the format CBC 2.10 writes them (PuLP's bundled binary, logPath)
    log = (
        "Continuous objective value is 1200.5 - 0.01 seconds\n"
        "Cbc0012I Integer solution of 1310.25 found by DiveCoefficient after 0 iterations and 0 nodes (0.05 seconds)\n"
        "Cbc0010I After 100 nodes, 12 on tree, 1290.75 best solution, best possible 1250.125 (1.20 seconds)\n"
    )
    assert log_progress(log) == (1290.75, 1250.125)
    assert log_progress(log.splitlines()[0]) == (None, 1200.5)
    assert log_progress("") == (None, None)
