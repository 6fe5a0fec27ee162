"""The README is a test: every command of its shell blocks runs, in order, as a new user would
type it, and what it quotes of their output is what they print.

How the README's blocks are read (the conventions are the README's own, see its "The README
is a test" note):

- ```` ```bash ```` blocks: every logical line (``\\`` continues one) is a command, run in one
  bash session in a scratch directory that is the user's home, so ``cd``/``export`` and the
  files one command writes carry over to the next. A command must exit 0 unless its comment says
  otherwise:
    - ``exits N``: it must exit N (the README shows a refusal);
    - ``needs: network`` (a live price API) or ``needs: cluster`` (a Kubernetes API): it is run
      with the network refused (every proxy variable points at a closed port on this machine,
      and no kubeconfig exists) and must fail within 60 s with one ``error:`` line (and at most
      a ``hint:`` line), no traceback;
    - ``needs: docker``: not a gpuprov command and there is no Docker engine here; not run;
    - ``stops on SIGTERM``: a service; it is sent SIGTERM after its first pass and must stop
      with exit 0.
- ```` ```bash setup ```` (the Quick start's install-and-run line): only its ``gpuprov`` part
  runs (the package is installed already); ```` ```bash ci ```` (the test command) is not run
  here but must be exactly what ``.ci/run`` runs.
- ```` ```text ```` right after a bash block: what that block prints; each of its lines (spaces
  collapsed) must appear in the block's output, so a figure the README quotes is a figure the
  command printed.
- ```` ```yaml file=NAME ```` / ```` ```csv file=NAME ````: written to NAME (``~`` is the home)
  before the next command runs: the README's config, policy and forecast files are the ones used.

The clouds are fakes on this machine: AWS is a ``moto_server`` on loopback (the real AWS driver
talks to it: ``AWS_ENDPOINT_URL`` and test credentials are set in the environment, as a user's
credentials would be); GCP and Azure are not configured, so nothing asks them. The committed
history fixtures are in the home as ``changes.csv`` and ``p5.csv``, and a SkyPilot catalog file
as ``vms.csv``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
BIN = Path(sys.executable).parent
FILES = {  # what the README's commands read, from the repository
    "changes.csv": ROOT / "tests" / "fixtures" / "history" / "anycloud-gcp-azure-gpu-price-history.csv",
    "p5.csv": ROOT / "tests" / "fixtures" / "history" / "aws-p5-48xlarge-us-east-1-daily-price.csv",
    "vms.csv": ROOT / "data" / "sources" / "aws" / "skypilot-v8-vms-gpu-subset.csv",
    "focus.csv": ROOT / "tests" / "fixtures" / "billing" / "focus_1.0_sample_1000rows.csv",
}
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once


@dataclass
class Block:
    lang: str
    info: str
    line: int  # of the opening fence, 1-based
    body: list[str]


@dataclass
class Command:
    text: str  # as the README writes it, continuation lines joined
    line: int
    block: int  # index of its bash block
    expect: int = 0
    needs: str | None = None
    service: bool = False
    setup: bool = False


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float


@dataclass
class Run:
    commands: list[Command]
    results: dict[int, Result] = field(default_factory=dict)  # by command index
    outputs: dict[int, str] = field(default_factory=dict)  # by bash block index: all it printed


def blocks(text: str) -> list[Block]:
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*(.*)$", lines[i])
        if m and m.group(1):
            start, body = i, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append(Block(m.group(1), m.group(2).strip(), start + 1, body))
        i += 1
    return out


def _comment(line: str) -> tuple[str, str]:
    """A command and its trailing comment (a '#' outside quotes, after a space)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip(), line[k + 1 :].strip()
    return line, ""


