"""Long work shows one line of progress on a terminal and nothing on a pipe."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from gpuprov.progress import Line


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_line_on_a_terminal_is_rewritten_and_cleared_and_a_pipe_gets_nothing() -> None:
    tty = Tty()
    line = Line(tty, rate=1e9)
    line.update("step 1")
    line.update("step 2")
    line.close()
    assert tty.getvalue() == "\r\x1b[Kstep 1\r\x1b[Kstep 2\r\x1b[K"
    pipe = io.StringIO()
    quiet = Line(pipe)
    quiet.update("step 1", force=True)
    quiet.close()
    assert pipe.getvalue() == ""


def _gpuprov(env: dict[str, str], *args: str, tty: bool) -> tuple[int, str, str]:
    exe = str(Path(sys.executable).parent / "gpuprov")
    if not tty:
        r = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=600)
        return r.returncode, r.stdout, r.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen([exe, *args], env=env, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait(timeout=600)
    os.close(master)
    return proc.returncode, out, err.decode(errors="replace")


def test_apply_counts_its_launches_on_a_terminal_only(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "GPUPROV_FAKE_CLOUD": str(tmp_path / "cloud"),
        "GPUPROV_CONFIG": str(tmp_path / "none.yaml"),
    }
    code, out, err = _gpuprov(
        env,
        "plan",
        "--gpus",
        "16",
        "--type",
        "a100",
        "--clouds",
        "azure",
        "--markets",
        "on_demand",
        "--save",
        "-o",
        "json",
        tty=False,
    )
    assert code == 0, err
    import json

    pid = json.loads(out)["plan_id"]
    code, out, err = _gpuprov(env, "apply", pid, "--yes", "--allow-stale", tty=True)
    assert code == 0, err
    assert "\r\x1b[K" in err and " launched, 0 terminated" in err
    assert err.rstrip("\r\n").endswith("\x1b[K")  # cleared before the report
    code, out, err = _gpuprov(env, "destroy", "--yes", tty=False)
    assert code == 0, err
    code, out, err = _gpuprov(env, "apply", pid, "--yes", "--allow-stale", tty=False)
    assert code == 0 and "\r" not in err and "launched," not in err
