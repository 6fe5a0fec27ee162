"""Policies: presets, schedules in local time, validation errors that name the file and key."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gpuprov.errors import ConfigError
from gpuprov.models import Cloud, Market, Offer
from policies import constraints, loader
from policies.schedule import demand_slots, slot_at, window_starts


def test_day_night_preset_is_70_30_by_day_and_20_80_by_night() -> None:
    pol = loader.load("day-night")
    d = demand_slots(pol, 64)
    assert d["inference"][8:20] == (45,) * 12 and d["training"][8:20] == (19,) * 12
    assert d["inference"][:8] == (13,) * 8 and d["training"][:8] == (51,) * 8
    assert d["inference"][20:] == (13,) * 4 and d["training"][20:] == (51,) * 4
    assert all(a + b == 64 for a, b in zip(d["inference"], d["training"], strict=True))


def test_weekday_weekend_preset_covers_the_week() -> None:
    pol = loader.load("weekday-weekend")
    d = demand_slots(pol, 100)
    assert len(d["training"]) == 168
    monday_noon, saturday_noon, monday_3am, friday_22 = 12, 5 * 24 + 12, 3, 4 * 24 + 22
    assert d["inference"][monday_noon] == 70
    assert d["inference"][saturday_noon] == 10
    assert d["training"][monday_3am] == 90  # before the first weekday window: default
    assert d["training"][friday_22] == 90  # Friday night belongs to the weekend
    assert d["training"][24 + 3] == 80  # Tuesday 03:00: Monday's night window


def test_every_preset_loads_and_checks(tmp_path: Path) -> None:
    assert set(loader.presets()) >= {"constant", "day-night", "weekday-weekend"}
    for name in loader.presets():
        pol = loader.load(name)
        assert pol.horizon_hours in (24, 168)


def test_slot_at_uses_the_policy_time_zone() -> None:
    pol = constraints.apply(loader.load("day-night"), constraints.Overrides(timezone="America/New_York"))
    # 13:00 UTC in November is 08:00 in New York (EST, UTC-5)
    assert slot_at(pol, datetime(2026, 11, 29, 13, 0, tzinfo=UTC)) == 8
    week = constraints.apply(loader.load("weekday-weekend"), constraints.Overrides(timezone="Asia/Tokyo"))
    # Sunday 2026-11-29 16:00 UTC is Monday 01:00 in Tokyo
    assert slot_at(week, datetime(2026, 11, 29, 16, 0, tzinfo=UTC)) == 1
    with pytest.raises(ValueError):
        slot_at(pol, datetime(2026, 11, 29, 13, 0))


def test_window_starts_in_slot_order() -> None:
    assert window_starts(loader.load("day-night")) == [("day", 8), ("night", 20)]


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "workloads: {training: {max_spot_fraction: 1.5}}\nschedule: {default: {training: 8}}",
            "workloads.training.max_spot_fraction: must be between 0 and 1",
        ),
        (
            "workloads: {training: {}}\nschedule: {default: {training: 8}}\nhorizon_hours: 12",
            "horizon_hours: must be 24 (a day) or 168 (a week)",
        ),
        (
            "workloads: {training: {}}\nschedule: {default: {training: 8}}\ntimezone: Mars/Olympus",
            "timezone: unknown time zone",
        ),
        (  # a misspelt workload is a workload of its own: the schedule naming the right one fails
            "workloads: {trainig: {}}\nschedule: {default: {training: 8}}",
            "schedule.default.training: unknown key",
        ),
        ("workloads: {Training: {}}", "workloads.Training: a workload name is 1-30 lower-case letters"),
        ("workloads: {train_ing: {}}", "workloads.train_ing: a workload name"),
        ("workloads: {'-x': {}}", "workloads.-x: a workload name"),
        ("workloads: {1: {}}", "workloads.1: a workload name"),
        ("workloads: {" + ", ".join(f"w{i}: {{}}" for i in range(17)) + "}", "workloads: at most 16 workloads, got 17"),
        (
            "workloads: {training: {}}\nschedule: {windows: [{start: '8:30', end: '20:00', demand: {training: 1}}]}",
            "schedule.windows[0].start: must be a whole hour",
        ),
        (
            "workloads: {training: {}}\nschedule: {windows: [{start: '08:00', demand: {training: 1}}]}",
            "schedule.windows[0].end: is required",
        ),
        ("workloads: {training: {}}\nschedule: {default: {inference: 8}}", "schedule.default.inference: unknown key"),
        (
            "workloads: {training: {gang: yes please}}\nschedule: {default: {training: 8}}",
            "workloads.training.gang: must be true or false",
        ),
        (
            "workloads: {training: {}}\nschedule: {default: {training: 8}}\nmarkets: [spot, bargain]",
            "markets[1]: unknown value (expected one of",
        ),
        ("workloads: [training]", "workloads: must be a mapping"),
        ("workloads: {training: {}\n", "line"),
        (
            "workloads: {training: {interconnect: nvlink}}\nschedule: {default: {training: 8}}",
            "workloads.training.interconnect: must be one of: any, efa, rdma, infiniband",
        ),
        (
            "workloads: {training: {interconnect: [efa]}}\nschedule: {default: {training: 8}}",
            "workloads.training.interconnect: must be one of",
        ),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        loader.load(path)
    assert err.value.message.startswith(f"{path}:")
    assert message in err.value.message


def test_any_workload_names_and_count_reach_the_plan(tmp_path: Path) -> None:
    """Three workloads of any (valid) names: each keeps its shape, its demand per slot and its
    default lost work (a gang's is training's, anything else inference's)."""
    path = _write(
        tmp_path,
        "gpu: a100\ngpus: 40\nworkloads: {pretrain: {gang: true, node_gpus: 8}, serve: {spread_zones: 2},"
        " batch-eval: {max_spot_fraction: 0.9}}\n"
        "schedule: {default: {pretrain: 16, serve: 30%, batch-eval: 12}}",
    )
    pol = loader.load(path)
    assert list(pol.workloads) == ["pretrain", "serve", "batch-eval"]
    ws = {w.name: w for w in constraints.workloads(pol)}
    assert ws["pretrain"].gang and ws["pretrain"].lost_hours_per_interruption == Decimal("1.0")
    assert ws["serve"].spread_zones == 2 and ws["serve"].lost_hours_per_interruption == Decimal("0.05")
    assert ws["batch-eval"].max_spot_fraction == Decimal("0.9")
    assert constraints.demand(pol) == {"pretrain": (16,) * 24, "serve": (12,) * 24, "batch-eval": (12,) * 24}


def test_unknown_policy_name_lists_presets() -> None:
    with pytest.raises(ConfigError) as err:
        loader.load("nightshift")
    assert err.value.hint is not None and "day-night" in err.value.hint


def _offer(region: str, itype: str = "p4d.24xlarge", market: Market = Market.ON_DEMAND) -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region=region,
        zone=None,
        instance_type=itype,
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=Decimal(1152),
        market=market,
        hourly_usd=Decimal(30),
    )


