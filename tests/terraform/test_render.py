"""What the rendered Terraform says, per cloud, and how plans are read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuprov.plandoc import PlanDocument
from terraform.plan import PlanFormatError, read_plan
from terraform.provider_schemas import SCHEMA_VERSIONS
from terraform.render import render_plan
from terraform.schema_check import check_files
from terraform.tfsyntax import admits
from tests.plans import alloc, handmade, layout

LAYOUTS = Path(__file__).resolve().parent / "layouts"


def load(case: str) -> PlanDocument:
    """A hand-drawn layout (see tests/plans.py): each exercises rendering rules on purpose; the
    goldens (test_golden.py) render what the planner itself produces."""
    doc: dict[str, Any] = json.loads((LAYOUTS / f"{case}.json").read_text(encoding="utf-8"))
    return layout(doc)


def render(doc: PlanDocument) -> dict[str, dict[str, Any]]:
    return render_plan(doc, capacity_reservation=doc.plan_id == "a1b2c3d4e5f6")


def plan(
    allocs: list[dict[str, Any]],
    *,
    windows: list[dict[str, Any]] | None = None,
    horizon: int = 24,
    tz: str = "UTC",
    origin: str = "day",
) -> PlanDocument:
    return handmade(allocs, windows=windows, horizon=horizon, tz=tz, origin="constant" if horizon == 1 else origin)


def resources(files: dict[str, dict[str, Any]], name: str, rtype: str) -> dict[str, Any]:
    found: dict[str, Any] = files[name].get("resource", {}).get(rtype, {})
    return found


def day(d: int, n: int) -> list[int]:
    return [n] * 8 + [d] * 12 + [n] * 4


DAY_NIGHT = [{"name": "day", "start_slot": 8, "end_slot": 20}, {"name": "night", "start_slot": 20, "end_slot": 8}]


# ------------------------------------------------------------------ all files


@pytest.mark.parametrize("case", ["aws_only", "day_night", "three_clouds"])
def test_every_file_names_plan_and_cost(case: str) -> None:
    files = render(load(case))
    monthly = f"{load(case).costs.monthly_usd:,.2f} USD"
    for name, doc in files.items():
        assert load(case).plan_id in doc["//"], name
        assert monthly in doc["//"], name
        assert next(iter(doc)) == "//"


def test_provider_constraints_admit_schema_versions() -> None:
    required = render(load("three_clouds"))["versions.tf.json"]["terraform"]["required_providers"]
    assert set(required) == {"aws", "google", "azurerm"}
    for name, spec in required.items():
        assert spec["source"] == f"hashicorp/{name}"
        assert admits(spec["version"], SCHEMA_VERSIONS[name])


def test_no_secret_defaults() -> None:
    for case in ("aws_only", "day_night", "three_clouds"):
        for doc in render(load(case)).values():
            for name, var in doc.get("variable", {}).items():
                assert "ssh_public_key" != name or "default" not in var
                assert not var.get("sensitive")
                assert not any(w in name for w in ("password", "secret", "token"))


def test_a_plan_with_nothing_to_run_is_refused() -> None:
    assert read_plan(plan([alloc("aws", "on_demand", [1] * 24)])).clouds == ("aws",)
    with pytest.raises(PlanFormatError, match="no allocations"):
        render_plan(plan([]))


# ------------------------------------------------------------------ AWS


def test_aws_mixed_group_counts_reserved_into_on_demand_base() -> None:
    files = render(load("day_night"))
    asg = resources(files, "aws.tf.json", "aws_autoscaling_group")["training_use1_az4"]
    dist = asg["mixed_instances_policy"]["instances_distribution"]
    assert dist["on_demand_base_capacity"] == 4  # 2 reserved p4d + 2 on-demand p4de (the daytime minimum)
    assert dist["on_demand_percentage_above_base_capacity"] == 100
    overrides = [o["instance_type"] for o in asg["mixed_instances_policy"]["launch_template"]["override"]]
    assert overrides == ["p4d.24xlarge", "p4de.24xlarge"]  # the reserved type first
    assert (asg["min_size"], asg["max_size"], asg["desired_capacity"]) == (4, 6, 6)
    assert asg["placement_group"] == "${aws_placement_group.training_use1_az4.name}"
    assert asg["lifecycle"] == {"ignore_changes": ["desired_capacity"]}
    pg = resources(files, "aws.tf.json", "aws_placement_group")["training_use1_az4"]
    assert pg["strategy"] == "cluster"
    reserved = files["aws.tf.json"]["output"]["aws_reserved_instances"]["value"]
    assert [(r["instance_type"], r["instances"], r["runs_in_group"]) for r in reserved] == [
        ("p4d.24xlarge", 2, "training_use1_az4")
    ]
    assert "aws_ec2_capacity_reservation" not in files["aws.tf.json"]["resource"]


def test_aws_schedule_per_window() -> None:
    files = render(load("day_night"))
    schedules = resources(files, "aws.tf.json", "aws_autoscaling_schedule")
    assert sorted(schedules) == ["training_use1_az4_day", "training_use1_az4_night"]
    d, n = schedules["training_use1_az4_day"], schedules["training_use1_az4_night"]
    assert (d["recurrence"], d["desired_capacity"], d["time_zone"]) == ("0 8 * * *", 4, "America/New_York")
    assert (n["recurrence"], n["desired_capacity"]) == ("0 20 * * *", 6)
    assert d["autoscaling_group_name"] == "${aws_autoscaling_group.training_use1_az4.name}"


def test_aws_spot_only_group_uses_spot_launch_template() -> None:
    files = render(load("aws_only"))
    asg = resources(files, "aws.tf.json", "aws_autoscaling_group")["inference_usw2_az1"]
    assert "mixed_instances_policy" not in asg
    assert asg["launch_template"]["id"] == "${aws_launch_template.inference_usw2_az1_g6_xlarge.id}"
    lt = resources(files, "aws.tf.json", "aws_launch_template")["inference_usw2_az1_g6_xlarge"]
    assert lt["instance_market_options"]["market_type"] == "spot"


def test_aws_mixed_policy_templates_never_request_spot() -> None:
    # AWS rejects launch templates with instance_market_options inside a mixed instances policy
    for case in ("aws_only", "day_night", "three_clouds"):
        files = render(load(case))
        templates = resources(files, "aws.tf.json", "aws_launch_template")
        for asg in resources(files, "aws.tf.json", "aws_autoscaling_group").values():
            for o in asg.get("mixed_instances_policy", {}).get("launch_template", {}).get("override", []):
                name = o["launch_template_specification"]["launch_template_id"].split(".")[1]
                assert "instance_market_options" not in templates[name]


def test_aws_constant_plan_has_no_schedules_and_capacity_reservation_on_request() -> None:
    files = render(load("aws_only"))
    assert "aws_autoscaling_schedule" not in files["aws.tf.json"]["resource"]
    asg = resources(files, "aws.tf.json", "aws_autoscaling_group")["training_use1_az4"]
    assert "lifecycle" not in asg
    dist = asg["mixed_instances_policy"]["instances_distribution"]
    assert (dist["on_demand_base_capacity"], dist["on_demand_percentage_above_base_capacity"]) == (5, 0)
    (cr,) = resources(files, "aws.tf.json", "aws_ec2_capacity_reservation").values()
    assert (cr["instance_type"], cr["instance_count"]) == ("g6.48xlarge", 3)
    assert cr["availability_zone"] == "${var.aws_availability_zone_use1_az4}"
    assert "aws_availability_zone_use1_az4" in files["aws.tf.json"]["variable"]


def test_aws_weighted_capacity_when_gpu_counts_differ() -> None:
    files = render(load("three_clouds"))
    asg = resources(files, "aws.tf.json", "aws_autoscaling_group")["inference_euc1_az3"]
    overrides = asg["mixed_instances_policy"]["launch_template"]["override"]
    assert {o["instance_type"]: o["weighted_capacity"] for o in overrides} == {"g6e.xlarge": "1", "g6e.12xlarge": "4"}
    assert (asg["min_size"], asg["max_size"]) == (2, 12)  # in GPUs
    dist = asg["mixed_instances_policy"]["instances_distribution"]
    assert (dist["on_demand_base_capacity"], dist["on_demand_percentage_above_base_capacity"]) == (2, 20)


def test_aws_week_schedule_uses_day_of_week() -> None:
    files = render(load("three_clouds"))
    s = resources(files, "aws.tf.json", "aws_autoscaling_schedule")
    assert s["training_euc1_az2_mon_work"]["recurrence"] == "0 9 * * 1"
    assert s["training_euc1_az2_fri_off"]["recurrence"] == "0 18 * * 5"
    assert len([k for k in s if k.startswith("training_euc1_az2_")]) == 10


# ------------------------------------------------------------------ GCP


def test_gcp_templates_and_autoscaler() -> None:
    files = render(load("day_night"))
    (tpl,) = resources(files, "gcp.tf.json", "google_compute_instance_template").values()
    assert tpl["scheduling"] == {
        "provisioning_model": "SPOT",
        "preemptible": True,
        "automatic_restart": False,
        "on_host_maintenance": "TERMINATE",
        "instance_termination_action": "DELETE",
    }
    assert tpl["guest_accelerator"] == {"type": "nvidia-a100-80gb", "count": 1}
    (mig,) = resources(files, "gcp.tf.json", "google_compute_instance_group_manager").values()
    assert "target_size" not in mig and mig["zone"] == "us-central1-a"
    (auto,) = resources(files, "gcp.tf.json", "google_compute_autoscaler").values()
    policy = auto["autoscaling_policy"]
    assert (policy["min_replicas"], policy["max_replicas"]) == (4, 13)
    assert [
        (s["name"], s["schedule"], s["duration_sec"], s["min_required_replicas"]) for s in policy["scaling_schedules"]
    ] == [("day", "0 8 * * *", 43200, 13), ("night", "0 20 * * *", 43200, 4)]


def test_gcp_every_gpu_vm_terminates_on_maintenance() -> None:
    files = render(load("three_clouds"))
    templates = resources(files, "gcp.tf.json", "google_compute_instance_template")
    assert len(templates) == 3
    for name, tpl in templates.items():
        assert tpl["scheduling"]["on_host_maintenance"] == "TERMINATE", name
        assert (tpl["scheduling"]["provisioning_model"] == "SPOT") == name.endswith("_spot")
    od = templates["inference_europe_west4_b_g2_standard_8_od"]
    assert od["scheduling"]["automatic_restart"] is True
    committed = files["gcp.tf.json"]["output"]["gcp_committed_use"]["value"]
    assert [(c["instance_type"], c["runs_in_group"]) for c in committed] == [
        ("g2-standard-8", "inference_europe_west4_b")
    ]


def test_gcp_constant_plan_sets_target_size() -> None:
    files = render_plan(
        plan(
            [alloc("gcp", "on_demand", [3], region="us-central1", zone="us-central1-b", itype="g2-standard-4")],
            horizon=1,
        )
    )
    (mig,) = resources(files, "gcp.tf.json", "google_compute_instance_group_manager").values()
    assert mig["target_size"] == 3
    assert "google_compute_autoscaler" not in files["gcp.tf.json"]["resource"]
    assert check_files(files) == []


# ------------------------------------------------------------------ Azure


def test_azure_spot_scale_set_and_recurrences() -> None:
    files = render(load("three_clouds"))
    sets = resources(files, "azure.tf.json", "azurerm_linux_virtual_machine_scale_set")
    spot = sets["inference_westeurope_standard_nc40ads_h100_v5_spot"]
    assert (spot["priority"], spot["eviction_policy"], spot["max_bid_price"]) == ("Spot", "Delete", -1)
    regular = sets["inference_westeurope_standard_nc40ads_h100_v5_od"]
    assert regular["priority"] == "Regular" and "eviction_policy" not in regular
    auto = resources(files, "azure.tf.json", "azurerm_monitor_autoscale_setting")[
        "inference_westeurope_standard_nc40ads_h100_v5_spot"
    ]
    first = auto["profile"][0]
    assert first["name"] == "mon-work"
    assert first["recurrence"] == {
        "timezone": "W. Europe Standard Time",
        "days": ["Monday"],
        "hours": [9],
        "minutes": [0],
    }
    assert first["capacity"] == {"default": 4, "minimum": 4, "maximum": 4}
    assert len(auto["profile"]) == 10
    rg = resources(files, "azure.tf.json", "azurerm_resource_group")["gpuprov"]
    assert rg["location"] == "${var.azure_resource_group_location}"


def test_azure_too_many_windows() -> None:
    windows = [{"name": f"h{t}", "start_slot": t, "end_slot": (t + 1) % 24} for t in range(24)]
    with pytest.raises(PlanFormatError, match="20 profiles"):
        render_plan(plan([alloc("azure", "on_demand", [1] * 24, region="eastus", zone=None)], windows=windows))


# ------------------------------------------------------------------ grouping and windows


def test_windows_derived_from_changes_when_plan_names_none() -> None:
    files = render_plan(plan([alloc("aws", "on_demand", day(5, 2))]))
    schedules = resources(files, "aws.tf.json", "aws_autoscaling_schedule")
    assert {s["scheduled_action_name"]: (s["recurrence"], s["desired_capacity"]) for s in schedules.values()} == {
        "08h": ("0 8 * * *", 5),
        "20h": ("0 20 * * *", 2),
    }


def test_a_constant_plan_cannot_carry_windows() -> None:
    from gpuprov import errors

    with pytest.raises(errors.PlanFormatError, match=r"windows\.0\.start_slot"):
        plan([alloc("aws", "on_demand", [2])], horizon=1, windows=DAY_NIGHT)


def test_unmatched_reservation_gets_its_own_group() -> None:
    allocs = [
        alloc("aws", "on_demand", day(4, 2)),
        alloc("aws", "reserved_3y", [1] * 24, workload="reserved", itype="p5.48xlarge", gpus=8, zone="use1-az2"),
    ]
    files = render_plan(plan(allocs, windows=DAY_NIGHT))
    groups = resources(files, "aws.tf.json", "aws_autoscaling_group")
    assert sorted(groups) == ["inference_use1_az1", "reserved_use1_az2"]
    assert groups["reserved_use1_az2"]["desired_capacity"] == 1
    assert check_files(files) == []


def test_reservation_joins_group_by_node_size() -> None:
    allocs = [
        alloc("aws", "on_demand", [2] * 24, workload="training", itype="p5.48xlarge", gpus=8),
        alloc("aws", "on_demand", [3] * 24, workload="inference"),
        alloc("aws", "reserved_1y", [1] * 24, workload="reserved", itype="p4d.24xlarge", gpus=8, zone=None),
    ]
    doc = read_plan(plan(allocs))
    (inference, training) = doc.groups("aws")
    assert [a.instance_type for a in training.allocations] == ["p5.48xlarge", "p4d.24xlarge"]
    assert training.instance_types == ("p4d.24xlarge", "p5.48xlarge")
    assert len(inference.allocations) == 1


def test_gang_from_the_workload_flag_not_its_name() -> None:
    from decimal import Decimal

    from gpuprov.plandoc import WorkloadSpec

    allocs = [
        alloc("aws", "on_demand", [1] * 24, workload="pretrain"),
        alloc("aws", "on_demand", [1] * 24, workload="training", zone="use1-az2"),
    ]
    p = handmade(
        allocs,
        workloads=(
            WorkloadSpec("pretrain", Decimal("0.5"), 1, gang=True),
            WorkloadSpec("training", Decimal("0.5"), 1, gang=False),
        ),
    )
    pgs = resources(render_plan(p), "aws.tf.json", "aws_placement_group")
    assert sorted(pgs) == ["pretrain_use1_az1"]


def test_allocation_order_does_not_matter() -> None:
    from dataclasses import replace

    doc = load("three_clouds")
    shuffled = replace(
        doc, allocations=tuple(reversed(doc.allocations)), reservations=tuple(reversed(doc.reservations))
    )
    assert json.dumps(render(shuffled), sort_keys=True) == json.dumps(render(load("three_clouds")), sort_keys=True)


def test_gcp_capacity_needs_a_zone() -> None:
    with pytest.raises(PlanFormatError, match="GCP allocations need a zone"):
        render_plan(plan([alloc("gcp", "spot", [1] * 24, region="us-central1", zone=None, itype="g2-standard-4")]))


def test_gcp_gangs_get_a_compact_placement_policy_on_every_template() -> None:
    from terraform.plan import read_plan
    from terraform.render import render_plan
    from tests.plans import planned

    doc = planned("weekday_weekend")
    gcp = render_plan(doc)["gcp.tf.json"]["resource"]
    policies = gcp["google_compute_resource_policy"]
    assert policies and all(p["group_placement_policy"] == {"collocation": "COLLOCATED"} for p in policies.values())
    plan = read_plan(doc)
    for tpl in gcp["google_compute_instance_template"].values():
        gang = plan.is_gang(tpl["labels"]["gpuprov-workload"])
        refs = tpl.get("resource_policies", [])
        assert (len(refs) == 1) == gang
        if gang:
            assert refs[0].removeprefix("${google_compute_resource_policy.").split(".")[0] in policies
