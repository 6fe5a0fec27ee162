"""Suspect quotes and per-pool spot risk, on hand-made rows and on the bundled catalog."""

from __future__ import annotations

import json
from decimal import Decimal as D
from pathlib import Path
from statistics import median

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.models import DEFAULT_INTERRUPTIONS_PER_HOUR, Cloud, Market, Offer
from gpuprov.plandoc import from_json
from pricing.quality import annotate

runner = CliRunner()


def off(zone: str, market: str, price: str, region: str = "r1", itype: str = "p4d") -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region=region,
        zone=zone,
        instance_type=itype,
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=D(1152),
        market=Market(market),
        hourly_usd=D(price),
    )


def test_spot_below_15_percent_of_the_same_zones_on_demand_is_suspect() -> None:
    rows = annotate(
        [
            off("a", "on_demand", "20"),
            off("a", "spot", "2.9"),
            off("a", "spot", "3.1", itype="p4d"),
            off("b", "on_demand", "20"),
            off("b", "spot", "3.0"),
        ]
    )
    flags = [(o.location, o.market.value, o.hourly_usd, o.flags) for o in rows]
    assert ("a", "spot", D("2.9"), ("suspect-spot",)) in flags
    assert ("a", "spot", D("3.1"), ()) in flags
    assert ("b", "spot", D("3.0"), ()) in flags  # exactly 15%: not below


def test_on_demand_far_below_the_types_median_is_suspect() -> None:
    prices = ["30", "32", "31", "33", "17"]
    rows = annotate([off(f"z{i}", "on_demand", p, region=f"r{i}") for i, p in enumerate(prices)])
    mid = median(D(p) for p in prices)
    for o in rows:
        assert ("suspect-on-demand" in o.flags) == (o.hourly_usd < D("0.6") * mid)
    assert sum(bool(o.flags) for o in rows) == 1


def test_every_spot_pool_carries_a_rate_and_its_source() -> None:
    rows = annotate([off("a", "spot", "3")], spot_rate=lambda o: (D("0.0001"), "test:pool"))
    assert (rows[0].interruptions_per_hour, rows[0].interruption_source) == (D("0.0001"), "test:pool")
    rows = annotate([off("a", "spot", "3")])
    assert (rows[0].interruptions_per_hour, rows[0].interruption_source) == (
        DEFAULT_INTERRUPTIONS_PER_HOUR["aws"],
        "default:aws",
    )


