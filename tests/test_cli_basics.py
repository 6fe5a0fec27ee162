"""What a new user types first: --version, -h, and help that reads."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from gpuprov.cli import app

runner = CliRunner()


def _commands(group: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    if isinstance(group, TyperGroup):
        for name, sub in sorted(group.commands.items()):
            out += _commands(sub, (*path, name))
    return out


def test_version_is_the_installed_distributions() -> None:
    for flag in ("--version", "-V"):
        r = runner.invoke(app, [flag])
        assert r.exit_code == 0
        assert r.stdout.strip() == f"gpuprov {version('gpuprov')}"


def test_version_from_a_fresh_process() -> None:
    run = subprocess.run([sys.executable, "-m", "gpuprov.cli", "--version"], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == f"gpuprov {version('gpuprov')}"


def test_every_command_takes_h_for_help_and_no_flag_shows_a_type() -> None:
    root = get_command(app)
    paths = _commands(root)
    assert len(paths) > 20  # every command and sub-command, not a handful
    for path in paths:
        long = runner.invoke(app, [*path, "--help"], terminal_width=100)
        short = runner.invoke(app, [*path, "-h"], terminal_width=100)
        assert long.exit_code == 0 and short.exit_code == 0, path
        assert short.stdout == long.stdout, path
        assert "<bool>" not in long.stdout, path
    plan = runner.invoke(app, ["plan", "--help"], terminal_width=100).stdout
    assert "<int>" in plan  # options that take a value still say what kind
