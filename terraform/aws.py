"""AWS: launch templates, an Auto Scaling group per scaling group, scheduled actions, placement.

* One ``aws_launch_template`` per (group, instance type).
* One ``aws_autoscaling_group`` per group with a ``mixed_instances_policy``: on-demand base
  capacity = reserved instances + the fewest on-demand instances over the slots; the percentage
  above base is the on-demand share of the rest, over all slots, rounded up (never more spot than
  planned). AWS rejects launch templates that request spot (``instance_market_options``) inside a
  mixed instances policy, so spot goes through the instances distribution there. Only a group
  that is all spot on a single instance type uses its launch template directly, and that template
  asks for spot through ``instance_market_options``.
* When a group mixes instance types with different GPU counts, capacity is counted in GPUs
  (``weighted_capacity`` = GPUs per instance); otherwise in instances.
* One ``aws_autoscaling_schedule`` per window, firing at the window's start in the plan's time zone.
* A cluster ``aws_placement_group`` for gang (training) groups.
* Zones in the plan are AZ *IDs* (``use1-az4``); Auto Scaling places instances by subnet, so each
  zone ID gets a subnet variable (``aws_subnet_id_use1_az4``); capacity reservations need the
  account's AZ *name* for the ID (``aws_availability_zone_use1_az4``).
* Reserved instances are billing: they are listed in the ``aws_reserved_instances`` output, and an
  ``aws_ec2_capacity_reservation`` is created only when asked (``gpuprov terraform --capacity-reservation``).
"""

from __future__ import annotations

import math
from typing import Any

from gpuprov.bootstrap import b64
from terraform.blocks import CloudDoc, output, reserved_entry, variable
from terraform.names import ident, interp, named
from terraform.plan import Group, PlanDoc
from terraform.schedule import cron

LATEST = "$Latest"


def render(plan: PlanDoc) -> CloudDoc:
    groups = plan.groups("aws")
    regions = sorted({g.region for g in groups})
    doc = CloudDoc(provider={"aws": {"region": regions[0], "default_tags": {"tags": {"managed-by": "gpuprov"}}}})
    for region in regions:
        r = ident(region)
        doc.variables[f"aws_image_id_{r}"] = variable(
            "string", f"AMI ID for the GPU instances in {region} (AMIs are regional)"
        )
        doc.variables[f"aws_security_group_ids_{r}"] = variable(
            "list(string)", f"Security group IDs for the instances in {region} (empty: the VPC default)", []
        )
    doc.variables["aws_key_name"] = variable("string", "EC2 key pair name for SSH access (null: none)", None)
    for g in groups:
        _group(plan, g, doc)
    doc.outputs["aws_autoscaling_groups"] = output(
        {g.label: interp(f"aws_autoscaling_group.{g.label}.name") for g in groups},
        "Auto Scaling group name per gpuprov scaling group",
    )
    doc.outputs["aws_reserved_instances"] = output(
        [reserved_entry(a, g.label) for g in groups for a in g.reserved],
        "Reserved instances the plan assumes (a billing commitment to buy separately, not a resource)",
    )
    if "aws_ec2_capacity_reservation" in doc.resources:
        doc.outputs["aws_capacity_reservation_ids"] = output(
            {
                k: interp(f"aws_ec2_capacity_reservation.{k}.id")
                for k in sorted(doc.resources["aws_ec2_capacity_reservation"])
            },
            "Capacity reservations holding the reserved instances' capacity",
        )
    return doc


