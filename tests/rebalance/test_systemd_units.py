"""``rebalance --emit systemd``: the units can write the SQLite database under their own sandbox
and run with the emitting user's config.

The units are read back as systemd reads them (``systemd.syntax``: sections, ``Key=value``,
quoted words; ``EnvironmentFile`` lines with double quotes and backslash escapes), and the
sandbox is evaluated by its documented rules: with ``ProtectSystem=strict`` the whole file
system is read-only but for /dev, /proc, /sys (and the private /tmp) and what
``ReadWritePaths=``, ``StateDirectory=`` and friends name; ``ProtectHome=read-only`` makes
/home, /root and /run/user read-only too. ``systemd-analyze verify`` checks the files as well
where it is installed (Debian's systemd package).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "gpuprov"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            out.setdefault(section, {})
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not Key=value: {raw!r}"
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


def parse_env_file(text: str) -> dict[str, str]:
    """EnvironmentFile lines: KEY=value, the value maybe double-quoted with \\\\ \\" \\` \\$ escapes."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if value.startswith('"') and value.endswith('"'):
            body, i, chars = value[1:-1], 0, []
            while i < len(body):
                if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in '\\"`$':
                    chars.append(body[i + 1])
                    i += 2
                else:
                    chars.append(body[i])
                    i += 1
            value = "".join(chars)
        out[key] = value
    return out


def writable(service: dict[str, list[str]], path: Path) -> bool:
    """Whether the service may write ``path`` under its sandbox (the rules in the docstring)."""
    target = str(path)
    allowed = [p for v in service.get("ReadWritePaths", []) for p in shlex.split(v)]
    allowed += [f"/var/lib/{d}" for v in service.get("StateDirectory", []) for d in v.split()]
    if any(target == a or target.startswith(a.rstrip("/") + "/") for a in allowed):
        return True
    if service.get("PrivateTmp", ["no"])[-1] == "yes" and target.startswith(("/tmp/", "/var/tmp/")):
        return False  # its /tmp is its own: the host's /tmp/x is not there
    if service.get("ProtectSystem", ["no"])[-1] == "strict":
        return any(target.startswith(p) for p in ("/dev/", "/proc/", "/sys/"))
    if service.get("ProtectHome", ["no"])[-1] in ("yes", "read-only", "tmpfs"):
        return not any(target.startswith(p) for p in ("/home/", "/root/", "/run/user/"))
    return True


@pytest.fixture
def units(tmp_path: Path) -> tuple[Path, Path, Path]:
    data = Path("/home/alice-gpuprov-test/.local/share/gpuprov")  # the database need not exist to emit
    config = tmp_path / "gpuprov.yaml"
    config.write_text("owner: research\n")
    out = tmp_path / "units"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")},
        "GPUPROV_CONFIG": str(config),
        "GPUPROV_DATABASE_URL": f"sqlite:///{data / 'gpuprov.db'}",
    }
    r = subprocess.run(
        [str(BIN), "rebalance", "--emit", "systemd", "--every", "15m", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "must be able to write" in r.stderr
    return out, data / "gpuprov.db", config


def test_the_service_can_write_the_sqlite_database_under_its_sandbox(units: tuple[Path, Path, Path]) -> None:
    out, db, _config = units
    service = parse_unit((out / "gpuprov-rebalance-research.service").read_text())["Service"]
    assert service["ProtectSystem"] == ["strict"] and service["ProtectHome"] == ["read-only"]  # hardening kept
    assert writable(service, db) and writable(service, db.with_name("gpuprov.db-journal"))
    assert not writable(service, db.parent.parent / "other.db")  # only the database's directory
    assert not writable(service, Path("/etc/gpuprov.db")) and not writable(service, Path("/tmp/x.db"))
    # the units of before (no ReadWritePaths) could not: the check is not vacuous
    assert not writable({k: v for k, v in service.items() if k != "ReadWritePaths"}, db)


def test_the_environment_file_names_the_database_and_the_config(units: tuple[Path, Path, Path]) -> None:
    out, db, config = units
    service = parse_unit((out / "gpuprov-rebalance-research.service").read_text())["Service"]
    env_file = Path(shlex.split(service["EnvironmentFile"][0])[0])
    assert env_file == (out / "gpuprov.env").resolve()
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    env = parse_env_file(env_file.read_text())
    assert env == {"GPUPROV_DATABASE_URL": f"sqlite:///{db.resolve()}", "GPUPROV_CONFIG": str(config.resolve())}
    exec_start = shlex.split(service["ExecStart"][0])
    assert exec_start[1:6] == ["rebalance", "--once", "--yes", "--owner", "research"]


def test_a_value_with_quotes_and_dollars_reads_back_from_the_environment_file() -> None:
    from gpuprov.emit import env_value

    tricky = 'postgresql://u:p$HOME"x\\y`z@h/db'
    assert parse_env_file(f"K={env_value(tricky)}") == {"K": tricky}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_units(units: tuple[Path, Path, Path]) -> None:
    out, _db, _config = units
    r = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            *sorted(str(p) for p in out.glob("*.service")),
            *sorted(str(p) for p in out.glob("*.timer")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "Unknown key" not in r.stderr and "Invalid" not in r.stderr, r.stderr


def test_a_database_under_tmp_is_warned_about(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "GPUPROV_CONFIG": "/nonexistent",
    }
    r = subprocess.run(
        [str(BIN), "rebalance", "--emit", "systemd", "--out", str(tmp_path / "u")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "warning: the units run with PrivateTmp=yes" in r.stderr, r.stderr
