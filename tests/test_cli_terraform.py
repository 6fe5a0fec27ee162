"""plan --save, then terraform PLAN_ID --out DIR: files that pass the schema check, a schedule per window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from terraform.schema_check import check_dir

runner = CliRunner()


def _one(block: dict | list) -> dict:  # type: ignore[type-arg]
    """Terraform JSON gives a nested block as an object or a one-element list."""
    return block[0] if isinstance(block, list) else block


def test_saved_day_night_plan_becomes_checked_terraform_for_every_cloud(tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    clouds = {a["cloud"] for a in doc["allocations"]}
    out = tmp_path / "infra"
    r = runner.invoke(app, ["terraform", doc["plan_id"][:8], "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    assert check_dir(out) == []
    names = {p.name for p in out.glob("*.tf.json")}
    assert {f"{c}.tf.json" for c in clouds} <= names
    windows = {w["name"] for w in doc["windows"]}
    per_cloud = {
        "aws": ("aws_autoscaling_schedule", lambda v: {v["scheduled_action_name"]}),
        "gcp": (
            "google_compute_autoscaler",
            lambda v: {s["name"] for s in _one(v["autoscaling_policy"])["scaling_schedules"]},
        ),
        "azure": ("azurerm_monitor_autoscale_setting", lambda v: {p["name"] for p in v["profile"]}),
    }
    for cloud in clouds:
        tf = json.loads((out / f"{cloud}.tf.json").read_text())
        assert doc["plan_id"] in tf["//"]
        kind, names_of = per_cloud[cloud]
        seen: set[str] = set()
        for block in tf["resource"][kind].values():
            seen |= {n for n in names_of(block)}
        assert all(any(w in n for n in seen) for w in windows), (cloud, seen)
    r = runner.invoke(app, ["terraform", "--check", str(out)])
    assert r.exit_code == 0 and "match the provider schemas" in r.stdout


def test_check_reports_a_broken_file(tmp_path: Path) -> None:
    (tmp_path / "main.tf.json").write_text(
        json.dumps({"resource": {"aws_autoscaling_schedule": {"x": {"scheduled_action_name": "a", "bogus": 1}}}})
    )
    r = runner.invoke(app, ["terraform", "--check", str(tmp_path)])
    assert r.exit_code == 2
    assert "bogus" in r.stdout and r.stderr.startswith("error: ")


def test_unknown_plan_id_is_one_line() -> None:
    r = runner.invoke(app, ["terraform", "nosuchplan", "--out", "x"])
    assert r.exit_code == 2 and r.stderr.startswith("error: no saved plan 'nosuchplan'")


def test_the_configs_bootstrap_is_rendered_and_a_bad_one_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    r = runner.invoke(app, ["plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    pid = json.loads(r.stdout)["plan_id"]
    (tmp_path / "join.sh").write_text("#!/bin/sh\necho join\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("bootstrap: {aws: join.sh, gcp: join.sh, azure: join.sh}\n")
    monkeypatch.setenv("GPUPROV_CONFIG", str(cfg))
    out = tmp_path / "infra"
    r = runner.invoke(app, ["terraform", pid, "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    assert check_dir(out) == []
    scripts = []
    for f in out.glob("*.tf.json"):
        for rtype, attr in (
            ("aws_launch_template", "user_data"),
            ("azurerm_linux_virtual_machine_scale_set", "custom_data"),
        ):
            for body in json.loads(f.read_text()).get("resource", {}).get(rtype, {}).values():
                scripts.append(base64.b64decode(body[attr]).decode())
        for body in json.loads(f.read_text()).get("resource", {}).get("google_compute_instance_template", {}).values():
            scripts.append(body["metadata_startup_script"])
    assert scripts and set(scripts) == {"#!/bin/sh\necho join\n"}
    cfg.write_text("bootstrap: {aws: missing.sh}\n")
    r = runner.invoke(app, ["terraform", pid, "--out", str(tmp_path / "new")])
    assert r.exit_code == 2 and "no such file" in r.stderr and r.stderr.startswith("error:")
    assert not (tmp_path / "new").exists()


def test_out_that_is_a_file_or_empty_is_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = runner.invoke(app, ["plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json"])
    pid = json.loads(r.stdout)["plan_id"]
    work = tmp_path / "w"
    work.mkdir()
    (work / "f").write_text("x\n")
    monkeypatch.chdir(work)
    for out, words in (("f", "is a file"), ("f/infra", "cannot write to"), ("", "needs a path"), (" ", "needs")):
        r = runner.invoke(app, ["terraform", pid, "--out", out])
        assert r.exit_code == 2 and r.stderr.startswith("error:") and words in r.stderr, (out, r.stderr)
        assert len(r.stderr.splitlines()) == 1, r.stderr
    assert [p.name for p in work.iterdir()] == ["f"] and (work / "f").read_text() == "x\n"


def test_out_keeps_files_it_did_not_write(tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json"])
    pid = json.loads(r.stdout)["plan_id"]
    out = tmp_path / "infra"
    (out / "keep").mkdir(parents=True)
    (out / "notes.md").write_text("x\n")
    (out / "keep" / "data.db").write_text("y\n")
    r = runner.invoke(app, ["terraform", pid, "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    assert (out / "notes.md").read_text() == "x\n" and (out / "keep" / "data.db").read_text() == "y\n"
