"""Secrets are never printed and never copied into what gpuprov emits.

A password planted in 12 shapes of URL (userinfo with ``/``, ``@``, ``:``, percent-encoding,
``?password=``, a libpq keyword DSN, a URL no parser accepts, a proxy URL...) reaches the
commands as the database URL or the proxy, and the command's every output is grepped for it. An
AWS access key pair planted in a bootstrap file is grepped for in every manifest, unit and
Terraform file the emitters write, and in their output. (Subprocesses, as a user runs them.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprov.secrets import credential_like, mask

BIN = Path(sys.executable).parent / "gpuprov"
PW = "Zq9-secret-pw"
# (the shape, the strings that must appear nowhere)
SHAPES: list[tuple[str, tuple[str, ...]]] = [
    (f"postgresql://u:{PW}@127.0.0.1:1/db", (PW,)),
    (f"postgresql+psycopg://admin:{PW}@127.0.0.1:1/gpuprov", (PW,)),
    (f"postgresql://u:pa/{PW}@127.0.0.1:1/db", (PW, f"pa/{PW}")),  # a / in the password
    (f"postgresql://u:pa@{PW}@127.0.0.1:1/db", (PW,)),  # an @ in the password
    (f"postgresql://u:pa:{PW}@127.0.0.1:1/db", (PW,)),  # a : in the password
    (f"postgresql://u:pa%2F{PW}@127.0.0.1:1/db", (PW,)),  # percent-encoded
    (f"postgresql://u@127.0.0.1:1/db?password={PW}", (PW,)),  # a query parameter
    (f"postgresql://127.0.0.1:1/db?sslmode=disable&password={PW}&x=1", (PW,)),  # not the first one
    (f"host=127.0.0.1 port=1 user=u password={PW} dbname=db", (PW,)),  # a keyword DSN: no URL at all
    (f"postgresql://u:{PW}@[::1/db", (PW,)),  # a broken IPv6 host: urlsplit refuses it
    (f"postgresql://:{PW}@127.0.0.1:1/db", (PW,)),  # no user name
    (f"mysql+pymysql://u:{PW}@127.0.0.1:1/db?charset=utf8", (PW,)),  # another scheme, a driver not installed
]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUPROV_", "AZURE_", "GOOGLE_"))}
    env.update(
        GPUPROV_CONFIG=str(tmp / "none.yaml"),
        GPUPROV_DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite'}",
        HOME=str(tmp),
        COLUMNS="160",
    )
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def test_there_are_twelve_shapes() -> None:
    assert len(SHAPES) == 12 and len({s for s, _ in SHAPES}) == 12


@pytest.mark.parametrize(("url", "planted"), SHAPES, ids=[f"shape{i}" for i in range(len(SHAPES))])
def test_the_mask_hides_a_password_in_every_shape(url: str, planted: tuple[str, ...]) -> None:
    for text in (url, f"cannot use database URL {url!r}: could not parse", f"error: ({url}) and more"):
        shown = mask(text)
        assert not any(p in shown for p in planted), shown
        assert "***" in shown


@pytest.mark.parametrize(("url", "planted"), SHAPES, ids=[f"shape{i}" for i in range(len(SHAPES))])
@pytest.mark.parametrize("command", [["plan", "--gpus", "8", "--type", "a100", "--save"], ["status", "--cached"]])
def test_a_database_url_password_is_in_no_output(
    tmp_path: Path, command: list[str], url: str, planted: tuple[str, ...]
) -> None:
    r = _run(command, _env(tmp_path, GPUPROV_DATABASE_URL=url))
    assert r.returncode in (2, 5), (r.returncode, r.stderr[-500:])
    assert "Traceback" not in r.stdout + r.stderr
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1, r.stderr
    assert not any(p in r.stdout + r.stderr for p in planted), r.stderr


def test_a_proxy_password_is_in_no_output(tmp_path: Path) -> None:
    """An HTTPS proxy with credentials that refuses: the error names the proxy, not its password."""
    from tests.hostile.faults import refused_port

    proxy = f"http://proxyuser:{PW}@127.0.0.1:{refused_port()}"
    env = _env(
        tmp_path,
        AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        HTTPS_PROXY=proxy,
        HTTP_PROXY=proxy,
        NO_PROXY="",
    )
    (tmp_path / "none.yaml").write_text("aws: {regions: [us-east-1]}\n")
    for command in (["status"], ["pricing", "spot-advisor", "refresh"], ["commitments", "discover", "--clouds", "aws"]):
        r = _run(command, env)
        assert r.returncode == 4, r.stderr
        assert PW not in r.stdout + r.stderr and "cannot reach" in r.stderr, r.stderr


KEY_ID = "AKIAZ7QEXAMPLEKEY123"
KEY_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTEDKEY"
BOOTSTRAP = (
    "#!/bin/bash\nset -eu\n"
    f"export AWS_ACCESS_KEY_ID={KEY_ID}\nexport AWS_SECRET_ACCESS_KEY={KEY_SECRET}\n"
    "/etc/eks/bootstrap.sh prod\n"
)


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    (tmp_path / "join.sh").write_text(BOOTSTRAP)
    (tmp_path / "gcp.sh").write_text("#!/bin/bash\necho join\n")
    (tmp_path / "config.yaml").write_text("owner: planted\nbootstrap: {aws: join.sh, gcp: gcp.sh}\n")
    env = _env(tmp_path, GPUPROV_CONFIG=str(tmp_path / "config.yaml"))
    r = _run(["plan", "--policy", "day-night", "--gpus", "16", "--type", "a100", "-o", "json"], env)
    assert r.returncode == 0, r.stderr
    (tmp_path / "plan.json").write_text(r.stdout)
    return tmp_path, env, str(tmp_path / "plan.json")


def _nowhere(text: str) -> None:
    assert KEY_ID not in text and KEY_SECRET not in text and "wJalrXUtnFEMI" not in text


def test_the_bootstrap_file_is_credential_like() -> None:
    assert credential_like(BOOTSTRAP) == "an AWS access key id"
    assert credential_like("#!/bin/bash\n/etc/eks/bootstrap.sh prod --b64-cluster-ca abc\n") is None


def test_a_cronjob_refers_a_credential_holding_bootstrap_to_a_secret(
    planted: tuple[Path, dict[str, str], str],
) -> None:
    import yaml

    _tmp, env, _plan = planted
    r = _run(["rebalance", "--emit", "cronjob", "--image", "ghcr.io/acme/gpuprov:0.1.0", "--allow-sqlite"], env)
    assert r.returncode == 0, r.stderr
    _nowhere(r.stdout + r.stderr)
    docs = list(yaml.safe_load_all(r.stdout.replace("# rebalance.yaml\n", "")))
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    assert sorted(config_map["data"]) == ["bootstrap-gcp.sh", "config.yaml"]  # the clean file is copied
    assert yaml.safe_load(config_map["data"]["config.yaml"])["bootstrap"]["aws"] == (
        "/etc/gpuprov-bootstrap/bootstrap-aws.sh"
    )
    pod = next(d for d in docs if d["kind"] == "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    secret = next(v for v in pod["volumes"] if v["name"] == "bootstrap")["secret"]
    assert secret == {
        "secretName": "gpuprov-bootstrap",
        "items": [{"key": "bootstrap-aws.sh", "path": "bootstrap-aws.sh"}],
    }
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "bootstrap", "mountPath": "/etc/gpuprov-bootstrap", "readOnly": True} in mounts
    assert "kubectl create secret generic gpuprov-bootstrap --from-file=bootstrap-aws.sh=" in r.stderr
    assert "an AWS access key id" in r.stderr


def test_terraform_refuses_a_credential_holding_bootstrap(planted: tuple[Path, dict[str, str], str]) -> None:
    tmp, env, plan = planted
    r = _run(["terraform", plan, "--out", str(tmp / "infra")], env)
    assert r.returncode == 2, r.stderr
    assert "bootstrap.aws holds what looks like an AWS access key id" in r.stderr
    _nowhere(r.stdout + r.stderr)
    assert not (tmp / "infra").exists()


def test_no_other_output_holds_the_planted_key(planted: tuple[Path, dict[str, str], str]) -> None:
    tmp, env, plan = planted
    outputs = [
        _run(["k8s", plan, "--out", str(tmp / "k8s"), "--windows", "cronjob", "--image", "reg/g:1"], env),
        _run(["rebalance", "--emit", "systemd", "--out", str(tmp / "units")], env),
        _run(["status", "--cached", "-o", "json"], env),
        _run(["apply", plan, "--allow-stale"], {**env, "GPUPROV_FAKE_CLOUD": str(tmp / "fake")}),
    ]
    for r in outputs:
        assert r.returncode == 0, r.stderr
        _nowhere(r.stdout + r.stderr)
    written = [p for d in ("k8s", "units") for p in (tmp / d).rglob("*") if p.is_file()]
    assert len(written) >= 5
    for path in written:
        _nowhere(path.read_text())
    assert json.loads(outputs[2].stdout)["instances"] == 0
