"""Nothing from a policy, a price row or a plan is ever evaluated by Terraform.

A policy whose name and window names carry ``${…}`` and ``%{…}`` is planned and rendered; the
output carries them only escaped (``$${``, ``%%{``), the checker finds no interpolation gpuprov
did not write, and where a terraform binary exists, ``terraform console`` (no provider needed)
evaluates each escaped string back to the literal text.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuprov import planning
from terraform.render import render_plan
from terraform.schema_check import check_files
from terraform.tfsyntax import interpolations
from tests.plans import CREATED, bundled

HOSTILE = ['${file("/etc/hostname")}', "%{ if true }x%{ endif }"]
POLICY = f"""
name: '{HOSTILE[0]}'
gpu: l4
gpus: 8
horizon_hours: 24
workloads:
  inference: {{max_spot_fraction: 0.5}}
schedule:
  default: {{inference: 25%}}
  windows:
    - {{name: '{HOSTILE[0]}', start: "08:00", end: "14:00", demand: {{inference: 100%}}}}
    - {{name: '{HOSTILE[1]}', start: "14:00", end: "20:00", demand: {{inference: 50%}}}}
"""


def rendered() -> dict[str, dict[str, Any]]:
    from policies import loader
    from pricing.gpus import resolve

    pol = loader.parse(POLICY, "hostile.yaml")
    spec = planning.policy_spec(pol, resolve("l4"), "cbc", 0.001, 60.0)
    context = planning.policy_context(pol)
    offers, snaps = bundled()
    solved = planning.run(planning.request_from_spec(spec, offers))
    doc = planning.document(planning.plan_id(spec, snaps, context), solved, snaps, 8, spec, context, CREATED)
    assert {w.name for w in doc.windows} == set(HOSTILE)
    return render_plan(doc)


def strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (strings(k) + strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def test_hostile_names_reach_terraform_only_escaped() -> None:
    files = rendered()
    text = json.dumps(files)
    assert '$${file(\\"/etc/hostname\\")}' in text  # the policy name, escaped, in a comment/tag
    for s in strings(files):
        for expr in interpolations(s) or []:
            assert not expr.startswith("file("), s
        assert "%{" not in s.replace("%%{", ""), s
    assert [p for p in check_files(files) if p.kind == "interpolation"] == []


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary on PATH")
def test_terraform_reads_the_escaped_strings_as_literal_text(tmp_path: Path) -> None:
    escaped = sorted({s for s in strings(rendered()) if "$${" in s or "%%{" in s})
    assert escaped
    locals_ = {f"s{i}": s for i, s in enumerate(escaped)}
    (tmp_path / "main.tf.json").write_text(json.dumps({"locals": locals_}), encoding="utf-8")
    env = {
        **os.environ,
        "TF_CLI_CONFIG_FILE": os.devnull,
        "CHECKPOINT_DISABLE": "1",
        "TF_IN_AUTOMATION": "1",
        "TF_DATA_DIR": str(tmp_path / ".tf"),
    }
    try:
        init = subprocess.run(
            ["terraform", f"-chdir={tmp_path}", "init", "-no-color"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert init.returncode == 0, init.stderr
        query = "jsonencode([" + ", ".join(f"local.s{i}" for i in range(len(escaped))) + "])\n"
        out = subprocess.run(
            ["terraform", f"-chdir={tmp_path}", "console", "-no-color"],
            input=query,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("terraform did not answer within 60 s")
    assert out.returncode == 0, out.stderr
    values = json.loads(json.loads(out.stdout.strip().splitlines()[-1]))
    assert values == [s.replace("$${", "${").replace("%%{", "%{") for s in escaped]
    assert any(HOSTILE[0] in v for v in values)
