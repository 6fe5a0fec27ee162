"""Golden files, their schema check, determinism, and an offline parse by the real terraform binary.

Regenerate the goldens with ``GPUPROV_UPDATE_GOLDEN=1 pytest tests/terraform``; otherwise every
rendered file must equal its golden byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from gpuprov.plandoc import PlanDocument, from_json, to_json
from terraform.render import render_plan
from terraform.schema_check import check_dir
from terraform.write import dumps, write_files
from tests.plans import CASES as PLANNED
from tests.plans import golden_plan, planned

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
CASES = sorted(PLANNED)
PROVIDERS = {"aws": "hashicorp/aws", "gcp": "hashicorp/google", "azure": "hashicorp/azurerm"}


def load(case: str) -> PlanDocument:
    """The stored plan the planner wrote for this case on the bundled snapshot (tests/plans.py)."""
    return golden_plan(case)


def test_cases_present() -> None:
    assert {"flags_any", "day_night", "weekday_weekend", "three_clouds"} <= set(CASES)
    assert {c for case in CASES for c in load(case).clouds} == {"aws", "gcp", "azure"}


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    files = render_plan(load(case))
    folder = GOLDEN / case
    if os.environ.get("GPUPROV_UPDATE_GOLDEN") == "1":
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.tf.json"):
            if stale.name not in files:
                stale.unlink()
        write_files(files, folder)
    assert folder.is_dir(), f"no goldens for {case}: run with GPUPROV_UPDATE_GOLDEN=1"
    assert sorted(p.name for p in folder.glob("*.tf.json")) == sorted(files)
    for name, doc in files.items():
        assert (folder / name).read_text(encoding="utf-8") == dumps(doc), (
            f"{case}/{name} differs from its golden; if intended, rerun with GPUPROV_UPDATE_GOLDEN=1"
        )


@pytest.mark.parametrize("case", CASES)
def test_golden_passes_schema_check(case: str) -> None:
    assert check_dir(GOLDEN / case) == []


@pytest.mark.parametrize("case", CASES)
def test_what_the_planner_writes_now_renders_and_passes_the_schema_check(case: str, tmp_path: Path) -> None:
    now, stored = planned(case), golden_plan(case)
    write_files(render_plan(now), tmp_path)
    assert check_dir(tmp_path) == []
    # the stored plan is one of the planner's answers: the same request, cost within its gap
    assert now.request == stored.request and now.plan_id == stored.plan_id
    assert (
        abs(now.costs.objective_usd - stored.costs.objective_usd)
        <= 2 * max(now.costs.gap, stored.costs.gap, Decimal("0.001")) * stored.costs.objective_usd
    )


@pytest.mark.parametrize("case", CASES)
def test_render_is_deterministic(case: str, tmp_path: Path) -> None:
    first = {k: dumps(v) for k, v in render_plan(load(case)).items()}
    again = {k: dumps(v) for k, v in render_plan(from_json(to_json(load(case)))).items()}
    assert first == again
    a, b = tmp_path / "a", tmp_path / "b"
    write_files(render_plan(load(case)), a)
    write_files(render_plan(load(case)), b)
    for name in first:
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_only_present_clouds_get_files() -> None:
    assert sorted(render_plan(load("flags_aws_gang"))) == [
        "aws.tf.json",
        "outputs.tf.json",
        "variables.tf.json",
        "versions.tf.json",
    ]
    assert {"aws.tf.json", "gcp.tf.json", "azure.tf.json"} <= set(render_plan(load("three_clouds")))


# ------------------------------------------------------------------ the real terraform binary
# Offline, `terraform providers` loads and parses every *.tf.json (it fails on a JSON syntax
# error or an unknown top-level block) and lists the required providers without fetching them;
# `terraform validate` without `init` reports only "Missing required provider" on a config that
# parses. (`init` needs the registry; `graph` and `console` need a lock file; `fmt` skips .tf.json.)

TERRAFORM = shutil.which("terraform")
needs_terraform = pytest.mark.skipif(TERRAFORM is None, reason="no terraform binary on PATH")


def run_terraform(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert TERRAFORM is not None
    env = {
        **os.environ,
        "TF_CLI_CONFIG_FILE": os.devnull,
        "CHECKPOINT_DISABLE": "1",
        "TF_IN_AUTOMATION": "1",
        "TF_DATA_DIR": str(folder / ".terraform-data"),
    }
    try:
        return subprocess.run(
            [TERRAFORM, f"-chdir={folder}", *args, "-no-color"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("terraform did not answer within 60 s (it may be trying the network)")


@needs_terraform
@pytest.mark.parametrize("case", CASES)
def test_terraform_parses_golden_offline(case: str, tmp_path: Path) -> None:
    folder = tmp_path / case
    shutil.copytree(GOLDEN / case, folder)
    listed = run_terraform(folder, "providers")
    assert listed.returncode == 0, listed.stderr
    present = {name.split(".")[0] for name in render_plan(load(case))} & set(PROVIDERS)
    for cloud in present:
        assert f"registry.terraform.io/{PROVIDERS[cloud]}" in listed.stdout
    validated = run_terraform(folder, "validate", "-json")
    report = json.loads(validated.stdout)
    assert {d["summary"] for d in report["diagnostics"]} == {"Missing required provider"}, report


@needs_terraform
def test_terraform_rejects_broken_json(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    shutil.copytree(GOLDEN / "flags_aws_gang", folder)
    text = (folder / "aws.tf.json").read_text(encoding="utf-8")
    (folder / "aws.tf.json").write_text(
        text.replace('"strategy": "cluster"', '"strategy": "cluster",'), encoding="utf-8"
    )
    result = run_terraform(folder, "providers")
    assert result.returncode != 0
    assert "aws.tf.json" in result.stderr
