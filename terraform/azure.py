"""Azure: a resource group, a Linux scale set per (group, VM size, priority), autoscale schedules.

A scale set has one VM size and one priority, so a scaling group (region, workload) gets one
``azurerm_linux_virtual_machine_scale_set`` per (size, spot or regular). Spot sets use
``priority = Spot``, ``eviction_policy = Delete`` and ``max_bid_price = -1`` (pay up to the
on-demand price, never evicted for price). Reserved instances run in the regular set of their
size; the reservation is billing and is listed in the ``azure_reserved_instances`` output.
Gang groups share an ``azurerm_proximity_placement_group``. With windows, an
``azurerm_monitor_autoscale_setting`` pins the capacity with one recurrence profile per window
(Azure runs the profile that started most recently); Azure allows at most 20 profiles.
Plans normally carry no Azure zone (regional); a zone, when given, pins the scale set to it.
"""

from __future__ import annotations

from typing import Any

from gpuprov.bootstrap import b64
from terraform.blocks import CloudDoc, output, reserved_entry, variable
from terraform.names import ident, interp, named, slug
from terraform.plan import Group, PlanDoc, PlanFormatError, Template
from terraform.schedule import azure_recurrence

MAX_PROFILES = 20
RG = "azurerm_resource_group.gpuprov"
DEFAULT_IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}


def render(plan: PlanDoc) -> CloudDoc:
    groups = plan.groups("azure")
    regions = sorted({g.region for g in groups})
    doc = CloudDoc(
        provider={"azurerm": {"features": {}, "subscription_id": interp("var.azure_subscription_id")}},
        shared_variables={"ssh_username", "ssh_public_key"},
    )
    doc.variables["azure_subscription_id"] = variable("string", "Azure subscription ID")
    doc.variables["azure_resource_group_location"] = variable(
        "string", "Location of the resource group holding the scale sets", regions[0]
    )
    doc.variables["azure_image"] = variable(
        "object({publisher = string, offer = string, sku = string, version = string})",
        "Marketplace image for the VMs (default: Azure HPC Ubuntu 22.04 with GPU drivers)",
        DEFAULT_IMAGE,
    )
    for region in regions:
        doc.variables[f"azure_subnet_id_{ident(region)}"] = variable(
            "string", f"Subnet resource ID in {region} for the scale sets' network interfaces"
        )
    windows = plan.schedule_windows()
    if len(windows) > MAX_PROFILES:
        raise PlanFormatError(f"Azure autoscale allows {MAX_PROFILES} profiles; the plan has {len(windows)} windows")
    doc.add(
        "azurerm_resource_group",
        "gpuprov",
        {"name": named("name_prefix", "gpu"), "location": interp("var.azure_resource_group_location")},
    )
    sets: dict[str, str] = {}
    for g in groups:
        if g.gang:
            doc.add(
                "azurerm_proximity_placement_group",
                g.label,
                {
                    "name": named("name_prefix", g.workload, g.region),
                    "location": g.region,
                    "resource_group_name": interp(f"{RG}.name"),
                },
            )
        for tpl in g.templates():
            name = ident(g.label, tpl.instance_type, tpl.market_tag)
            _scale_set(plan, g, tpl, name, doc)
            sets[name] = interp(f"azurerm_linux_virtual_machine_scale_set.{name}.name")
    doc.outputs["azure_scale_sets"] = output(sets, "Scale set name per gpuprov template")
    doc.outputs["azure_reserved_instances"] = output(
        [reserved_entry(a, g.label) for g in groups for a in g.reserved],
        "Reserved VM instances the plan assumes (a billing commitment to buy separately, not a resource)",
    )
    return doc


def _scale_set(plan: PlanDoc, g: Group, tpl: Template, name: str, doc: CloudDoc) -> None:
    cap = tpl.by_slot(plan.horizon_hours)
    windows = plan.schedule_windows()
    vmss: dict[str, Any] = {
        "name": named("name_prefix", g.workload, g.region, tpl.instance_type, tpl.market_tag),
        "resource_group_name": interp(f"{RG}.name"),
        "location": g.region,
        "sku": tpl.instance_type,
        "instances": cap[0],
        "admin_username": interp("var.ssh_username"),
        "admin_ssh_key": {"username": interp("var.ssh_username"), "public_key": interp("var.ssh_public_key")},
        "disable_password_authentication": True,
        "source_image_reference": {k: interp(f"var.azure_image.{k}") for k in sorted(DEFAULT_IMAGE)},
        "os_disk": {"caching": "ReadWrite", "storage_account_type": "Premium_LRS"},
        "network_interface": {
            "name": "primary",
            "primary": True,
            "ip_configuration": {
                "name": "internal",
                "primary": True,
                "subnet_id": interp(f"var.azure_subnet_id_{ident(g.region)}"),
            },
        },
        "overprovision": False,
        "upgrade_mode": "Manual",
        "priority": "Spot" if tpl.spot else "Regular",
        "tags": {"gpuprov-group": g.label, "gpuprov-workload": g.workload},
    }
    if tpl.spot:
        vmss.update(eviction_policy="Delete", max_bid_price=-1)
    custom = plan.user_data("azure", g.workload, [a.market for a in tpl.allocations])
    if custom is not None:
        vmss["custom_data"] = b64(custom)  # the provider takes it base64-encoded
    if g.zone:
        vmss["zones"] = [g.zone]
    if g.gang:
        vmss["proximity_placement_group_id"] = interp(f"azurerm_proximity_placement_group.{g.label}.id")
    if windows:
        vmss["lifecycle"] = {"ignore_changes": ["instances"]}
    doc.add("azurerm_linux_virtual_machine_scale_set", name, vmss)
    if not windows:
        return
    profiles = []
    for w in windows:
        rec = azure_recurrence(w.start_slot, plan.slot_origin, plan.timezone)
        n = cap[w.start_slot]
        profiles.append(
            {
                "name": w.name,
                "capacity": {"default": n, "minimum": n, "maximum": n},
                "recurrence": {
                    "timezone": rec.timezone,
                    "days": list(rec.days),
                    "hours": [rec.hour],
                    "minutes": [rec.minute],
                },
            }
        )
    doc.add(
        "azurerm_monitor_autoscale_setting",
        name,
        {
            "name": named("name_prefix", g.workload, g.region, slug(tpl.instance_type), tpl.market_tag),
            "resource_group_name": interp(f"{RG}.name"),
            "location": g.region,
            "target_resource_id": interp(f"azurerm_linux_virtual_machine_scale_set.{name}.id"),
            "profile": profiles,
        },
    )
