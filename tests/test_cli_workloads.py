"""Any workload names and count, as a user writes them: a policy of three workloads is planned,
saved, and rendered to Kubernetes and Terraform, each workload under its own name."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuprov.cli import app
from terraform.schema_check import check_dir

runner = CliRunner()

POLICY = """
name: three
gpu: a100
gpus: 48
workloads:
  pretrain: {gang: true, node_gpus: 8, max_spot_fraction: 0.5}
  serve: {spread_zones: 2, max_spot_fraction: 0.3}
  batch-eval: {max_spot_fraction: 0.9}
schedule:
  default: {pretrain: 16, serve: 12, batch-eval: 8}
  windows:
    - {name: day, start: "08:00", end: "20:00", demand: {pretrain: 24, serve: 16, batch-eval: 8}}
"""


def test_three_named_workloads_are_planned_and_rendered_under_their_names(tmp_path: Path) -> None:
    policy = tmp_path / "three.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    # (the names are the point here, not the gap: a small three-workload plan is proven to a few %)
    r = runner.invoke(
        app,
        [
            "plan",
            "--policy",
            str(policy),
            "--gap",
            "0.05",
            "--time-limit",
            "20",
            "--accept-gap",
            "--save",
            "-o",
            "json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    names = ("pretrain", "serve", "batch-eval")
    assert [w["name"] for w in doc["request"]["workloads"]] == list(names)
    planned = {a["workload"] for a in doc["allocations"]} | {
        w for rv in doc["reservations"] for w in rv["gpus_used_by_slot"]
    }
    assert planned == set(names)
    rows = [a for a in doc["allocations"] if a["workload"] == "pretrain"]
    rows += [rv for rv in doc["reservations"] if any(rv["gpus_used_by_slot"].get("pretrain", ()))]
    sites = {(a["cloud"], a["zone"] or a["region"], a["gpu"]) for a in rows}  # on demand, spot or reserved
    assert len(sites) == 1, "the gang sits at one site"

    k8s = tmp_path / "k8s"
    r = runner.invoke(app, ["k8s", doc["plan_id"], "--out", str(k8s)])
    assert r.exit_code == 0, r.stderr
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(k8s.rglob("*.yaml")))
    for name in names:
        assert f"name: gpuprov-{name}\n" in text, name  # its ClusterQueue (and LocalQueue)

    infra = tmp_path / "infra"
    r = runner.invoke(app, ["terraform", doc["plan_id"], "--out", str(infra)])
    assert r.exit_code == 0, r.stderr
    assert check_dir(infra) == []
    tf = "\n".join(p.read_text(encoding="utf-8") for p in sorted(infra.glob("*.tf.json")))
    for name in names:
        assert name.replace("-", "_") in tf or name in tf, name


def test_a_bad_workload_name_is_one_line_naming_it(tmp_path: Path) -> None:
    policy = tmp_path / "bad.yaml"
    policy.write_text(POLICY.replace("batch-eval", "Batch Eval"), encoding="utf-8")
    r = runner.invoke(app, ["plan", "--policy", str(policy)])
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {policy}: workloads.(a key of 10 characters): a workload name is")
    assert r.stdout == ""
