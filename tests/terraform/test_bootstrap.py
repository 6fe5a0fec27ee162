"""The config's bootstrap in Terraform: AWS launch template ``user_data`` (base64), GCP instance
template ``metadata_startup_script`` (text, escaped like every literal), Azure scale set
``custom_data`` (base64); checked against the provider schemas and a golden. A hostile script with
``${path}`` and ``%{if}`` never reaches Terraform as an interpolation or a directive."""

from __future__ import annotations

import base64
import copy
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuprov.bootstrap import Bootstrap
from terraform.render import render_plan
from terraform.schema_check import check_dir, check_files
from terraform.tfsyntax import interpolations
from terraform.write import dumps, write_files
from tests.plans import golden_plan as planned  # the stored plan the goldens are rendered from

GOLDEN = Path(__file__).resolve().parent / "golden" / "three_clouds_bootstrap"
HOSTILE = "#!/bin/bash\nset -eu\necho \"${path}\" %{if true}x%{endif} $${already} 'q'\n"
BOOT = Bootstrap({"aws": HOSTILE, "gcp": HOSTILE, "azure": HOSTILE}, kubelet=True)
WHERE = {
    "aws.tf.json": ("aws_launch_template", "user_data"),
    "gcp.tf.json": ("google_compute_instance_template", "metadata_startup_script"),
    "azure.tf.json": ("azurerm_linux_virtual_machine_scale_set", "custom_data"),
}


def rendered() -> dict[str, dict[str, Any]]:
    return render_plan(planned("three_clouds"), bootstrap=BOOT)


def bodies(files: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    out = []
    for name, (rtype, attr) in WHERE.items():
        for body in files[name]["resource"][rtype].values():
            out.append((name, body, attr))
    return out


def script_of(name: str, body: dict[str, Any], attr: str) -> str:
    value = body[attr]
    if name == "gcp.tf.json":  # as Terraform reads the template string back
        return str(value).replace("$${", "${").replace("%%{", "%{")
    return base64.b64decode(value).decode("utf-8")


def test_without_bootstrap_the_output_is_unchanged() -> None:
    doc = planned("three_clouds")
    assert {k: dumps(v) for k, v in render_plan(doc, bootstrap=Bootstrap()).items()} == {
        k: dumps(v) for k, v in render_plan(doc).items()
    }


def test_golden_and_schema_check(tmp_path: Path) -> None:
    files = rendered()
    assert check_files(files) == []
    if os.environ.get("GPUPROV_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        write_files(files, GOLDEN)
    assert sorted(p.name for p in GOLDEN.glob("*.tf.json")) == sorted(files)
    for name, doc in files.items():
        assert (GOLDEN / name).read_text(encoding="utf-8") == dumps(doc), name
    assert check_dir(GOLDEN) == []


def test_only_the_bootstrap_attributes_are_added() -> None:
    files, plain = rendered(), render_plan(planned("three_clouds"))
    stripped = copy.deepcopy(files)
    for _name, body, attr in bodies(stripped):
        del body[attr]
    assert stripped == plain
    assert {name for name, _, _ in bodies(files)} == set(WHERE)


def test_every_template_boots_the_script_with_its_node_labels() -> None:
    files = rendered()
    for name, body, attr in bodies(files):
        text = script_of(name, body, attr)
        first, kubelet, rest = text.split("\n", 2)
        assert first == "#!/bin/bash" and rest == HOSTILE.split("\n", 1)[1]
        words = shlex.split(kubelet)
        assert words[0] == "export" and words[1].startswith("KUBELET_EXTRA_ARGS=--node-labels=")
        labels = dict(x.split("=", 1) for x in words[1].split("=", 1)[1].split()[0].split("=", 1)[1].split(","))
        assert labels["gpuprov.io/plan"] == planned("three_clouds").plan_id
        assert labels["gpuprov.io/workload"] in planned("three_clouds").workloads
        spot = body.get("priority") == "Spot" or body.get("scheduling", {}).get("provisioning_model") == "SPOT"
        if name != "aws.tf.json":  # one market per GCP template and Azure scale set
            assert labels["gpuprov.io/market"] == ("spot" if spot else "on-demand")
        elif "instance_market_options" in body:  # an all-spot AWS group's template
            assert labels["gpuprov.io/market"] == "spot"
        assert words[1].endswith(" --register-with-taints=nvidia.com/gpu=true:NoSchedule")


def test_the_hostile_script_reaches_terraform_only_escaped() -> None:
    files = rendered()
    gcp = [body["metadata_startup_script"] for name, body, _ in bodies(files) if name == "gcp.tf.json"]
    assert gcp
    for s in gcp:
        assert "$${path}" in s and "%%{if true}" in s and "%%{endif}" in s and "$$${already}" in s
        assert interpolations(s) == [] and "%{" not in s.replace("%%{", "")
    text = json.dumps(files)
    assert "${path}" not in text.replace("$${path}", "")
    assert "%{if" not in text.replace("%%{if", "")
    assert [p for p in check_files(files) if p.kind == "interpolation"] == []


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary on PATH")
def test_terraform_reads_the_startup_script_back_as_the_file(tmp_path: Path) -> None:
    files = rendered()
    script = next(body["metadata_startup_script"] for name, body, _ in bodies(files) if name == "gcp.tf.json")
    (tmp_path / "main.tf.json").write_text(json.dumps({"locals": {"s": script}}), encoding="utf-8")
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
        out = subprocess.run(
            ["terraform", f"-chdir={tmp_path}", "console", "-no-color"],
            input="jsonencode(local.s)\n",
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("terraform did not answer within 60 s")
    assert out.returncode == 0, out.stderr
    value = json.loads(json.loads(out.stdout.strip().splitlines()[-1]))
    assert value.split("\n", 2)[2] == HOSTILE.split("\n", 1)[1]  # byte for byte after the kubelet line


def test_a_template_several_markets_share_gets_no_market_label() -> None:
    from terraform.plan import read_plan

    doc = read_plan(planned("three_clouds"), bootstrap=BOOT)
    mixed = doc.user_data("aws", "inference", ["spot", "on_demand"])
    assert mixed is not None and "gpuprov.io/market" not in mixed and "gpuprov.io/workload=inference" in mixed
    reserved = doc.user_data("aws", "inference", ["reserved_1y", "on_demand"])
    assert reserved is not None and "gpuprov.io/market=on-demand," in reserved
