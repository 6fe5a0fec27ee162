"""The container image: the Dockerfile's build context (the checkout less .dockerignore) builds the
wheel, and that wheel, installed into a fresh virtual environment, runs ``gpuprov``.

There is no Docker engine here, so the test does what the Dockerfile's build stage does with
exactly what it would be sent: the context is computed from .dockerignore as Docker reads it, the
wheel is built from a copy of it, installed with ``--no-index`` beside nothing but its dependencies
(taken from this environment, so nothing is downloaded), and run from outside the checkout.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def dockerignore(root: Path) -> list[tuple[bool, str]]:
    """(exception, pattern) per line, as Docker reads .dockerignore: '#' comments, '!' exceptions,
    patterns relative to the context root ('/' stripped), '**' for any number of directories."""
    out = []
    for line in (root / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        out.append((neg, os.path.normpath(pattern)))
    return out


def _matches(path: str, pattern: str) -> bool:
    if "**" in pattern:
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        return re.fullmatch(regex, path) is not None
    return fnmatch.fnmatchcase(path, pattern) and path.count("/") == pattern.count("/")


def excluded(path: str, rules: list[tuple[bool, str]]) -> bool:
    """The last matching rule wins; a path is excluded when it or one of its parent directories is."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for neg, pattern in rules:
        if any(_matches(p, pattern) for p in prefixes):
            verdict = not neg
    return verdict


def build_context(root: Path, dest: Path) -> list[str]:
    rules = dockerignore(root)
    copied = []
    for folder, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(folder, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        dirs[:] = [d for d in dirs if not excluded(os.path.join(rel_dir, d), rules)]
        for f in files:
            rel = os.path.join(rel_dir, f)
            if excluded(rel, rules):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, target)
            copied.append(rel)
    return copied


def stages(dockerfile: str) -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), split by FROM."""
    text = re.sub(r"\\\n", " ", dockerfile)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    out: list[list[str]] = [[]]
    for ln in lines:
        if ln.upper().startswith("FROM "):
            out.append([])
        out[-1].append(ln)
    return out  # out[0]: the ARGs before the first FROM


def test_dockerfile_builds_from_its_whole_context_and_runs_unprivileged() -> None:
    pre, *built = stages((ROOT / "Dockerfile").read_text())
    assert len(built) == 2, "a build stage and a run stage"
    build, run = built
    base = next(a for a in pre if a.startswith("ARG PYTHON_IMAGE="))
    image = base.split("=", 1)[1]
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", image), image  # exact tag
    assert all(i.split()[1] == "${PYTHON_IMAGE}" for i in (build[0], run[0]))
    assert "COPY . ." in build  # the context as sent, so .dockerignore alone decides what goes in
    assert any(i.startswith("RUN pip wheel --wheel-dir /wheels") for i in build)
    assert not any(i.startswith(("COPY", "ADD")) for i in run)  # no source tree in the image
    install = next(i for i in run if i.startswith("RUN"))
    assert "--no-index --find-links=/wheels" in install and "from=build" in install
    assert not re.search(r"apt-get|gcc|build-essential", " ".join(run))
    user = next(i for i in reversed(run) if i.startswith("USER "))
    assert user.split()[1].split(":")[0] not in ("0", "root")
    assert run.index(user) > max(k for k, i in enumerate(run) if i.startswith("RUN "))  # nothing runs as root after
    assert "ARG EXTRAS=aws,postgres" in build and "ARG EXTRAS=aws,postgres" in run  # the extras asked for, both stages
    assert '"gpuprov[${EXTRAS}]"' in install and '".[${EXTRAS}]"' in next(i for i in build if "pip wheel" in i)
    assert run[-2:] == ['ENTRYPOINT ["gpuprov"]', 'CMD ["--help"]']


def test_the_context_holds_every_packaged_directory_and_nothing_else_we_know(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    copied = build_context(ROOT, ctx)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in project["tool"]["setuptools"]["packages"]:
        assert (ctx / package.replace(".", "/") / "__init__.py").is_file(), package
    assert "README.md" in copied and "pyproject.toml" in copied
    assert not any(p.startswith(("tests/", "benchmarks/", ".git/", ".venv/", "data/")) for p in copied)


def test_the_wheel_from_the_context_installs_and_plans(tmp_path: Path) -> None:
    ctx, wheels, venv = tmp_path / "ctx", tmp_path / "wheels", tmp_path / "venv"
    build_context(ROOT, ctx)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ctx)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [wheel] = wheels.glob("gpuprov-*-py3-none-any.whl")
    assert "gpuprov/commands/plan.py" in zipfile.ZipFile(wheel).namelist()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # the dependencies come from this environment (nothing is downloaded); gpuprov itself only from
    # the wheel: this environment's editable install is a .pth hook, which a plain path entry never runs
    Path(site, "deps-from-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp_path / 'image.db'}",
    }
    where = subprocess.run(
        [str(py), "-c", "import gpuprov; print(gpuprov.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip().startswith(site), where.stdout  # the installed wheel, not the checkout
    version = subprocess.run(
        [str(venv / "bin" / "gpuprov"), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert version.returncode == 0 and version.stdout.strip() == f"gpuprov {_version()}", version
    plan = subprocess.run(
        [str(venv / "bin" / "gpuprov"), "plan", "--gpus", "8", "--type", "a100"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plan.returncode == 0, plan.stderr
    assert "plan " in plan.stdout and "hourly cost, billed" in plan.stdout


def _version() -> str:
    text = (ROOT / "gpuprov" / "__init__.py").read_text()
    found = re.search(r'__version__ = "([^"]+)"', text)
    assert found
    return found.group(1)