def test_prices_and_plan_show_the_flag_and_exclude_suspect_drops_it() -> None:
    r = runner.invoke(app, ["prices", "--type", "a100-40gb", "--market", "spot", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    offers = json.loads(r.stdout)["offers"]
    flagged = [o for o in offers if "suspect-spot" in o["flags"]]
    assert flagged and all(o["interruption_source"] for o in offers)
    # independent: a flagged spot quote is under 15% of its zone's on-demand price
    r = runner.invoke(app, ["prices", "--type", "a100-40gb", "--market", "on_demand", "-o", "json"])
    od = {
        (o["cloud"], o["zone"] or o["region"], o["instance_type"]): D(o["hourly_usd"])
        for o in json.loads(r.stdout)["offers"]
    }
    for o in flagged:
        assert D(o["hourly_usd"]) < D("0.15") * od[(o["cloud"], o["zone"] or o["region"], o["instance_type"])]
    r = runner.invoke(app, ["prices", "--type", "a100-40gb", "--market", "spot", "--exclude-suspect", "-o", "json"])
    assert not [o for o in json.loads(r.stdout)["offers"] if o["flags"]]
    # by default the plan leaves the flagged quote out (p4d spot in use1-az1, 11% of on demand),
    # says how many it left out and what the plan would cost with them
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100-40gb", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    clean = from_json(r.stdout)
    assert not clean.warnings and not any(a.flags for a in clean.allocations)
    q = clean.price_quality
    assert q is not None and not q.include_suspect and q.suspect_left_out >= 1
    assert q.suspect_flags.get("suspect-spot", 0) >= 1
    # let in: the plan takes it, warns, and costs what the default plan said it would
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100-40gb", "--include-suspect", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    loose = from_json(r.stdout)
    assert any("suspect-spot" in a.flags for a in loose.allocations)
    assert "warning: the plan relies on a suspect-spot quote" in r.stderr
    assert q.with_suspect_hourly_usd == loose.costs.hourly_usd.quantize(D("0.0001"))
    assert loose.costs.hourly_usd < clean.costs.hourly_usd
    # --exclude-suspect is the default's explicit form: the same plan
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100-40gb", "--exclude-suspect", "-o", "json"])
    assert from_json(r.stdout).plan_id == clean.plan_id
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100-40gb", "--include-suspect", "--exclude-suspect"])
    assert r.exit_code == 2 and "contradict" in r.stderr


def test_the_config_key_lets_suspect_quotes_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("pricing: {include_suspect: true}\n", encoding="utf-8")
    monkeypatch.setenv("GPUPROV_CONFIG", str(cfg))
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100-40gb", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    plan = from_json(r.stdout)
    assert plan.price_quality is not None and plan.price_quality.include_suspect
    assert any("suspect-spot" in a.flags for a in plan.allocations)
    # --exclude-suspect overrides the config for one run
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100-40gb", "--exclude-suspect", "-o", "json"])
    assert not any(a.flags for a in from_json(r.stdout).allocations)
    cfg.write_text("pricing: {include_suspect: maybe}\n", encoding="utf-8")
    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100-40gb"])
    assert r.exit_code == 2 and "pricing.include_suspect" in r.stderr


def test_fractional_sizes_are_a_share_of_a_gpu_and_no_plan_counts_them() -> None:
    r = runner.invoke(app, ["prices", "--type", "mi25", "-o", "json"])
    offers = json.loads(r.stdout)["offers"]
    nv4 = [o for o in offers if o["instance_type"] == "Standard_NV4as_v4"]
    assert nv4 and all(o["gpu_fraction"] == str(D(1) / 8) and o["gpus_per_instance"] == 0 for o in nv4)
    for o in nv4:
        assert D(o["usd_per_gpu_hour"]) == (D(o["hourly_usd"]) * 8).quantize(D("0.000001"))
        assert "fractional-gpu" in o["flags"]
    r = runner.invoke(app, ["plan", "--gpus", "4", "--type", "mi25", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    plan = from_json(r.stdout)
    assert all(
        a.instance_type not in ("Standard_NV4as_v4", "Standard_NV8as_v4", "Standard_NV16as_v4")
        for a in plan.placements()
    )
    held = sum(a.instances * a.gpus_per_instance for a in plan.allocations) + sum(
        r.instances * r.gpus_per_instance for r in plan.reservations
    )
    assert held >= 4


def test_plans_price_spot_risk_per_pool_and_a_policy_override_wins(tmp_path: Path) -> None:
    from pricing.spot_risk import aws_interruptions_per_hour

    r = runner.invoke(app, ["plan", "--gpus", "64", "--type", "a100-40gb", "--clouds", "aws", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    plan = from_json(r.stdout)
    spot = [a for a in plan.allocations if a.spot]
    assert spot
    for a in spot:
        known = aws_interruptions_per_hour(a.region, a.instance_type)
        if known is None:
            assert a.interruption_source == "default:aws"
        else:
            assert (a.interruptions_per_hour, a.interruption_source) == known
    expected = sum(
        (a.unit_hourly_usd * (a.interruptions_per_hour or D(0)) * D(1) * sum(a.instances_by_slot) for a in spot), D(0)
    )
    assert plan.costs.expected_interruption_usd == expected  # lost hours 1.0 for a flags plan
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "name: p\nhorizon_hours: 24\nspot_interruption: {aws: 0.05}\nworkloads:\n  training: {max_spot_fraction: 0.5}\n"
        "schedule:\n  default: {training: 100%}\n",
        encoding="utf-8",
    )
    r = runner.invoke(
        app, ["plan", "--policy", str(policy), "--gpus", "64", "--type", "a100-40gb", "--clouds", "aws", "-o", "json"]
    )
    assert r.exit_code == 0, r.stderr
    for a in from_json(r.stdout).allocations:
        if a.spot:
            assert (a.interruptions_per_hour, a.interruption_source) == (D("0.05"), "policy:aws")


def test_the_readme_states_the_thresholds_the_code_uses() -> None:
    from pricing import quality
    from tests.conftest import ROOT

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text[text.index("| rule | threshold | why |") :].split("\n\n", 1)[0]
    shares = (quality.SUSPECT_SPOT_SHARE, quality.ROBUST_SHARE, quality.GPU_SHARE)
    for share in (*shares, quality.ROBUST_SPOT_SHARE, quality.GPU_SPOT_SHARE):
        assert f"{share:.0%}" in table, share
    assert f"within {quality.ROBUST_WINDOW} MADs" in table and f"at least {quality.ROBUST_MIN_POINTS} values" in table
    for flag in quality.ROBUST_FLAG.values():
        assert f"`{flag}`" in table, flag
