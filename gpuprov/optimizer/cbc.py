"""Running the solvers on a built PuLP problem: CBC (PuLP's bundled binary), HiGHS (``highs.py``),
and the LP relaxation; the bound CBC's log proves; solver progress for a terminal.

PuLP is imported through ``pulp_module``, which keeps it from importing highspy (and numpy) in
this process: that costs ~0.2 s of every plan's start-up, and gpuprov runs HiGHS in a child
process anyway (highs.py).
"""

from __future__ import annotations

import contextvars
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuprov.errors import SolverError
from gpuprov.models import SolveStatus

# what a terminal shows while a solver runs: (stage, incumbent objective or None, bound or None)
Progress = Callable[[str, float | None, float | None], None]
progress: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("gpuprov_solver_progress", default=None)


def pulp_module() -> Any:
    import sys

    if "pulp" not in sys.modules:
        sys.modules.setdefault("highspy", None)  # type: ignore[arg-type]
        try:
            import pulp
        finally:
            if sys.modules.get("highspy", 0) is None:
                del sys.modules["highspy"]
    import pulp

    return pulp


@dataclass(frozen=True)
class LPResult:
    status: str  # "Optimal", "Infeasible", "Unbounded", "Not Solved", …
    value: float
    values: dict[str, float]
    duals: dict[str, float]

    @property
    def optimal(self) -> bool:
        return self.status == "Optimal"


def solve_lp(prob: Any, time_limit_s: float | None = None) -> LPResult:
    """The LP relaxation of ``prob``, solved by CBC (Clp) in place; integrality is restored after.
    Its value bounds the MILP from below; "Infeasible" proves the MILP infeasible."""
    pulp = pulp_module()
    cats = [(v, v.cat) for v in prob.variables()]
    for v, _cat in cats:
        v.cat = pulp.LpContinuous
    try:
        for attempt in range(2):  # once more if CBC exits without an answer (see ``run``)
            try:
                prob.solve(pulp.PULP_CBC_CMD(msg=False, threads=1, timeLimit=time_limit_s))
                break
            except pulp.PulpSolverError as exc:
                if attempt == 1:
                    raise _failed(exc, "on the LP relaxation") from exc
    finally:
        for v, cat in cats:
            v.cat = cat
    status = pulp.LpStatus[prob.status]
    values = {v.name: float(v.varValue or 0.0) for v in prob.variables()}
    duals = {c.name: float(c.pi or 0.0) for c in prob.constraints()} if status == "Optimal" else {}
    value = float(prob.objective.value() or 0.0) if status == "Optimal" else math.nan
    return LPResult(status, value, values, duals)


def run(prob: Any, solver: str, gap: float, time_limit_s: float, warm: bool = False) -> tuple[str, float]:
    """Solve the MILP; return "Optimal", "Feasible" or the solver's status, and a proven lower bound.
    ``warm``: start CBC from the variables' current values (a known whole solution)."""
    pulp = pulp_module()
    if solver == "highs":
        from gpuprov.optimizer.highs import solve_highs

        return solve_highs(prob, gap, time_limit_s, warm)
    if solver != "cbc":
        raise SolverError(f"unknown solver {solver!r}", hint="use cbc or highs")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpuprov-cbc-") as tmp:
        log = os.path.join(tmp, "cbc.log")
        for attempt in range(2):
            # CBC 2.10 exits non-zero now and then (seen under heavy load): once more, cold and in the time left
            left = time_limit_s - (time.monotonic() - started)
            cmd = pulp.PULP_CBC_CMD(
                msg=False,
                gapRel=gap,
                timeLimit=max(0.5, left),
                threads=1,
                logPath=log,
                keepFiles=False,
                warmStart=warm and attempt == 0,
            )
            watcher = _Watcher(log, progress.get())
            try:
                prob.solve(cmd)
                break
            except pulp.PulpSolverError as exc:
                if attempt == 1 or left < 1.0:
                    raise _failed(exc) from exc
            finally:
                watcher.stop()
        status = pulp.LpStatus[prob.status]
        if prob.sol_status == pulp.LpSolutionOptimal:
            status = SolveStatus.OPTIMAL
        elif prob.sol_status == pulp.LpSolutionIntegerFeasible:
            status = SolveStatus.FEASIBLE
        with open(log, encoding="utf-8", errors="replace") as fh:
            bound = cbc_bound(fh.read(), gap)
    if bound is None:
        bound = solve_lp(prob).value if status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) else -math.inf
    return status, bound


def _failed(exc: Exception, where: str = "") -> SolverError:
    """One line without PuLP's path to the binary: "Pulp: Error while trying to execute, use ...<path>"."""
    what = str(exc).split(",")[0].removeprefix("Pulp: ")
    return SolverError(
        f"CBC failed to run{' ' + where if where else ''}: {what}",
        hint="run again, or use --solver highs (pip install 'gpuprov[highs]')",
    )


class _Watcher:
    """Reads CBC's log as it is written and reports the incumbent and the bound (a terminal's
    progress line); does nothing without a reporter."""

    def __init__(self, path: str, report: Progress | None) -> None:
        self.path, self.report = path, report
        self.done = threading.Event()
        self.thread = None
        if report is not None:
            self.thread = threading.Thread(target=self._loop, daemon=True)
            self.thread.start()

    def _loop(self) -> None:
        assert self.report is not None
        seen = 0
        while not self.done.wait(0.5):
            try:
                with open(self.path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            if len(text) == seen:
                continue
            seen = len(text)
            incumbent, bound = log_progress(text)
            self.report("MILP", incumbent, bound)

    def stop(self) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=2)


NUMBER = r"([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)"


def log_progress(log: str) -> tuple[float | None, float | None]:
    """The last incumbent and bound a CBC log shows so far."""
    incumbent = bound = None
    for m in re.finditer(rf"After \d+ nodes, \d+ on tree, {NUMBER} best solution, best possible {NUMBER}", log):
        incumbent, bound = float(m.group(1)), float(m.group(2))
    for m in re.finditer(rf"Integer solution of {NUMBER} found", log):
        value = float(m.group(1))
        incumbent = value if incumbent is None else min(incumbent, value)
    if bound is None:
        root = re.findall(rf"Continuous objective value is {NUMBER}", log)
        bound = float(root[-1]) if root else None
    if incumbent is not None and abs(incumbent) >= 1e49:
        incumbent = None
    return incumbent, bound


def cbc_bound(log: str, gap: float = 0.0) -> float | None:
    """The best lower bound CBC's log proves on the objective (minimisation).

    Every one of these is a valid bound, so the largest is taken: the root LP relaxation
    ('Continuous objective value is'), the root after cuts ('Cuts at root node changed
    objective from A to B'), the last node line's 'best possible', 'Lower bound:' of a
    search stopped early, and, when CBC reports 'Optimal solution found', the objective less
    the relative gap CBC was allowed to stop at (it may prune nodes within that gap).
    """
    found: list[float] = []
    for pattern in (
        rf"Continuous objective value is {NUMBER}",
        rf"Cuts at root node changed objective from \S+ to {NUMBER}",
        rf"best possible {NUMBER}",
        rf"Lower bound:\s+{NUMBER}",
    ):
        hits = re.findall(pattern, log)
        if hits:
            found.append(float(hits[-1]))
    objective = re.findall(rf"Objective value:\s+{NUMBER}", log)
    if objective and "Optimal solution found" in log:
        value = float(objective[-1])
        found.append(value - gap * abs(value))
        found = [min(b, value) for b in found]
    found = [b for b in found if abs(b) < 1e300]
    return max(found) if found else None