def test_filters_and_caps(tmp_path: Path) -> None:
    pol = loader.load(
        _write(
            tmp_path,
            """
workloads: {training: {}}
schedule: {default: {training: 16}}
regions: {allow: ["us-*"], deny: ["us-west-*"]}
markets: [on_demand]
caps:
  offers:
    - {region: "us-east-*", instance_type: "p4d.*", max_instances: 3}
    - {instance_type: "p4d.*", max_instances: 5}
  regions:
    - {cloud: aws, region: us-east-1, max_instances: 4}
""",
        )
    )
    from gpuprov import planning

    east, west, eu = _offer("us-east-1"), _offer("us-west-2"), _offer("eu-west-1")
    spec = planning.policy_spec(
        constraints.apply(pol, constraints.Overrides(gpu="a100", gpus=16)), [east.gpu], "cbc", 0.001, 60.0
    )
    assert [planning.allowed(spec, o) for o in (east, west, eu)] == [True, False, False]
    assert not planning.allowed(spec, _offer("us-east-1", market=Market.SPOT))
    # the caps the planner applies: the tightest matching glob per offer, the region caps as given
    request = planning.request_from_spec(replace(spec, regions_allow=(), regions_deny=()), [east, eu])
    assert dict(request.offer_caps) == {east.key: 3, eu.key: 5}
    assert dict(request.region_caps) == {("aws", "us-east-1"): 4}


