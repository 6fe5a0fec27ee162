"""The plan path must not load any cloud SDK (they cost 0.2–1.5 s each to import)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_plan_imports_no_cloud_sdk(_isolated_db: str) -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from gpuprov.cli import app\n"
        "r = CliRunner().invoke(app, ['plan', '--gpus', '64', '--type', 'a100', '-o', 'json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "import json\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = json.loads(run.stdout.strip().splitlines()[-1])
    loaded = [
        m
        for m in modules
        if m.split(".")[0] in {"boto3", "botocore", "azure", "moto"}
        or m.startswith("google.cloud")
        or m.startswith("google.api_core")
    ]
    assert loaded == []
    # nothing optional either: highspy (which ``import pulp`` loads whenever it is installed, with
    # numpy) only when HiGHS is chosen, in its child process; charts and clusters only when asked
    optional = [m for m in modules if m.split(".")[0] in {"highspy", "numpy", "matplotlib", "kubernetes", "pyarrow"}]
    assert optional == []
    assert "gpuprov.optimizer.solve" in modules  # the plan really ran in that process


def test_help_does_not_load_the_store_or_solver() -> None:
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom gpuprov.cli import app\n"
        "CliRunner().invoke(app, ['--help'])\n"
        "print(any(m.startswith(('sqlmodel', 'sqlalchemy', 'pulp')) for m in sys.modules))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip().splitlines()[-1] == "False"
