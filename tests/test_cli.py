"""The CLI as a user meets it: through typer's CliRunner, on the bundled catalog."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.plandoc import SCHEMA_VERSION, from_json

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_plan_json_has_the_documented_shape() -> None:
    code, out, err = run("plan", "--gpus", "64", "--type", "a100", "--output", "json")
    assert code == 0, err
    doc = json.loads(out)
    for key in (
        "schema_version",
        "plan_id",
        "gpu",
        "gpus",
        "costs",
        "allocations",
        "reservations",
        "baselines",
        "commitments",
        "catalog_as_of",
        "request",
    ):
        assert key in doc
    assert doc["gpus"] == 64 and doc["schema_version"] == SCHEMA_VERSION
    assert doc["catalog_as_of"].startswith("2025-12-01")
    assert all(isinstance(v, str) for v in doc["costs"].values() if not isinstance(v, list))  # exact money
    typed = from_json(out)
    held = sum(a.instances_by_slot[0] * a.gpus_per_instance for a in typed.placements())
    assert held >= 64
    spot = sum(a.instances * a.gpus_per_instance for a in typed.allocations if a.spot)
    assert spot <= 32
    billed = sum((a.unit_hourly_usd * a.instances for a in typed.allocations), Decimal(0)) + sum(
        (r.unit_hourly_usd * r.instances for r in typed.reservations), Decimal(0)
    )
    assert typed.costs.hourly_usd == billed
    for r in typed.reservations:
        assert r.commitment_total_usd == (r.unit_hourly_usd * r.instances * r.term_hours).quantize(Decimal("0.01"))
    assert typed.commitments.recommended_total_usd == sum(
        (r.commitment_total_usd for r in typed.reservations), Decimal(0)
    )
    assert [c.count for c in typed.commitments.recommended] == [r.instances for r in typed.reservations]
    assert typed.costs.total_cost_usd == typed.costs.horizon_usd == typed.costs.marginal_cost_usd  # nothing held
    aod = typed.baseline("all_on_demand")
    assert aod is not None and aod.hourly_usd is not None and typed.costs.hourly_usd <= aod.hourly_usd
    for b in typed.baselines:  # every saving shown is the baseline less the plan, over the same horizon
        if b.horizon_usd is not None:
            assert b.saving_usd == (b.horizon_usd - typed.costs.horizon_usd).quantize(Decimal("0.01"))
            assert b.saving_fraction == ((b.horizon_usd - typed.costs.horizon_usd) / b.horizon_usd).quantize(
                Decimal("0.0001")
            )
            assert b.hourly_usd == b.horizon_usd / typed.horizon_hours
    # the bound is on the objective (billed + interruption overhead) and never above it
    assert typed.costs.objective_usd == typed.costs.horizon_usd + typed.costs.expected_interruption_usd
    assert typed.costs.lower_bound_usd <= typed.costs.objective_usd


def test_plan_gang_keeps_every_node_in_one_zone_on_one_model() -> None:
    code, out, err = run("plan", "--gpus", "64", "--type", "a100", "--node-gpus", "8", "-o", "json")
    assert code == 0, err
    doc = from_json(out)
    placed = [a for a in doc.placements() if a.instances]
    assert len({(a.cloud, a.location) for a in placed}) == 1
    assert len({a.gpu for a in placed}) == 1
    assert all(a.gpus_per_instance == 8 for a in placed)
    for r in doc.reservations:  # whole reserved nodes for a gang
        assert all(g % r.gpus_per_instance == 0 for v in r.gpus_used_by_slot.values() for g in v)


def test_plan_table_prints_cost_saving_and_commitment() -> None:
    code, out, _ = run("plan", "--gpus", "64", "--type", "a100")
    assert code == 0
    assert "monthly (730 h)" in out and "plan saves" in out and "prices: aws" in out
    # the commitment and its term (1 or 3 years: whichever reservation the bundled prices make cheapest)
    assert re.search(r"commits \$[\d,]+\.\d\d over (1 year|3 years)", out) and "recommends buying" in out
    assert "bound on the objective" in out


def test_on_demand_only_plan_equals_its_own_baseline_or_beats_it() -> None:
    code, out, _ = run("plan", "--gpus", "16", "--type", "h100", "--markets", "on_demand", "-o", "json")
    assert code == 0
    doc = from_json(out)
    assert {a.market for a in doc.allocations} == {"on_demand"} and not doc.reservations
    aod = doc.baseline("all_on_demand")
    assert aod is not None and aod.horizon_usd is not None and doc.costs.horizon_usd <= aod.horizon_usd
    rps = doc.baseline("reserved_plus_spot")
    assert rps is not None and rps.horizon_usd is None and rps.reason and "reserved" in rps.reason


def test_baselines_obey_the_request_and_all_on_demand_is_the_cheapest_zone_of_the_catalog() -> None:
    args = (
        "--gpus",
        "64",
        "--type",
        "a100-40gb",
        "--node-gpus",
        "8",
        "--markets",
        "on_demand,spot",
        "--max-spot-fraction",
        "0.5",
    )
    code, out, err = run("plan", *args, "-o", "json")
    assert code == 0, err
    doc = from_json(out)
    for b in doc.baselines:
        assert b.saving_fraction is None or b.saving_fraction >= 0, b
        assert (b.horizon_usd is None) == (b.reason is not None)
    # independent: every on-demand 8-GPU A100-40GB offer in the catalog, the cheapest location for 64 GPUs
    code, out, _ = run("prices", "--type", "a100-40gb", "--market", "on_demand", "--limit", "0", "-o", "json")
    per_place: dict[str, Decimal] = {}
    for o in json.loads(out)["offers"]:
        if o["gpus_per_instance"] == 8:
            place = o["zone"] or o["region"]
            cost = Decimal(str(o["hourly_usd"])) * 8
            per_place[place] = min(per_place.get(place, cost), cost)
    cheapest = min(per_place.values())
    aod = doc.baseline("all_on_demand")
    assert aod is not None and aod.hourly_usd is not None
    assert abs(aod.hourly_usd - cheapest) < Decimal("0.0001") and per_place[aod.where or ""] == aod.hourly_usd


def test_flags_and_policy_price_spot_interruptions_alike(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "name: same\nhorizon_hours: 24\nworkloads:\n  training: {max_spot_fraction: 0.5}\n"
        "schedule:\n  default: {training: 100%}\n",
        encoding="utf-8",
    )
    code, out, err = run("plan", "--gpus", "16", "--type", "a100", "--markets", "on_demand,spot", "-o", "json")
    assert code == 0, err
    flags = from_json(out)
    code, out, err = run(
        "plan", "--policy", str(policy), "--gpus", "16", "--type", "a100", "--markets", "on_demand,spot", "-o", "json"
    )
    assert code == 0, err
    pol = from_json(out)
    assert flags.request.interruptions_per_hour == pol.request.interruptions_per_hour
    assert flags.costs.expected_interruption_usd > 0
    assert flags.costs.expected_interruption_usd == pol.costs.expected_interruption_usd / 24


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("plan", "--gpus", "64", "--type", "zz100"), 2, "error: unknown GPU type 'zz100'"),
        (("plan", "--gpus", "0", "--type", "a100"), 2, "error: --gpus must be a positive whole number"),
        (("plan", "--gpus", "-8", "--type", "a100"), 2, "error: --gpus must be a positive whole number"),
        (("plan", "--gpus", "lots", "--type", "a100"), 2, "error: Invalid value for '--gpus'"),
        (("plan", "--gpus", "8", "--type", "a100", "--markets", "spotty"), 2, "error: unknown market 'spotty'"),
        (
            ("plan", "--gpus", "8", "--type", "a100", "--max-spot-fraction", "1.5"),
            2,
            "error: --max-spot-fraction must be a number between 0 and 1",
        ),
        (("plan", "--gpus", "8", "--type", "a100", "--clouds", "ibm"), 2, "error: unknown cloud 'ibm'"),
        (("plan", "--gpus", "8", "--type", "l4", "--clouds", "azure"), 3, "error: cluster (L4): no offer"),
        (
            ("plan", "--gpus", "8", "--type", "a100", "--markets", "spot"),
            3,
            "error: cluster (A100-40GB/A100-80GB): only spot offers are allowed",
        ),
        (("prices", "--type", "a100", "--output", "xml"), 2, "error: unknown output format 'xml'"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args: tuple[str, ...], code: int, message: str) -> None:
    got, out, err = run(*args)
    assert got == code
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message), err
    assert "Traceback" not in err + out
    assert all(line.startswith(("error:", "hint:", "warning:")) for line in err.splitlines()), err


def test_prices_cheapest_first_in_every_format() -> None:
    code, out, _ = run("prices", "--type", "a100", "--market", "spot", "--cloud", "aws,gcp", "-o", "json")
    assert code == 0
    offers = json.loads(out)["offers"]
    assert offers and {o["market"] for o in offers} == {"spot"} and {o["cloud"] for o in offers} <= {"aws", "gcp"}
    per_gpu = [Decimal(o["usd_per_gpu_hour"]) for o in offers]
    assert per_gpu == sorted(per_gpu)
    code, out, _ = run("prices", "--type", "h100", "--region", "us-*", "-o", "csv")
    assert code == 0
    rows = out.splitlines()[1:]
    assert rows and all(r.split(",")[1].startswith("us-") for r in rows)
    code, out, _ = run("prices", "--type", "h100", "--limit", "3")
    assert code == 0 and "(first 3" in out and "days old" in out


def test_debug_env_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_DEBUG", "1")
    _, _, err = run("plan", "--gpus", "8", "--type", "zz100")
    assert "Traceback" in err and "error: unknown GPU type" in err