def test_absolute_and_percent_amounts(tmp_path: Path) -> None:
    pol = loader.load(
        _write(
            tmp_path,
            """
workloads: {training: {}, inference: {}}
schedule: {default: {training: 10, inference: "25%"}}
""",
        )
    )
    d = demand_slots(pol, 40)
    assert d["training"] == (10,) * 24 and d["inference"] == (10,) * 24


@pytest.mark.parametrize(
    ("fabric", "accepted"),
    [
        ("any", None),
        ("efa", {"efa"}),
        ("infiniband", {"infiniband"}),
        ("rdma", {"efa", "infiniband", "GPUDirect-RDMA"}),
    ],
)
def test_interconnect_restricts_a_workload_to_offers_that_have_it(
    tmp_path: Path, fabric: str, accepted: set[str] | None
) -> None:
    from gpuprov.optimizer.problem import eligible
    from policies import constraints
    from tests.plans import bundled

    text = (
        "workloads:\n"
        f"  training: {{node_gpus: 8, gang: true, interconnect: {fabric}}}\n"
        "  inference: {}\n"
        "schedule: {default: {training: 8, inference: 8}}\n"
    )
    pol = loader.load(_write(tmp_path, text))
    training, inference = sorted(constraints.workloads(pol), key=lambda w: w.name != "training")
    assert training.interconnect == (None if accepted is None else tuple(sorted(accepted)))
    assert inference.interconnect is None
    offers, _ = bundled()
    eights = [o for o in offers if o.gpus_per_instance == 8 and o.gpu_fraction is None]
    for o in eights:
        assert eligible(o, training) == (accepted is None or o.interconnect in accepted), o.instance_type
        assert eligible(o, inference)


def test_the_bundle_names_efa_and_infiniband_from_the_instance_specs() -> None:
    from pricing import interconnect
    from tests.plans import bundled

    offers, _ = bundled()
    by_type = {(o.cloud.value, o.instance_type): o.interconnect for o in offers}
    assert by_type[("aws", "p5.48xlarge")] == by_type[("aws", "p4d.24xlarge")] == "efa"
    assert by_type[("aws", "p3.16xlarge")] is None and by_type[("aws", "g5.xlarge")] is None
    assert by_type[("azure", "Standard_ND96isr_H100_v5")] == "infiniband"
    assert by_type[("azure", "Standard_ND96asr_v4")] == by_type[("azure", "Standard_NC24rs_v3")] == "infiniband"
    assert by_type[("azure", "Standard_NC24ads_A100_v4")] is None
    for (cloud, itype), value in by_type.items():
        if cloud in ("aws", "azure"):
            assert value == interconnect.of(cloud, itype)


def test_a_plan_for_an_rdma_gang_places_it_on_rdma_offers(tmp_path: Path) -> None:
    from gpuprov import planning
    from tests.plans import bundled

    text = (
        "gpu: a100\ngpus: 64\n"
        "workloads:\n  training: {node_gpus: 8, gang: true, interconnect: rdma}\n  inference: {}\n"
        "schedule: {default: {training: 50%, inference: 50%}}\n"
    )
    pol = loader.load(_write(tmp_path, text))
    from pricing.gpus import resolve

    spec = planning.policy_spec(pol, resolve("a100"), "cbc", 0.01, 60.0)
    offers, _ = bundled()
    solved = planning.run(planning.request_from_spec(spec, offers))
    used = [a.offer for a in solved.plan.allocations if a.workload == "training"]
    used += [r.offer for r in solved.plan.reservations if r.gpus_used_by_slot.get("training")]
    assert used and all(o.interconnect in ("efa", "infiniband", "GPUDirect-RDMA") for o in used)
