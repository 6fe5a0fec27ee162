"""HiGHS, run in a child process under a wall-clock guard.

HiGHS can overrun its own ``time_limit`` (seen at 4×, in root-node separation), so the
model is written as MPS, solved by ``highspy`` in a subprocess, and the subprocess is
killed when it runs past the limit plus a grace period. It also keeps HiGHS's banner off
our stdout.
"""

from __future__ import annotations

import json
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
mps, out, limit, gap = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
h = highspy.Highs()
h.setOptionValue("output_flag", False)
h.setOptionValue("time_limit", limit)
h.setOptionValue("mip_rel_gap", gap)
h.setOptionValue("threads", 1)
h.readModel(mps)
h.run()
status = h.modelStatusToString(h.getModelStatus())
info = h.getInfo()
lp = h.getLp()
sol = h.getSolution()
json.dump({"status": status, "bound": info.mip_dual_bound, "objective": info.objective_function_value,
           "names": list(lp.col_names_), "values": list(sol.col_value)}, open(out, "w"))
"""

GRACE_S = 5.0


def solve_highs(prob: Any, request: Any) -> tuple[str, float]:
    import importlib.util

    if importlib.util.find_spec("highspy") is None:
        raise MissingExtraError(
            "the HiGHS solver is not installed", hint="pip install 'gpuprov[highs]', or use --solver cbc"
        )
    with tempfile.TemporaryDirectory(prefix="gpuprov-highs-") as tmp:
        mps, out = os.path.join(tmp, "model.mps"), os.path.join(tmp, "out.json")
        prob.writeMPS(mps, rename=0)
        variables = prob.variables()
        limit = float(request.time_limit_s)
        try:
            subprocess.run(
                [sys.executable, "-c", _CHILD, mps, out, str(limit), str(request.gap)],
                check=True,
                timeout=limit + GRACE_S,
                capture_output=True,
            )
        except subprocess.TimeoutExpired:
            raise SolverError(
                f"HiGHS ran past its {limit:.0f} s limit and was stopped", hint="use --solver cbc, or a larger --gap"
            ) from None
        except subprocess.CalledProcessError as exc:
            raise SolverError(f"HiGHS failed: {exc.stderr.decode(errors='replace')[-300:]}") from exc
        with open(out, encoding="utf-8") as fh:
            result = json.load(fh)
    values = dict(zip(result["names"], result["values"], strict=True))
    for v in variables:
        v.varValue = values.get(v.name, 0.0)
    status = {"Optimal": SolveStatus.OPTIMAL, "Time limit reached": SolveStatus.FEASIBLE}.get(
        result["status"], result["status"]
    )
    if status == SolveStatus.FEASIBLE and not values:
        status = "Not Solved"
    return status, float(result["bound"])
