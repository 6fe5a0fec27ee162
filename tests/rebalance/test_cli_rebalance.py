"""gpuprov rebalance through the CLI: --emit manifests, a dry pass, a pass that acts, history."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.models import Cloud
from provisioner.drivers.fake import FakeDriver

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


IMAGE = "ghcr.io/acme/gpuprov:0.2.0"


def emitted(*args: str, env: dict[str, str] | None = None) -> list[dict[str, object]]:
    r = runner.invoke(app, ["rebalance", "--emit", "cronjob", *args], env=env)
    assert r.exit_code == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def test_emit_cronjob_is_deployable_as_emitted(tmp_path: Path) -> None:
    from k8s.check import problems

    config = tmp_path / "config.yaml"
    config.write_text("owner: prod\naws: {image: ami-0123, regions: [us-east-1]}\n")
    env = {"GPUPROV_DATABASE_URL": "postgresql+psycopg://u:pw@db/gpuprov", "GPUPROV_CONFIG": str(config)}
    docs = emitted(
        "--every",
        "15m",
        "--owner",
        "prod",
        "--image",
        IMAGE,
        "--min-saving",
        "20",
        "--hysteresis",
        "3h",
        "--service-account-annotation",
        "eks.amazonaws.com/role-arn=arn:aws:iam::123456789012:role/gpuprov",
        env=env,
    )
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ServiceAccount", "ConfigMap", "CronJob"}
    assert all(problems(d) == [] for d in docs), [problems(d) for d in docs]
    cron = kinds["CronJob"]["spec"]
    assert cron["schedule"] == "*/15 * * * *" and cron["concurrencyPolicy"] == "Forbid"
    job = cron["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] == 1800
    pod = job["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == IMAGE and pod["serviceAccountName"] == kinds["ServiceAccount"]["metadata"]["name"]
    args = c["args"]
    assert args[:3] == ["rebalance", "--once", "--yes"] and "prod" in args
    assert args[args.index("--min-saving") + 1] == "20" and args[args.index("--hysteresis") + 1] == "3h"
    assert c["securityContext"]["runAsNonRoot"] and c["securityContext"]["readOnlyRootFilesystem"]
    assert not c["securityContext"]["allowPrivilegeEscalation"]
    assert "aws:" in kinds["ConfigMap"]["data"]["config.yaml"]
    assert kinds["ServiceAccount"]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith("role/gpuprov")


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {}, "needs --image"),
        (["--image", "ghcr.io/acme/gpuprov"], {}, "pinned by a tag"),
        (["--image", "ghcr.io/acme/gpuprov:latest"], {}, "pinned by a tag"),
        (["--image", "localhost:5000/gpuprov"], {}, "pinned by a tag"),
        (["--image", "localhost:5000/gpuprov:latest"], {}, "pinned by a tag"),
        (["--image", "localhost:5000/gpuprov:0.1;id"], {}, "pinned by a tag"),
        (["--image", "localhost:5000/gpuprov:$(id)"], {}, "pinned by a tag"),
        (["--image", "Registry:5000/Acme/gpuprov:0.1"], {}, "pinned by a tag"),
        (["--image", IMAGE], {"GPUPROV_DATABASE_URL": "sqlite:////tmp/x.db"}, "need PostgreSQL"),
        (["--image", IMAGE, "--owner", "prod\nnamespace: kube-system"], {}, "not a valid fleet name"),
        (["--image", IMAGE, "--service-account-annotation", "nokey"], {}, "is not KEY=VALUE"),
    ],
)
def test_emit_cronjob_refuses(args: list[str], env: dict[str, str], message: str) -> None:
    env = {"GPUPROV_DATABASE_URL": "postgresql+psycopg://u:pw@db/x", **env}
    r = runner.invoke(app, ["rebalance", "--emit", "cronjob", *args], env=env)
    assert r.exit_code == 2 and message in r.stderr, r.stderr


def test_emit_cronjob_refuses_a_config_with_a_secret(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "azure: {subscription_id: s, resource_group: g}\nlimits: {budget_per_hour: 5}\ngcp: {project: p}\n"
    )
    (tmp_path / "bad.yaml").write_text("owner: x\ndiscounts: {aws: 0.9}\naws: {image: ami}\nclient_secret: hunter2\n")
    env = {"GPUPROV_DATABASE_URL": "postgresql+psycopg://u:pw@db/x", "GPUPROV_CONFIG": str(config)}
    assert runner.invoke(app, ["rebalance", "--emit", "cronjob", "--image", IMAGE], env=env).exit_code == 0
    from gpuprov import emit
    from gpuprov.errors import UsageError

    with pytest.raises(UsageError, match="looks like a secret"):
        emit.check_config((tmp_path / "bad.yaml").read_text(), "bad.yaml")


def test_emit_systemd_writes_hardened_units_and_a_private_environment_file(tmp_path: Path) -> None:
    out = tmp_path / "units"
    env = {"GPUPROV_DATABASE_URL": "postgresql+psycopg://u:s3cret@db/x"}
    r = runner.invoke(
        app, ["rebalance", "--emit", "systemd", "--every", "1h", "--out", str(out), "--user", "ops"], env=env
    )
    assert r.exit_code == 0, r.stderr
    assert "s3cret" not in r.stdout + r.stderr
    service = next(out.glob("*.service")).read_text()
    timer = next(out.glob("*.timer")).read_text()
    for line in (
        "User=ops",
        "TimeoutStartSec=1800",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        f"EnvironmentFile={out.resolve() / 'gpuprov.env'}",
    ):
        assert line in service, line
    assert "EnvironmentFile=-" not in service  # required, not optional
    assert "OnUnitActiveSec=3600s" in timer
    exe = service.split("ExecStart=")[1].split()[0]
    assert Path(exe).name == "gpuprov" and Path(exe).parent == Path(sys.executable).parent
    env_file = out / "gpuprov.env"
    assert env_file.stat().st_mode & 0o777 == 0o600 and "s3cret" in env_file.read_text()
    verify = shutil.which("systemd-analyze")
    if verify:
        done = subprocess.run(
            [verify, "verify", *map(str, out.glob("*.service")), *map(str, out.glob("*.timer"))],
            capture_output=True,
            text=True,
            timeout=60,
        )
        bad = [
            line
            for line in done.stderr.splitlines()
            if "gpuprov-rebalance" in line and "does not exist" not in line and "Unknown user" not in line
        ]
        assert bad == [], done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rebalance"], "choose one of --once"),
        (["rebalance", "--every", "soon"], "a duration like 15m, 1h or 90s is needed"),
        (["rebalance", "--emit", "helm"], "unknown --emit"),
        (
            ["rebalance", "--emit", "cronjob", "--every", "7m", "--allow-sqlite", "--image", "x/y:1"],
            "a CronJob needs --every that divides",
        ),
        (["rebalance", "--once", "--yes"], "fleet default follows no plan yet"),
    ],
)
def test_bad_rebalance_input(args: list[str], message: str, fake_clouds: dict[Cloud, FakeDriver]) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_a_dry_pass_changes_nothing_and_a_real_one_follows_the_plan(
    fake_clouds: dict[Cloud, FakeDriver], monkeypatch: pytest.MonkeyPatch
) -> None:
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
    r = runner.invoke(app, ["rebalance", "health", "--max-age", "10m"])  # the service's probe
    assert r.exit_code == 0 and "healthy" in r.stdout, r.stderr
    from datetime import timedelta

    from gpuprov.commands import common

    later = common.now() + timedelta(minutes=31)
    monkeypatch.setattr(common, "now", lambda: later)
    r = runner.invoke(app, ["rebalance", "health", "--max-age", "30m"])
    assert r.exit_code == 4 and "31 min ago" in r.stderr and "more than --max-age 30m" in r.stderr
    r = runner.invoke(app, ["rebalance", "health", "--owner", "another", "--max-age", "10m"])
    assert r.exit_code == 4 and "no rebalancing pass recorded" in r.stderr


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


def test_the_configs_bootstrap_files_travel_in_the_configmap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov import config as config_module
    from k8s.check import problems

    (tmp_path / "boot").mkdir()
    (tmp_path / "boot" / "join.sh").write_text("#!/bin/sh\necho '${x}'\n")
    config = tmp_path / "config.yaml"
    config.write_text("owner: prod\nbootstrap: {aws: boot/join.sh, kubelet: true}\n")
    env = {"GPUPROV_DATABASE_URL": "postgresql+psycopg://u:pw@db/gpuprov", "GPUPROV_CONFIG": str(config)}
    docs = emitted("--every", "15m", "--owner", "prod", "--image", IMAGE, env=env)
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    assert problems(cm) == []
    assert sorted(cm["data"]) == ["bootstrap-aws.sh", "config.yaml"]
    assert cm["data"]["bootstrap-aws.sh"] == "#!/bin/sh\necho '${x}'\n"
    # as the pod mounts it (/etc/gpuprov): the config loads, its bootstrap read from beside it
    mount = tmp_path / "mount"
    mount.mkdir()
    for key, text in cm["data"].items():
        (mount / key).write_text(text)
    monkeypatch.setenv("GPUPROV_CONFIG", str(mount / "config.yaml"))
    loaded = config_module.load()
    assert loaded.bootstrap.scripts == {"aws": "#!/bin/sh\necho '${x}'\n"} and loaded.bootstrap.kubelet


@pytest.mark.parametrize(
    "image",
    [
        "localhost:5000/gpuprov:0.1",
        "registry.example.com:5000/acme/gpuprov:0.1",
        "10.0.0.7:5000/ml/gpu_prov__x:v0.1-rc.1",
        "localhost:5000/gpuprov@sha256:" + "0" * 64,
        "registry.example.com:5000/acme/gpuprov:0.1@sha256:" + "a" * 64,
    ],
)
def test_emit_cronjob_takes_a_registry_with_a_port(image: str) -> None:
    docs = emitted("--image", image, env={"GPUPROV_DATABASE_URL": "postgresql+psycopg://u:pw@db/x"})
    cron = next(d for d in docs if d["kind"] == "CronJob")
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"] == image  # type: ignore[index]
