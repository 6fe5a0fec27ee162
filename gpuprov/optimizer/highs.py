"""HiGHS, run in a child process under a wall-clock guard.

HiGHS can overrun its own ``time_limit`` (seen at 4×, in root-node separation), so the
model is written as MPS, solved by ``highspy`` in a subprocess, and the subprocess is
killed when it runs past the limit plus a grace period. It also keeps HiGHS's banner off
our stdout.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from typing import Any

from gpuprov.errors import MissingExtraError, SolverError
from gpuprov.models import SolveStatus

_CHILD = r"""
import json, sys
import highspy
mps, out, limit, gap, start = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
h = highspy.Highs()
h.setOptionValue("output_flag", False)
h.setOptionValue("time_limit", limit)
h.setOptionValue("mip_rel_gap", gap)
h.setOptionValue("threads", 1)
h.readModel(mps)
if start:
    values = json.load(open(start))
    names = list(h.getLp().col_names_)
    sol = highspy.HighsSolution()
    sol.col_value = [values.get(n, 0.0) for n in names]
    h.setSolution(sol)
h.run()
status = h.modelStatusToString(h.getModelStatus())
info = h.getInfo()
lp = h.getLp()
sol = h.getSolution()
feasible = info.primal_solution_status == 2
json.dump({"status": status, "bound": info.mip_dual_bound, "objective": info.objective_function_value,
           "names": list(lp.col_names_), "values": list(sol.col_value) if feasible else []}, open(out, "w"))
"""

GRACE_S = 1.0  # the whole command has a deadline: a child past it is stopped soon after


def solve_highs(prob: Any, gap: float, time_limit_s: float, warm: bool = False) -> tuple[str, float]:
    """Solve in a child process; ``warm``: start from the variables' current values."""
    import importlib.util

    if importlib.util.find_spec("highspy") is None:
        raise MissingExtraError(
            "the HiGHS solver is not installed", hint="pip install 'gpuprov[highs]', or use --solver cbc"
        )
    with tempfile.TemporaryDirectory(prefix="gpuprov-highs-") as tmp:
        mps, out = os.path.join(tmp, "model.mps"), os.path.join(tmp, "out.json")
        prob.writeMPS(mps, rename=0)
        variables = prob.variables()
        start = ""
        if warm:
            start = os.path.join(tmp, "start.json")
            with open(start, "w", encoding="utf-8") as fh:
                json.dump({v.name: float(v.varValue or 0.0) for v in variables}, fh)
        limit = float(time_limit_s)
        try:
            subprocess.run(
                [sys.executable, "-c", _CHILD, mps, out, str(limit), str(gap), start],
                check=True,
                timeout=limit + GRACE_S,
                capture_output=True,
            )
        except subprocess.TimeoutExpired:
            return "Not Solved", -math.inf  # stopped past its limit: the caller keeps its start
        except subprocess.CalledProcessError as exc:
            raise SolverError(f"HiGHS failed: {exc.stderr.decode(errors='replace')[-300:]}") from exc
        with open(out, encoding="utf-8") as fh:
            result = json.load(fh)
    values = dict(zip(result["names"], result["values"], strict=True)) if result["values"] else {}
    for v in variables:
        v.varValue = values.get(v.name, 0.0)
    status = {"Optimal": SolveStatus.OPTIMAL, "Time limit reached": SolveStatus.FEASIBLE}.get(
        result["status"], result["status"]
    )
    if status == SolveStatus.FEASIBLE and not values:
        status = "Not Solved"
    return status, float(result["bound"])
