"""CBC exiting without an answer (PuLP's "Error while trying to execute", seen now and then under
heavy load): tried once more, cold, in the time left; failing twice is exit 8 with one line,
never exit 3, which says the request has no plan."""

from __future__ import annotations

from typing import Any

import pulp
import pytest
from typer.testing import CliRunner

from gpuprov.cli import app

runner = CliRunner()
ARGS = ["plan", "--gpus", "16", "--type", "a100", "--node-gpus", "8", "--output", "json"]


def _failing(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[bool]:
    """CBC runs fail ``failures`` times, then run; returns the warm-start flag of each run."""
    real = pulp.PULP_CBC_CMD.actualSolve
    runs: list[bool] = []

    def actual_solve(self: Any, lp: Any, **kw: Any) -> Any:
        runs.append(bool(self.optionsDict.get("warmStart")))
        if len(runs) <= failures:
            raise pulp.PulpSolverError("Pulp: Error while trying to execute, use msg=True for more details/x/cbc")
        return real(self, lp, **kw)

    monkeypatch.setattr(pulp.PULP_CBC_CMD, "actualSolve", actual_solve)
    return runs


def _model() -> Any:
    """min 3x + 2y with 2x + 2y >= 7, x, y whole: 8 (y = 4)."""
    prob = pulp.LpProblem("t", pulp.LpMinimize)
    x = prob.add_variable("x", 0, 10, pulp.LpInteger)
    y = prob.add_variable("y", 0, 10, pulp.LpInteger)
    prob += 3 * x + 2 * y
    prob += 2 * x + 2 * y >= 7
    x.setInitialValue(4)
    y.setInitialValue(0)
    return prob


def test_one_failed_cbc_run_is_run_again_cold_and_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov.optimizer import cbc

    runs = _failing(monkeypatch, 1)
    prob = _model()
    status, bound = cbc.run(prob, "cbc", 0.0, 20.0, warm=True)
    assert status == "Optimal" and pulp.value(prob.objective) == 8 and bound == pytest.approx(8)
    assert runs[:2] == [True, False]  # warm first, then cold


def test_cbc_failing_twice_is_a_solver_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov.errors import SolverError
    from gpuprov.optimizer import cbc

    runs = _failing(monkeypatch, 2)
    with pytest.raises(SolverError) as info:
        cbc.run(_model(), "cbc", 0.0, 20.0)
    assert len(runs) == 2 and info.value.exit_code == 8 and "/x/cbc" not in info.value.message


def test_plan_with_cbc_failing_is_one_line_exit_8(monkeypatch: pytest.MonkeyPatch) -> None:
    _failing(monkeypatch, 10**6)
    r = runner.invoke(app, ARGS)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.exit_code == 8, r.stdout + r.stderr
    assert len(errors) == 1 and "CBC failed to run" in errors[0] and "/x/cbc" not in r.stderr
    assert "Traceback" not in r.stderr
