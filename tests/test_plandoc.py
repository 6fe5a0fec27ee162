"""The plan document: one typed, versioned model; bad documents get one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.errors import PlanFormatError
from gpuprov.plandoc import SCHEMA_VERSION, from_json, json_schema, to_dict, to_json
from tests.plans import CASES, planned

runner = CliRunner()


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_planned_case_round_trips_and_money_is_text(case: str) -> None:
    doc = planned(case)
    assert from_json(to_json(doc)) == doc
    raw = to_dict(doc)
    assert isinstance(raw["costs"]["hourly_usd"], str) and isinstance(raw["costs"]["slot_usd"][0], str)
    for r in raw["reservations"]:
        assert isinstance(r["commitment_total_usd"], str) and r["term_hours"] in (8760, 26280)


def _mutate(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    keys = path.split(".")
    node = out
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        ("schema_version", 1, "schema_version 1 is from an older gpuprov"),
        ("schema_version", 99, "schema_version 99 is from a newer gpuprov"),
        ("schema_version", _DELETE, "no schema_version"),
        ("schema_version", "2", "schema_version must be a whole number"),
        ("horizon_hours", 12, "field horizon_hours"),
        ("timezone", "Mars/Olympus", "field timezone"),
        ("slot_origin", "month", "field slot_origin"),
        ("costs.hourly_usd", 1.5, "field costs.hourly_usd"),  # money is a decimal string, not a float
        ("costs.hourly_usd", "lots", "field costs.hourly_usd"),
        ("costs.hourly_usd", "-1", "field costs.hourly_usd"),
        ("costs.hourly_usd", "NaN", "field costs.hourly_usd"),
        ("allocations.0.market", "reserved_5y", "field allocations.0.market"),
        ("allocations.0.cloud", "ibm", "field allocations.0.cloud"),
        ("allocations.0.instances_by_slot", [1, 2], "field allocations.0.instances_by_slot"),
        ("allocations.0.instances_by_slot", [-1] * 24, "field allocations.0.instances_by_slot"),
        ("allocations.0.workload", "nobody", "field allocations.0.workload"),
        ("allocations.0.gpus_per_instance", 0, "field allocations.0.gpus_per_instance"),
        ("allocations.0.surprise", True, "field allocations.0.surprise"),
        ("windows.0.start_slot", 30, "field windows.0.start_slot"),
        ("plan_id", "../../etc", "field plan_id"),
        ("created_at", "yesterday", "field created_at"),
        ("reservations.0.term_hours", 100, "field reservations.0.term_hours"),
        ("reservations.0.gpus_used_by_slot.training", [9999] * 24, "field reservations.0.gpus_used_by_slot"),
    ],
)
def test_bad_documents_are_refused_naming_the_field(path: str, value: Any, words: str) -> None:
    good = to_dict(planned("day_night"))
    assert good["allocations"] and good["reservations"] and good["windows"]
    with pytest.raises(PlanFormatError, match=words.replace("(", r"\(")):
        from_json(json.dumps(_mutate(good, path, value)))


@pytest.mark.parametrize("text", ["", "[]", "null", "{", "[" * 5000, '{"schema_version": 2}'])
def test_junk_is_refused(text: str) -> None:
    with pytest.raises(PlanFormatError):
        from_json(text)


@pytest.mark.parametrize("command", [["terraform", "{file}", "--out", "{out}"], ["apply", "{file}"]])
def test_cli_refuses_a_bad_file_with_one_line_and_renders_or_launches_nothing(
    command: list[str], tmp_path: Path, fake_clouds: dict[Any, Any]
) -> None:
    doc = _mutate(to_dict(planned("day_night")), "schema_version", SCHEMA_VERSION + 1)
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "infra"
    args = [a.format(file=bad, out=out) for a in command]
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "schema_version" in errors[0], r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert not out.exists()
    assert all(d.describe("default") == [] for d in fake_clouds.values())


def test_schema_command_prints_the_generated_json_schema() -> None:
    r = runner.invoke(app, ["schema", "plan"])
    assert r.exit_code == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema == json.loads(json.dumps(json_schema()))
    props = schema["properties"]
    for key in ("schema_version", "costs", "allocations", "reservations", "baselines", "commitments", "request"):
        assert key in props
    defs = schema["$defs"]
    assert "commitment_total_usd" in defs["Reservation"]["properties"]
    assert defs["Reservation"]["additionalProperties"] is False


def test_saved_flags_plan_renders_to_terraform_and_checks(tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100", "--save", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    pid = json.loads(r.stdout)["plan_id"]
    out = tmp_path / "infra"
    r = runner.invoke(app, ["terraform", pid, "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["terraform", "--check", str(out)])
    assert r.exit_code == 0, r.stderr