def _group(plan: PlanDoc, g: Group, doc: CloudDoc) -> None:
    slots = plan.horizon_hours
    weighted = len({a.gpus_per_instance for a in g.allocations}) > 1

    def units(a_gpus: int) -> int:
        return a_gpus if weighted else 1

    cap = tuple(sum(units(a.gpus_per_instance) * a.instances_by_slot[t] for a in g.allocations) for t in range(slots))
    od = tuple(
        sum(units(a.gpus_per_instance) * a.instances_by_slot[t] for a in g.allocations if not a.spot)
        for t in range(slots)
    )
    types = g.instance_types
    single_spot = all(a.spot for a in g.allocations) and len(types) == 1
    tags = {
        "Name": named("name_prefix", g.workload, g.location),
        "gpuprov:group": g.label,
        "gpuprov:workload": g.workload,
    }

    lt_names = {}
    for itype in types:
        lt = ident(g.label, itype)
        lt_names[itype] = lt
        efa = g.gang and any(a.instance_type == itype and a.interconnect == "efa" for a in g.allocations)
        doc.add("aws_launch_template", lt, _launch_template(plan, g, itype, tags, spot=single_spot, efa=efa))

    if g.gang:
        doc.add(
            "aws_placement_group",
            g.label,
            {
                "name": named("name_prefix", g.workload, g.location),
                "region": g.region,
                "strategy": "cluster",
                "tags": tags,
            },
        )

    asg: dict[str, Any] = {
        "name": named("name_prefix", g.workload, g.location),
        "region": g.region,
        "min_size": min(cap),
        "max_size": max(cap),
        "desired_capacity": cap[0],
        "vpc_zone_identifier": _subnets(g, doc),
        "capacity_rebalance": any(a.spot for a in g.allocations),
        "tag": [{"key": k, "value": v, "propagate_at_launch": True} for k, v in sorted(tags.items())],
    }
    if g.gang:
        asg["placement_group"] = interp(f"aws_placement_group.{g.label}.name")
    if single_spot:
        asg["launch_template"] = {"id": interp(f"aws_launch_template.{lt_names[types[0]]}.id"), "version": LATEST}
    else:
        base = min(od)
        above = sum(c - base for c in cap)
        pct = 100 if above == 0 else math.ceil(100 * sum(o - base for o in od) / above)
        gpus = {a.instance_type: a.gpus_per_instance for a in g.allocations}
        asg["mixed_instances_policy"] = {
            "instances_distribution": {
                "on_demand_base_capacity": base,
                "on_demand_percentage_above_base_capacity": pct,
                "on_demand_allocation_strategy": "prioritized",
                "spot_allocation_strategy": "price-capacity-optimized",
            },
            "launch_template": {
                "launch_template_specification": {
                    "launch_template_id": interp(f"aws_launch_template.{lt_names[types[0]]}.id"),
                    "version": LATEST,
                },
                "override": [_override(t, lt_names[t], str(gpus[t]) if weighted else None) for t in types],
            },
        }
    windows = plan.schedule_windows()
    if windows:
        asg["lifecycle"] = {"ignore_changes": ["desired_capacity"]}
    doc.add("aws_autoscaling_group", g.label, asg)

    for w in windows:
        doc.add(
            "aws_autoscaling_schedule",
            ident(g.label, w.name),
            {
                "autoscaling_group_name": interp(f"aws_autoscaling_group.{g.label}.name"),
                "scheduled_action_name": w.name,
                "region": g.region,
                "recurrence": cron(w.start_slot, plan.slot_origin),
                "time_zone": plan.timezone,
                "desired_capacity": cap[w.start_slot],
                "min_size": min(cap),
                "max_size": max(cap),
            },
        )

    if plan.capacity_reservation:
        for a in g.reserved:
            zone = a.zone or g.zone
            if zone is None:
                continue  # a regional reservation in a regional group: nowhere to hold capacity
            zvar = f"aws_availability_zone_{ident(zone)}"
            doc.variables[zvar] = variable(
                "string",
                f"Name of the availability zone whose ID is {zone} in your account "
                "(zone names are per-account aliases of zone IDs)",
            )
            doc.add(
                "aws_ec2_capacity_reservation",
                ident(g.label, a.instance_type, a.market),
                {
                    "availability_zone": interp(f"var.{zvar}"),
                    "region": a.region,
                    "instance_type": a.instance_type,
                    "instance_count": a.instances,
                    "instance_platform": "Linux/UNIX",
                    "instance_match_criteria": "open",
                    "end_date_type": "unlimited",
                    "tags": tags,
                },
            )


def _launch_template(
    plan: PlanDoc, g: Group, itype: str, tags: dict[str, str], *, spot: bool, efa: bool = False
) -> dict[str, Any]:
    r = ident(g.region)
    body: dict[str, Any] = {
        "name": named("name_prefix", g.workload, g.location, itype, limit=100),
        "region": g.region,
        "image_id": interp(f"var.aws_image_id_{r}"),
        "instance_type": itype,
        "key_name": interp("var.aws_key_name"),
        "vpc_security_group_ids": interp(f"var.aws_security_group_ids_{r}"),
        "update_default_version": True,
        "metadata_options": {"http_endpoint": "enabled", "http_tokens": "required"},
        "tag_specifications": [{"resource_type": "instance", "tags": tags}],
        "tags": tags,
    }
    user_data = plan.user_data("aws", g.workload, [a.market for a in g.allocations if a.instance_type == itype])
    if user_data is not None:
        body["user_data"] = b64(user_data)  # a launch template takes it base64-encoded
    if efa:
        # a gang on an EFA type: the primary interface is an EFA one (the security groups move
        # into it; the Auto Scaling group's subnet still applies), in the group's cluster placement group
        del body["vpc_security_group_ids"]
        body["network_interfaces"] = [
            {
                "device_index": 0,
                "interface_type": "efa",
                "security_groups": interp(f"var.aws_security_group_ids_{r}"),
                "delete_on_termination": True,
            }
        ]
    if spot:
        body["instance_market_options"] = {
            "market_type": "spot",
            "spot_options": {"instance_interruption_behavior": "terminate", "spot_instance_type": "one-time"},
        }
    return body


def _override(itype: str, lt: str, weight: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "instance_type": itype,
        "launch_template_specification": {
            "launch_template_id": interp(f"aws_launch_template.{lt}.id"),
            "version": LATEST,
        },
    }
    if weight is not None:
        out["weighted_capacity"] = weight
    return out


def _subnets(g: Group, doc: CloudDoc) -> Any:
    if g.zone is None:
        name = f"aws_subnet_ids_{ident(g.region)}"
        doc.variables[name] = variable("list(string)", f"Subnet IDs in {g.region} for regional capacity")
        return interp(f"var.{name}")
    name = f"aws_subnet_id_{ident(g.zone)}"
    doc.variables[name] = variable("string", f"Subnet ID in availability zone ID {g.zone} ({g.region})")
    return [interp(f"var.{name}")]
