"""The plan's charts: per-workload GPUs by market, held-but-idle reservations, day names on a week,
and the terminal chart's window labels; figures checked against the plan's own JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpuprov import chart, render
from gpuprov.cli import app
from gpuprov.plandoc import from_json

runner = CliRunner()


def plan(*args: str) -> tuple[dict, Any]:
    r = runner.invoke(app, ["plan", *args, "--output", "json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), from_json(r.stdout)


def test_series_split_by_workload_with_idle_reserved_from_the_json() -> None:
    raw, doc = plan("--policy", "day-night", "--gpus", "64", "--type", "a100")
    T = raw["horizon_hours"]
    got = chart.series(doc)
    for w in raw["request"]["demand"]:
        for t in range(T):
            expect = sum(
                a["instances_by_slot"][t] * a["gpus_per_instance"] for a in raw["allocations"] if a["workload"] == w
            ) + sum(r["gpus_used_by_slot"].get(w, [0] * T)[t] for r in raw["reservations"])
            assert sum(v[t] for v in got[w].values()) == expect
            assert expect >= raw["request"]["demand"][w][t]  # the plan covers what the chart draws as demand
    idle = [
        sum(
            r["instances"] * r["gpus_per_instance"] - sum(u[t] for u in r["gpus_used_by_slot"].values())
            for r in raw["reservations"]
        )
        for t in range(T)
    ]
    assert render.idle_reserved(doc) == idle
    if any(idle):
        assert got[chart.IDLE]["reserved"] == idle


def test_the_png_is_written_with_a_panel_per_workload(tmp_path: Path) -> None:
    png = tmp_path / "c.png"
    r = runner.invoke(
        app, ["plan", "--policy", "weekday-weekend", "--gpus", "64", "--type", "h100", "--chart", str(png)]
    )
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _raw, doc = plan("--policy", "weekday-weekend", "--gpus", "64", "--type", "h100")
    ticks, labels = chart._ticks(doc)
    assert ticks[:7] == [0, 24, 48, 72, 96, 120, 144] and labels[:7] == [
        "Mon",
        "Tue",
        "Wed",
        "Thu",
        "Fri",
        "Sat",
        "Sun",
    ]


def test_the_weekend_run_ends_on_monday() -> None:
    _raw, doc = plan("--policy", "weekday-weekend", "--gpus", "64", "--type", "h100")
    # Friday 20:00 is slot 4 * 24 + 20; the week ends at slot 168 = Monday 00:00
    assert render.slot_label(doc, 4 * 24 + 20, 167) == "Fri 20:00–Mon 00:00"
    assert render.slot_label(doc, 0, 7) == "Mon 00:00–Mon 08:00"
    assert render.slot_label(doc, 20, 31) == "Mon 20:00–Tue 08:00"
