"""gpuprov rebalance through the CLI: --emit manifests, a dry pass, a pass that acts, history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.models import Cloud
from provisioner.drivers.fake import FakeDriver

runner = CliRunner()


def test_emit_cronjob_is_a_kubernetes_cronjob() -> None:
    r = runner.invoke(app, ["rebalance", "--emit", "cronjob", "--every", "15m", "--owner", "prod"])
    assert r.exit_code == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert doc["kind"] == "CronJob" and doc["spec"]["schedule"] == "*/15 * * * *"
    assert doc["spec"]["concurrencyPolicy"] == "Forbid"
    args = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["rebalance", "--once", "--yes"] and "prod" in args


def test_emit_systemd_has_a_service_and_a_timer() -> None:
    r = runner.invoke(app, ["rebalance", "--emit", "systemd", "--every", "1h"])
    assert r.exit_code == 0
    assert "[Service]" in r.stdout and "Type=oneshot" in r.stdout and "rebalance --once --yes" in r.stdout
    assert "[Timer]" in r.stdout and "OnUnitActiveSec=3600s" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rebalance"], "choose one of --once"),
        (["rebalance", "--every", "soon"], "a duration like 15m, 1h or 90s is needed"),
        (["rebalance", "--emit", "helm"], "unknown --emit"),
        (["rebalance", "--emit", "cronjob", "--every", "7m"], "a CronJob needs --every that divides"),
        (["rebalance", "--once", "--yes"], "fleet default follows no plan yet"),
    ],
)
def test_bad_rebalance_input(args: list[str], message: str, fake_clouds: dict[Cloud, FakeDriver]) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_a_dry_pass_changes_nothing_and_a_real_one_follows_the_plan(fake_clouds: dict[Cloud, FakeDriver]) -> None:
    r = runner.invoke(app, ["plan", "--gpus", "16", "--type", "a100-80gb", "--node-gpus", "8", "--save", "-o", "json"])
    plan = json.loads(r.stdout)
    r = runner.invoke(app, ["rebalance", "--once", "--plan", plan["plan_id"], "-o", "json"])
    assert r.exit_code == 0, r.stderr
    dry = json.loads(r.stdout)
    assert dry["decision"].startswith("dry-run") and dry["launched"] == 2
    assert all(d.describe("default") == [] for d in fake_clouds.values())
    r = runner.invoke(app, ["rebalance", "--once", "--yes", "--plan", plan["plan_id"], "-o", "json"])
    assert r.exit_code == 0, r.stderr
    done = json.loads(r.stdout)
    assert done["decision"] == "keep" and done["launched"] == 2
    assert sum(len(d.describe("default")) for d in fake_clouds.values()) == 2
    r = runner.invoke(app, ["rebalance", "--once", "--yes", "-o", "json"])  # the fleet remembers its plan
    assert json.loads(r.stdout)["launched"] == 0
    r = runner.invoke(app, ["rebalance", "history", "-o", "json"])
    history = json.loads(r.stdout)
    assert [h["decision"] for h in history] == ["keep", "keep"]
    assert history[1]["plan_after"] == plan["plan_id"]


def test_the_service_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {
        **os.environ,
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "GPUPROV_FAKE_CLOUD": str(tmp_path / "cloud"),
        "GPUPROV_CONFIG": str(tmp_path / "none.yaml"),
    }
    exe = str(Path(sys.executable).parent / "gpuprov")
    made = subprocess.run(
        [exe, "plan", "--gpus", "8", "--type", "a100-80gb", "--node-gpus", "8", "--save", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    pid = json.loads(made.stdout)["plan_id"]
    service = subprocess.Popen(
        [exe, "rebalance", "--every", "1s", "--yes", "--plan", pid, "-o", "json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen = subprocess.run([exe, "rebalance", "history", "-o", "json"], env=env, capture_output=True, text=True)
        if seen.returncode == 0 and len(json.loads(seen.stdout)) >= 2:
            break
        time.sleep(0.5)
    service.send_signal(signal.SIGTERM)
    out, err = service.communicate(timeout=60)
    assert service.returncode == 0, err
    assert "stopped: SIGTERM received" in out
    history = json.loads(
        subprocess.run(
            [exe, "rebalance", "history", "-o", "json"], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    assert len(history) >= 2 and {h["decision"] for h in history} == {"keep"}
