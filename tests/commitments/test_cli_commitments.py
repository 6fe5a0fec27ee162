"""``gpuprov commitments`` and plans that use what is held, as a user meets them (CliRunner, the
bundled catalog): the issue's example of 4 held p4d reservations, and bad files that store nothing."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.plandoc import from_json

runner = CliRunner()

RI = (
    "{id: ri-1, cloud: aws, kind: reserved_instance, instance_type: p4d.24xlarge, region: us-east-1, "
    'count: 4, term: 1y, hourly_usd: 13.921094, starts: "2026-06-01", ends: "2027-06-01"}'
)
PLAN = ("plan", "--gpus", "64", "--type", "a100-40gb", "--node-gpus", "8", "--clouds", "aws", "--output", "json")


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, text: str, name: str = "held.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def stored() -> list[dict[str, object]]:
    code, out, err = run("commitments", "list", "--output", "json")
    assert code == 0, err
    rows: list[dict[str, object]] = json.loads(out)
    return rows


def test_import_list_remove_round_trip(tmp_path: Path) -> None:
    code, out, err = run("commitments", "import", write(tmp_path, f"commitments: [{RI}]\n"))
    assert code == 0, err
    (row,) = stored()
    assert row["id"] == "ri-1" and row["count"] == 4 and row["hourly_usd"] == "13.921094"
    assert row["starts"] == "2026-06-01T00:00:00+00:00" and row["ends"] == "2027-06-01T00:00:00+00:00"
    code, out, _ = run("commitments", "list")
    assert code == 0 and "p4d.24xlarge in us-east-1" in out and "$55.68" in out  # 4 × $13.92/h
    assert run("commitments", "remove", "ri-1")[0] == 0
    assert stored() == []
    code, _out, err = run("commitments", "remove", "ri-1")
    assert code == 2 and "no commitment" in err


def test_a_csv_file_reads_like_yaml(tmp_path: Path) -> None:
    csv = (
        "id,cloud,kind,usd_per_hour,term,starts\n"
        "sp-1,aws,savings_plan,25.5,3y,2026-01-01T00:00:00Z\n"
        "id2,aws,capacity_reservation,,,2026-01-01\n"
    )
    code, _out, err = run("commitments", "import", write(tmp_path, csv, "held.csv"))
    assert code == 2 and "line 3" in err and "needs ends" in err and stored() == []  # nothing stored
    good = csv.splitlines()[:2]
    code, _out, err = run("commitments", "import", write(tmp_path, "\n".join(good) + "\n", "good.csv"))
    assert code == 0, err
    (row,) = stored()
    assert row["kind"] == "savings_plan" and row["usd_per_hour"] == "25.5" and row["family"] is None
    assert row["ends"] == "2028-12-31T00:00:00+00:00"  # starts + 3 × 8,760 h (AWS: 94,608,000 s; 2028 leaps)


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        ([RI, RI], "id 'ri-1' is used twice"),
        ([RI.replace('ends: "2027-06-01"', 'ends: "2026-01-01"')], "is not after starts"),
        ([RI.replace("p4d.24xlarge", "p9z.mega")], "unknown instance type 'p9z.mega'"),
        ([RI.replace("count: 4", "count: -4")], "count must be at least 1"),
        ([RI.replace("count: 4", "count: four")], "count must be a whole number"),
        ([RI.replace("us-east-1", "mars-north-1")], "unknown region"),
        ([RI.replace("hourly_usd: 13.921094", "hourly_usd: -1")], "hourly_usd must be an amount ≥ 0"),
        ([RI.replace("hourly_usd: 13.921094", "hourly_usd: .nan")], "hourly_usd"),
        ([RI.replace("kind: reserved_instance", "kind: committed_use")], "aws has no committed_use"),
        ([RI.replace("id: ri-1", "id: 'ri 1; rm -rf /'")], "id"),
        ([RI.replace("region: us-east-1", "region: us-east-1, colour: red")], "an unknown field (fields: id, cloud"),
        (
            ["{id: sp, cloud: aws, kind: savings_plan, family: p4d, usd_per_hour: 3, term: 1y, starts: 2026-01-01}"],
            "names both family and region",
        ),
        ([RI.replace('starts: "2026-06-01"', "starts: 2026-02-30")], "a value cannot be read"),
        ([RI.replace('starts: "2026-06-01"', "starts: '9999-12-31T23:00:00-05:00'")], "out of range"),
        ([RI.replace("hourly_usd: 13.921094", 'hourly_usd: "1e-999999999"')], "plain decimal amount"),
        ([RI.replace("hourly_usd: 13.921094", 'hourly_usd: "' + "0" * 62 + '12.5"')], "plain decimal amount"),
        ([RI.replace("count: 4", "count: '1_0'")], "count must be a whole number"),
        ([RI.replace("count: 4", "count: 4, count: 5")], "given twice"),
        ([RI.replace('ends: "2027-06-01"', 'ends: "2999-06-01"')], "out of range"),
    ],
)
def test_bad_entries_get_one_line_and_store_nothing(tmp_path: Path, entries: list[str], words: str) -> None:
    good = RI.replace("ri-1", "ri-ok")
    text = "commitments: [" + ", ".join([good, *entries]) + "]\n"
    code, out, err = run("commitments", "import", write(tmp_path, text))
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) <= 2 and words in lines[0], err  # one error line (and at most a hint)
    assert "Traceback" not in err and stored() == []


def test_an_id_already_stored_is_refused(tmp_path: Path) -> None:
    assert run("commitments", "import", write(tmp_path, f"commitments: [{RI}]\n"))[0] == 0
    code, _out, err = run("commitments", "import", write(tmp_path, f"commitments: [{RI}]\n", "again.yaml"))
    assert code == 2 and "already stored" in err
    assert len(stored()) == 1


@pytest.mark.parametrize("text", ["", "commitments: 3\n", "[1, 2]\n", "commitments: []\n", "a: &a [*a]\n"])
def test_files_that_are_not_commitment_lists(tmp_path: Path, text: str) -> None:
    code, _out, err = run("commitments", "import", write(tmp_path, text))
    assert code == 2 and "Traceback" not in err and err.strip()
    assert stored() == []


def test_four_held_p4d_reservations_are_used_and_only_what_lies_beyond_them_is_bought(tmp_path: Path) -> None:
    # without spot, the cluster needs 8 p4d nodes; before anything is held the plan buys them all
    code, out, err = run(*PLAN, "--max-spot-fraction", "0")
    assert code == 0, err
    before = from_json(out)
    bought_before = sum(r.count or 0 for r in before.commitments.recommended)
    assert bought_before == 8 and not before.commitments.held

    assert run("commitments", "import", write(tmp_path, f"commitments: [{RI}]\n"))[0] == 0
    code, out, err = run(*PLAN, "--max-spot-fraction", "0")
    assert code == 0, err
    doc = from_json(out)
    (held,) = doc.commitments.held
    assert held.id == "ri-1" and held.utilization > 0
    assert held.used_by_slot == (Decimal(4),)  # all 4 held instances run, billed against ri-1
    assert held.horizon_usd == Decimal("13.921094") * 4 and held.unused_horizon_usd == 0
    recommended = doc.commitments.recommended
    assert sum(r.count or 0 for r in recommended) == bought_before - 4
    from gpuprov.commands import common

    catalog, _ = common.open_catalog()
    a100 = catalog.offers(["A100-40GB"])
    for r, resv in zip(recommended, doc.reservations, strict=True):
        assert r.term_hours == 8760 and r.total_usd == (r.hourly_usd * r.term_hours).quantize(Decimal("0.01"))
        # independently: the reserved rate over the on-demand price of that type in that zone
        od = min(
            o.hourly_usd
            for o in a100
            if o.market.value == "on_demand" and o.instance_type == resv.instance_type and o.zone == resv.zone
        )
        assert r.break_even_utilization == (resv.unit_hourly_usd / od).quantize(Decimal("0.0001"))
        assert 0 < r.break_even_utilization < 1
        # fully used for the 1 h horizon, it saves the on-demand price less its own
        assert r.utilization == 1
        assert r.horizon_saving_usd == ((od - resv.unit_hourly_usd) * resv.instances).quantize(Decimal("0.01"))
    # the running on-demand instances of the held type in us-east-1 are the ones covered
    covered = sum(
        a.instances
        for a in doc.allocations
        if a.market == "on_demand" and a.instance_type == "p4d.24xlarge" and a.region == "us-east-1"
    )
    assert covered >= 4
    assert doc.costs.marginal_cost_usd == doc.costs.total_cost_usd - held.horizon_usd

    # with spot allowed, the held four and spot cover the cluster: nothing new to buy
    code, out, err = run(*PLAN)
    assert code == 0, err
    doc = from_json(out)
    assert doc.commitments.held[0].utilization > 0 and not doc.commitments.recommended


def test_what_if_demand_costs_the_commitments_at_lower_demand() -> None:
    code, out, err = run(*PLAN, "--max-spot-fraction", "0", "--what-if-demand", "0.25")
    assert code == 0, err
    doc = from_json(out)
    w = doc.commitments.what_if
    assert w is not None and w.demand_scale == Decimal("0.25")
    # at a quarter of the demand 2 of the 8 reserved nodes run: holding all 8 costs more than
    # the best plan without them (the 8 reserved nodes are the whole bill, 6 of them idle)
    assert w.with_commitments_horizon_usd > w.without_commitments_horizon_usd and w.regret_horizon_usd > 0
    (r,) = doc.reservations
    assert w.with_commitments_horizon_usd == (r.unit_hourly_usd * r.instances).quantize(Decimal("0.01"))
    assert w.regret_horizon_usd == w.with_commitments_horizon_usd - w.without_commitments_horizon_usd
    code, _out, err = run(*PLAN, "--what-if-demand", "0")
    assert code == 2 and "--what-if-demand" in err


def test_ignore_held_plans_as_if_nothing_were_held(tmp_path: Path) -> None:
    assert run("commitments", "import", write(tmp_path, f"commitments: [{RI}]\n"))[0] == 0
    code, out, err = run(*PLAN, "--ignore-held")
    assert code == 0, err
    assert not from_json(out).commitments.held


def test_what_list_prints_imports_again_and_a_bom_is_no_column(tmp_path: Path) -> None:
    sp = "{id: sp-9, cloud: aws, kind: savings_plan, usd_per_hour: 2.5, term: 1y, starts: 2026-01-01}"
    assert run("commitments", "import", write(tmp_path, f"commitments: [{RI}, {sp}]\n"))[0] == 0
    listed = stored()
    for rid in ("ri-1", "sp-9"):
        assert run("commitments", "remove", rid)[0] == 0
    code, _out, err = run("commitments", "import", write(tmp_path, json.dumps(listed), "listed.json"))
    assert code == 0, err
    assert stored() == listed  # the same records, read back from what list printed
    csv = "\ufeffid,cloud,kind,usd_per_hour,term,starts\nsp-bom,aws,savings_plan,1,1y,2026-01-01\n"
    assert run("commitments", "import", write(tmp_path, csv, "bom.csv"))[0] == 0


def test_a_csv_field_too_large_is_one_line(tmp_path: Path) -> None:
    csv = "id,cloud,kind,usd_per_hour,term,starts\nsp-1,aws,savings_plan,1,1y," + "x" * 200_000 + "\n"
    code, _out, err = run("commitments", "import", write(tmp_path, csv, "big.csv"))
    assert code == 2 and "not CSV" in err and "Traceback" not in err and stored() == []


@pytest.mark.parametrize(("column", "value"), [("kind", "bogus"), ("hourly_usd", "abc"), ("starts", "garbage")])
def test_a_damaged_stored_row_is_one_line_and_can_still_be_removed(
    tmp_path: Path, _isolated_db: str, column: str, value: str
) -> None:
    import sqlite3

    assert run("commitments", "import", write(tmp_path, f"commitments: [{RI}]\n"))[0] == 0
    con = sqlite3.connect(_isolated_db.removeprefix("sqlite:///"))
    con.execute(f"UPDATE gpuprov_commitment SET {column} = ?", (value,))
    con.commit()
    con.close()
    for args in (("commitments", "list"), PLAN):
        code, _out, err = run(*args)
        assert code == 5 and "ri-1" in err and "unreadable" in err and "Traceback" not in err, (args, err)
    assert run("commitments", "remove", "ri-1")[0] == 0
    assert stored() == []


def test_a_held_savings_plan_without_rates_is_paid_and_said(tmp_path: Path) -> None:
    sp = "{id: sp-1, cloud: aws, kind: savings_plan, usd_per_hour: 25, term: 3y, starts: 2026-01-01}"
    args = ("plan", "--gpus", "8", "--type", "a100-40gb", "--node-gpus", "8", "--clouds", "aws", "-o", "json")
    code, out, _err = run(*args)
    before = from_json(out).costs.total_cost_usd
    assert run("commitments", "import", write(tmp_path, f"commitments: [{sp}]\n"))[0] == 0
    code, out, err = run(*args)
    assert code == 0, err
    doc = from_json(out)
    (held,) = doc.commitments.held
    assert held.id == "sp-1" and held.utilization == 0 and held.horizon_usd == Decimal(25)
    assert doc.costs.total_cost_usd == before + 25  # paid whatever the plan does, covering nothing
    assert any("sp-1" in w and "no rates known" in w for w in doc.warnings)
    assert "savings plan sp-1: no rates known" in err


def test_a_stored_id_that_no_import_would_admit_is_not_printed(tmp_path: Path, _isolated_db: str) -> None:
    import sqlite3

    assert run("commitments", "import", write(tmp_path, f"commitments: [{RI}]\n"))[0] == 0
    con = sqlite3.connect(_isolated_db.removeprefix("sqlite:///"))
    con.execute("UPDATE gpuprov_commitment SET id = ?", ("ri-1\nwarning: all clear",))
    con.commit()
    con.close()
    code, _out, err = run("commitments", "list")
    assert code == 5 and "unreadable" in err and "\nwarning: all clear" not in err
