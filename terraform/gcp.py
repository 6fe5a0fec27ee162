"""GCP: an instance template, a zonal managed instance group and an autoscaler per template.

A MIG runs one instance template, and a template is either spot or standard, so a scaling group
(zone, workload) gets one MIG per (instance type, spot or not), each sized exactly as planned.
Reserved (committed-use) instances run in the standard template's MIG of their type; the
commitment itself is billing and is listed in the ``gcp_committed_use`` output.

Every GPU VM sets ``on_host_maintenance = TERMINATE`` (GPUs cannot live-migrate); spot VMs also set
``provisioning_model = SPOT``, ``preemptible = true`` and ``automatic_restart = false``.
With windows, a ``google_compute_autoscaler`` holds one scaling schedule per window (the capacity
at the window's start, for the window's duration); without, the MIG has a fixed ``target_size``.
"""

from __future__ import annotations

from typing import Any

from gpuprov.vocabulary import accelerator_type
from terraform.blocks import CloudDoc, output, reserved_entry, variable
from terraform.names import Expr, ident, interp, named, slug
from terraform.plan import Group, PlanDoc, PlanFormatError, Template
from terraform.schedule import cron, window_hours


def _accelerator(machine_type: str, gpu: str) -> str:
    found = accelerator_type(machine_type, gpu)
    if found is None:
        raise PlanFormatError(f"no GCP accelerator type known for {gpu!r} on {machine_type!r}")
    return found


def render(plan: PlanDoc) -> CloudDoc:
    groups = plan.groups("gcp")
    doc = CloudDoc(
        provider={"google": {"project": interp("var.gcp_project"), "default_labels": {"managed-by": "gpuprov"}}},
        shared_variables={"ssh_username", "ssh_public_key"},
    )
    doc.variables["gcp_project"] = variable("string", "GCP project ID to create the instances in")
    doc.variables["gcp_image"] = variable(
        "string", "Boot image (self link or family, e.g. projects/<p>/global/images/family/<f>) with GPU drivers"
    )
    doc.variables["gcp_network"] = variable("string", "VPC network for the instances", "default")
    doc.variables["gcp_boot_disk_size_gb"] = variable("number", "Boot disk size in GB", 200)
    for region in sorted({g.region for g in groups}):
        doc.variables[f"gcp_subnetwork_{ident(region)}"] = variable(
            "string", f"Subnetwork in {region} (null: the network's auto-mode subnet)", None
        )
    migs: dict[str, str] = {}
    for g in groups:
        if g.zone is None:
            if any(not a.reserved for a in g.allocations):
                raise PlanFormatError(f"GCP allocations need a zone: {g.workload} in {g.region} has none")
            continue  # a regional commitment nothing else runs on: listed in outputs only
        for tpl in g.templates():
            name = ident(g.label, tpl.instance_type, tpl.market_tag)
            _mig(plan, g, tpl, name, doc)
            migs[name] = interp(f"google_compute_instance_group_manager.{name}.instance_group")
    doc.outputs["gcp_instance_groups"] = output(migs, "Managed instance group per gpuprov template")
    doc.outputs["gcp_committed_use"] = output(
        [reserved_entry(a, g.label if g.zone else None) for g in groups for a in g.reserved],
        "Committed-use discounts the plan assumes (billing commitments to buy separately)",
    )
    return doc


def _mig(plan: PlanDoc, g: Group, tpl: Template, name: str, doc: CloudDoc) -> None:
    cap = tpl.by_slot(plan.horizon_hours)
    labels = {"gpuprov-group": slug(g.label), "gpuprov-workload": slug(g.workload)}
    template = _template(plan, g, tpl, labels)
    if plan.is_gang(g.workload):
        # a gang's VMs on one low-latency network: a compact placement policy per group (no
        # vm_count: the group's size follows the windows, and GCE allows COLLOCATED without it)
        policy = ident(g.label)
        if policy not in doc.resources.get("google_compute_resource_policy", {}):
            doc.add(
                "google_compute_resource_policy",
                policy,
                {
                    "name": named("name_prefix", g.workload, g.zone or "", "compact", limit=40),
                    "region": g.region,
                    "description": f"gpuprov: compact placement of gang {g.label}",
                    "group_placement_policy": {"collocation": "COLLOCATED"},
                },
            )
        template["resource_policies"] = [interp(f"google_compute_resource_policy.{policy}.self_link")]
    doc.add("google_compute_instance_template", name, template)
    mig: dict[str, Any] = {
        "name": named("name_prefix", g.workload, g.zone or "", tpl.instance_type, tpl.market_tag),
        "base_instance_name": named("name_prefix", g.workload, tpl.instance_type, tpl.market_tag, limit=37),
        "zone": g.zone,
        "version": {
            "name": "primary",
            "instance_template": interp(f"google_compute_instance_template.{name}.self_link"),
        },
    }
    windows = plan.schedule_windows()
    if not windows:
        mig["target_size"] = cap[0]
        doc.add("google_compute_instance_group_manager", name, mig)
        return
    doc.add("google_compute_instance_group_manager", name, mig)
    doc.add(
        "google_compute_autoscaler",
        name,
        {
            "name": named("name_prefix", g.workload, g.zone or "", tpl.instance_type, tpl.market_tag),
            "zone": g.zone,
            "target": interp(f"google_compute_instance_group_manager.{name}.id"),
            "autoscaling_policy": {
                "min_replicas": min(cap),
                "max_replicas": max(1, *cap),
                "mode": "ON",
                "scaling_schedules": [
                    {
                        "name": slug(w.name),
                        "schedule": cron(w.start_slot, plan.slot_origin),
                        "time_zone": plan.timezone,
                        "duration_sec": window_hours(w, plan.slot_origin) * 3600,
                        "min_required_replicas": cap[w.start_slot],
                        "description": f"gpuprov window {w.name}",
                    }
                    for w in windows
                ],
            },
        },
    )


def _template(plan: PlanDoc, g: Group, tpl: Template, labels: dict[str, str]) -> dict[str, Any]:
    scheduling: dict[str, Any] = {"on_host_maintenance": "TERMINATE"}
    if tpl.spot:
        scheduling.update(
            provisioning_model="SPOT", preemptible=True, automatic_restart=False, instance_termination_action="DELETE"
        )
    else:
        scheduling.update(provisioning_model="STANDARD", automatic_restart=True)
    out: dict[str, Any] = {
        "name_prefix": Expr(named("name_prefix", g.workload, tpl.instance_type, tpl.market_tag, limit=32) + "-"),
        "machine_type": tpl.instance_type,
        "region": g.region,
        "labels": labels,
        "disk": {
            "boot": True,
            "auto_delete": True,
            "source_image": interp("var.gcp_image"),
            "disk_size_gb": interp("var.gcp_boot_disk_size_gb"),
        },
        "guest_accelerator": {"type": _accelerator(tpl.instance_type, plan.gpu), "count": tpl.gpus_per_instance},
        "network_interface": {
            "network": interp("var.gcp_network"),
            "subnetwork": interp(f"var.gcp_subnetwork_{ident(g.region)}"),
        },
        "scheduling": scheduling,
        "metadata": {"ssh-keys": Expr(interp("var.ssh_username") + ":" + interp("var.ssh_public_key"))},
        "lifecycle": {"create_before_destroy": True},
    }
    script = plan.user_data("gcp", g.workload, [a.market for a in tpl.allocations])
    if script is not None:
        out["metadata_startup_script"] = script  # data: escaped with every other literal (render.py)
    return out
