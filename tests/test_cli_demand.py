"""plan --policy P --demand CURVE.csv: an hourly forecast replaces the policy's schedule, as a user
runs it; a week that repeats nothing is solved by parts and says so; bad curves are one line."""

from __future__ import annotations

import math
import random
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.plandoc import from_json

runner = CliRunner()

POLICY = """
name: forecast
gpu: a100
timezone: Europe/Berlin
horizon_hours: 168
workloads:
  training: {max_spot_fraction: 0.5, node_gpus: 8, gang: true}
  inference: {max_spot_fraction: 0.3, spread_zones: 2}
schedule:
  default: {training: 70%, inference: 30%}
"""


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def week(peak: int, seed: int = 3) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    train, infer = [], []
    for t in range(168):
        level = 0.55 + 0.35 * math.sin((t % 24 - 8) / 24 * 2 * math.pi) + rng.uniform(-0.08, 0.08)
        total = max(16, round(peak * level))
        i = max(1, round(total * (0.3 + rng.uniform(-0.03, 0.03))))
        infer.append(i)
        train.append(((total - i) // 8) * 8)
    return train, infer


def write_curve(path: Path, train: list[int], infer: list[int], order: list[int] | None = None) -> Path:
    rows = ["hour,inference,training"]  # columns in any order
    for h in order or range(len(train)):
        rows.append(f"{h},{infer[h]},{train[h]}")
    path.write_text("# a forecast\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    p = tmp_path / "forecast.yaml"
    p.write_text(POLICY, encoding="utf-8")
    return p


def test_a_forecast_week_is_planned_hour_by_hour_by_parts(tmp_path: Path, policy: Path) -> None:
    train, infer = week(10_000)
    order = list(range(168))
    random.Random(1).shuffle(order)  # rows in any order
    curve = write_curve(tmp_path / "week.csv", train, infer, order)
    code, out, err = run("plan", "--policy", str(policy), "--demand", str(curve), "--gap", "0.005", "-o", "json")
    assert code == 0, err
    doc = from_json(out)
    assert doc.demand == {"training": tuple(train), "inference": tuple(infer)}
    assert doc.windows == () and doc.horizon_hours == 168
    assert doc.gpus == max(a + b for a, b in zip(train, infer, strict=True))
    parts = [n for n in doc.solve.notes if n.startswith("solved by parts")]
    assert parts, doc.solve.notes
    for t in range(168):
        for w in ("training", "inference"):
            held = sum(a.instances_by_slot[t] * a.gpus_per_instance for a in doc.allocations if a.workload == w)
            held += sum(r.gpus_used_by_slot.get(w, (0,) * 168)[t] for r in doc.reservations)
            assert held >= doc.demand[w][t]
    assert len({(a.cloud, a.location, a.gpu) for a in doc.placements() if a.workload == "training"}) <= 1
    assert doc.costs.lower_bound_usd <= doc.costs.objective_usd
    proven = (doc.costs.objective_usd - doc.costs.lower_bound_usd) / doc.costs.objective_usd
    if doc.solve.status == "Optimal":
        assert proven <= Decimal("0.005")
    assert f"proven gap {float(proven):.3%}" in parts[0]


def test_the_same_plan_id_for_the_same_curve_and_another_for_another(tmp_path: Path, policy: Path) -> None:
    train, infer = [8 * (h % 3) for h in range(168)], [1 + h % 5 for h in range(168)]
    a = write_curve(tmp_path / "a.csv", train, infer)
    b = write_curve(tmp_path / "b.csv", train, [1 + h % 4 for h in range(168)])
    ids = []
    for curve in (a, a, b):
        code, out, err = run(
            "plan",
            "--policy",
            str(policy),
            "--demand",
            str(curve),
            "--gap",
            "0.05",
            "--time-limit",
            "10",
            "--accept-gap",
            "-o",
            "json",
        )
        assert code == 0, err
        ids.append(from_json(out).plan_id)
    assert ids[0] == ids[1] != ids[2]


def _rows(n: int = 168) -> list[str]:
    return ["hour,training,inference", *(f"{h},8,2" for h in range(n))]


BAD = {
    "missing hour": ("\n".join(_rows()[:-1]), "no row for hour 167"),
    "duplicate hour": ("\n".join([*_rows(), "5,8,2"]), "hour 5 appears twice"),
    "hour out of range": ("\n".join([*_rows(167), "168,8,2"]), "hour 168 is not between 0 and 167"),
    "unknown column": ("hour,training,inference,batch\n0,1,2,3", "column 4 is not a workload of the policy"),
    "missing column": ("hour,training\n0,8", "no column for inference"),
    "no hour column": ("when,training,inference\n0,8,2", "the header starts with 'hour'"),
    "negative": ("\n".join([*_rows(1), "1,-8,2"]), "line 3: training: not a whole number"),
    "fraction": ("\n".join([*_rows(1), "1,8,2.5"]), "line 3: inference: not a whole number"),
    "huge": ("\n".join([*_rows(1), "1,99999999999999999999999,2"]), "training: not a whole number from 0 to 1000000"),
    "too many fields": ("\n".join([*_rows(1), "1,8,2,9"]), "4 fields, the header has 3"),
    "empty": ("", "empty"),
    "all zero": ("\n".join(["hour,training,inference", *(f"{h},0,0" for h in range(168))]), "0 GPUs"),
    "a day for a week": ("\n".join(_rows(24)), "the policy's horizon is 168 hours"),
    "column twice": ("hour,training,training,inference\n0,8,8,2", "appears twice"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_curve_is_one_line_and_exit_2(tmp_path: Path, policy: Path, case: str) -> None:
    text, message = BAD[case]
    curve = tmp_path / "bad.csv"
    curve.write_text(text, encoding="utf-8")
    code, out, err = run("plan", "--policy", str(policy), "--demand", str(curve))
    assert code == 2, (case, code, out, err)
    assert message in err, (case, err)
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in out + err


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"hour,training,inference\n0,\x00,1\n", "NUL"),
        (b"\xff\xfe\x00h\x00o", "not UTF-8"),
        (b"hour,training,inference\n" + b"0,1,1\n" * 200_000, "larger than 1024 KiB"),
    ],
)
def test_junk_files_are_one_line(tmp_path: Path, policy: Path, data: bytes, message: str) -> None:
    curve = tmp_path / "junk.csv"
    curve.write_bytes(data)
    code, out, err = run("plan", "--policy", str(policy), "--demand", str(curve))
    assert code == 2 and message in err, (code, err)
    assert "Traceback" not in out + err


def test_demand_goes_with_a_policy_and_without_gpus(tmp_path: Path, policy: Path) -> None:
    curve = write_curve(tmp_path / "c.csv", [8] * 168, [2] * 168)
    code, _out, err = run("plan", "--gpus", "64", "--type", "a100", "--demand", str(curve))
    assert code == 2 and "--demand" in err
    code, _out, err = run("plan", "--policy", str(policy), "--gpus", "64", "--demand", str(curve))
    assert code == 2 and "leave out --gpus" in err
    code, _out, err = run("plan", "--policy", str(policy), "--demand", str(curve), "--hours", "48")
    assert code == 2 and "--hours must be 24 or 168" in err  # the flag is named, not the curve
    code, _out, err = run("plan", "--policy", str(policy), "--demand", str(tmp_path / "nope.csv"))
    assert code == 2 and "cannot read" in err