def commands(all_blocks: list[Block]) -> list[Command]:
    out = []
    for b_index, b in enumerate(all_blocks):
        if b.lang != "bash" or b.info == "ci":
            continue
        joined: list[tuple[int, str]] = []
        pending = ""
        first = 0
        for k, raw in enumerate(b.body):
            line = raw.rstrip()
            if not pending:
                first = b.line + 1 + k
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            joined.append((first, pending + line))
            pending = ""
        for where, line in joined:
            text, comment = _comment(line)
            if not text.strip():
                continue
            cmd = Command(text.strip(), where, b_index, setup=b.info == "setup")
            m = re.search(r"\bexits (\d+)\b", comment)
            if m:
                cmd.expect = int(m.group(1))
            m = re.search(r"\bneeds: (network|cluster|docker)\b", comment)
            if m:
                cmd.needs = m.group(1)
            cmd.service = "stops on SIGTERM" in comment
            if cmd.setup:
                cmd.text = cmd.text.split("&&")[-1].strip().removeprefix(".venv/bin/")
            out.append(cmd)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("moto_server did not start")
    yield f"http://127.0.0.1:{port}"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def _environment(home: Path, moto: str) -> dict[str, str]:
    env = {
        "HOME": str(home),
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "COLUMNS": "160",
        "AWS_ENDPOINT_URL": moto,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for name in ("TMPDIR", "GPUPROV_TEST_POSTGRES_URL"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _refused(env: dict[str, str]) -> dict[str, str]:
    off = dict(env)
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        off[name] = CLOSED
    off.pop("AWS_ENDPOINT_URL", None)
    off["NO_PROXY"] = off["no_proxy"] = ""
    off["KUBECONFIG"] = str(Path(env["HOME"]) / "no-kubeconfig")
    return off


def _write_file(home: Path, b: Block) -> None:
    m = re.search(r"\bfile=(\S+)", b.info)
    if not m:
        return
    target = Path(m.group(1).replace("~", str(home), 1))
    if not target.is_absolute():
        target = home / target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(b.body) + "\n")


def _run_one(cmd: Command, env: dict[str, str], home: Path, cwd: Path) -> tuple[Result, Path]:
    """One command in bash, from ``cwd``; returns its result and the directory it ended in (a
    ``cd`` carries over). Environment changes (``export``) are carried by re-reading ``env -0``."""
    state = home / ".readme-state"
    here = f"cd {shlex.quote(str(cwd))} || exit 97\n"
    script = f"{here}{cmd.text}\nrc=$?\npwd > {state}.pwd\nenv -0 > {state}.env\nexit $rc\n"
    if cmd.service:  # the service itself gets the SIGTERM, not a shell around it
        script = f"{here}exec {cmd.text}\n"
    run_env = _refused(env) if cmd.needs in ("network", "cluster") else env
    start = time.monotonic()
    if cmd.service:
        proc = subprocess.Popen(
            ["bash", "-c", script],
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        time.sleep(15)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        return Result(proc.returncode, out, err, time.monotonic() - start), cwd
    timeout = 60 if cmd.needs else 900
    try:
        done = subprocess.run(["bash", "-c", script], env=run_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return Result(-9, str(exc.stdout or ""), f"no answer within {timeout} s", time.monotonic() - start), cwd
    new_cwd = Path(Path(f"{state}.pwd").read_text().strip() if Path(f"{state}.pwd").exists() else str(cwd))
    if Path(f"{state}.env").exists() and cmd.needs is None:
        for item in Path(f"{state}.env").read_bytes().split(b"\0"):
            name, sep, value = item.decode(errors="replace").partition("=")
            if sep and name not in ("PWD", "OLDPWD", "SHLVL", "_") and env.get(name) != value:
                env[name] = value
    return Result(done.returncode, done.stdout, done.stderr, time.monotonic() - start), new_cwd


@pytest.fixture(scope="module")
def run(moto: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    home = tmp_path_factory.mktemp("readme-home")
    for name, source in FILES.items():
        shutil.copyfile(source, home / name)
    env = _environment(home, moto)
    all_blocks = blocks(README.read_text())
    cmds = commands(all_blocks)
    result = Run(cmds)
    cwd = home
    by_block: dict[int, list[int]] = {}
    for k, c in enumerate(cmds):
        by_block.setdefault(c.block, []).append(k)
    written: set[int] = set()
    for b_index, b in enumerate(all_blocks):
        if b.lang in ("yaml", "csv", "json") and "file=" in b.info:
            _write_file(home, b)
            written.add(b_index)
            continue
        for k in by_block.get(b_index, []):
            c = cmds[k]
            if c.needs == "docker":
                continue
            result.results[k], cwd = _run_one(c, env, home, cwd)
        if b_index in by_block:
            result.outputs[b_index] = "\n".join(
                result.results[k].out + result.results[k].err for k in by_block[b_index] if k in result.results
            )
    dump = os.environ.get("GPUPROV_README_DUMP")  # to see what each block prints, when writing the README
    if dump:
        Path(dump).mkdir(parents=True, exist_ok=True)
        for b_index, text in result.outputs.items():
            Path(dump, f"block-{all_blocks[b_index].line}.txt").write_text(text)
    return result


def _ids() -> list[str]:
    return [f"line{c.line}:{c.text[:50]}" for c in commands(blocks(README.read_text()))]


@pytest.mark.parametrize("k", range(len(_ids())), ids=_ids())
def test_every_readme_command_runs_as_written(run: Run, k: int) -> None:
    c = run.commands[k]
    if c.needs == "docker":
        assert c.text.startswith("docker "), f"README line {c.line}: only docker commands may be skipped"
        return
    r = run.results[k]
    where = f"README line {c.line}: {c.text}"
    assert "Traceback" not in r.err, f"{where}\n{r.err[-2000:]}"
    if c.needs in ("network", "cluster"):
        lines = [ln for ln in r.err.splitlines() if ln.strip() and not ln.startswith("warning: ")]
        assert r.code not in (0, -9), f"{where}: offline, it should fail, not exit {r.code}\n{r.err}"
        assert lines and lines[0].startswith("error: "), f"{where}\n{r.err}"
        assert len(lines) <= 2 and all(ln.startswith(("error: ", "hint: ")) for ln in lines), f"{where}\n{r.err}"
        return
    assert r.code == c.expect, f"{where}: exit {r.code}, expected {c.expect}\n{r.out[-1500:]}\n{r.err[-1500:]}"


def _collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_every_output_the_readme_quotes_is_what_the_command_prints(run: Run) -> None:
    all_blocks = blocks(README.read_text())
    checked = 0
    for b_index, b in enumerate(all_blocks):
        if b.lang != "text" or b_index == 0 or all_blocks[b_index - 1].lang != "bash":
            continue
        printed = _collapse(run.outputs.get(b_index - 1, ""))
        for line in b.body:
            if line.strip():
                assert _collapse(line) in printed, f"README line {b.line}: {line!r} is not what the block above prints"
                checked += 1
    assert checked >= 10  # the README quotes real output, more than a token line or two


def test_the_test_command_is_what_ci_runs() -> None:
    [ci] = [b for b in blocks(README.read_text()) if b.lang == "bash" and b.info == "ci"]
    command = " ".join(line.strip() for line in ci.body if line.strip())
    last = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()][-1]
    assert last == command
