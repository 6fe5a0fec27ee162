"""Tables at the width of the terminal: every allocation's cloud, location, market, count and $/h
and the billed hourly cost stay on screen at 80 columns (``COLUMNS=80``), checked against the
same plan's JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from gpuprov.render import money, short_market


def gpuprov(tmp: Path, columns: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / 'g.db'}"}
    return subprocess.run(
        [sys.executable, "-m", "gpuprov.cli", *args], capture_output=True, text=True, env=env, check=False
    )


CASES = [
    ("--gpus", "64", "--type", "a100"),
    ("--policy", "day-night", "--gpus", "64", "--type", "a100"),
    ("--policy", "weekday-weekend", "--gpus", "256", "--type", "h100", "--timezone", "Europe/Berlin"),
]


@pytest.mark.parametrize("args", CASES, ids=["flags", "day-night", "weekday-weekend"])
@pytest.mark.parametrize("columns", [80, 100])
def test_plan_at_a_narrow_terminal_keeps_every_allocation_and_the_cost(
    tmp_path: Path, args: tuple[str, ...], columns: int
) -> None:
    js = gpuprov(tmp_path, columns, "plan", *args, "--output", "json")
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    table = gpuprov(tmp_path, columns, "plan", *args)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= columns
    rows = [*doc["allocations"], *doc["reservations"]]
    assert rows
    for a in rows:
        n = max(a["instances_by_slot"]) if "instances_by_slot" in a else a["instances"]
        usd = Decimal(a["unit_hourly_usd"]) * n if "instances_by_slot" in a else Decimal(a["hourly_usd"])
        location = a["zone"] or a["region"]
        cells = [a["cloud"], location[:10], short_market(a["market"]), str(n), money(usd)]
        found = [line for line in lines if all(f" {c} " in f" {line} " or f" {c}" in line for c in cells)]
        assert found, f"{cells} not on one line of\n{table.stdout}"
    hourly = money(Decimal(doc["costs"]["hourly_usd"]))
    assert any(line.startswith("hourly cost, billed") and hourly in line for line in lines), table.stdout


def test_prices_at_80_columns_keep_the_price_of_every_offer(tmp_path: Path) -> None:
    js = gpuprov(tmp_path, 80, "prices", "--type", "a100", "--output", "json")
    offers = json.loads(js.stdout)["offers"][:30]
    table = gpuprov(tmp_path, 80, "prices", "--type", "a100")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert "$…" not in table.stdout
    for o in offers:
        price = money(Decimal(o["usd_per_gpu_hour"]), Decimal("0.0001"))
        assert any(o["cloud"] in line and price in line for line in lines), (o, table.stdout)


def test_a_pipe_without_columns_gets_the_wide_table(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["GPUPROV_DATABASE_URL"] = f"sqlite:///{tmp_path / 'g.db'}"
    run = subprocess.run(
        [sys.executable, "-m", "gpuprov.cli", "plan", "--gpus", "64", "--type", "a100"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    header = next(line for line in run.stdout.splitlines() if "workload" in line and "instance type" in line)
    assert header.startswith("┃") and "commitment" in header  # boxed, every column
    assert "narrow terminal" not in run.stdout


def test_prices_csv_carries_the_flags_the_json_has(tmp_path: Path) -> None:
    import csv
    import io

    js = json.loads(gpuprov(tmp_path, 80, "prices", "--type", "a100", "--output", "json").stdout)["offers"]
    rows = list(
        csv.DictReader(io.StringIO(gpuprov(tmp_path, 80, "prices", "--type", "a100", "--output", "csv").stdout))
    )
    assert len(rows) == len(js)
    assert [r["flags"] for r in rows] == [";".join(o["flags"]) for o in js]
    assert any(r["flags"] for r in rows)  # the bundle has flagged quotes for A100: the column is not empty
