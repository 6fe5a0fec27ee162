"""A policy (plus command-line overrides) as optimizer inputs: workloads, demand, filters, caps."""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

from gpuprov.errors import ConfigError
from gpuprov.models import Workload
from policies.model import Policy
from policies.schedule import demand_slots
from pricing.interconnect import ACCEPTS


@dataclass(frozen=True)
class Overrides:
    """Command-line flags that win over the policy file."""

    gpu: str | None = None
    gpus: int | None = None
    hours: int | None = None
    timezone: str | None = None
    max_spot_fraction: Decimal | None = None
    node_gpus: int | None = None
    markets: tuple[str, ...] | None = None
    clouds: tuple[str, ...] | None = None
    regions: tuple[str, ...] | None = None
    budget_per_hour: Decimal | None = None


def apply(policy: Policy, o: Overrides) -> Policy:
    p = policy
    if o.gpu is not None:
        p = replace(p, gpu=o.gpu)
    if o.gpus is not None:
        p = replace(p, gpus=o.gpus)
    if o.hours is not None:
        if o.hours not in (24, 168):
            raise ConfigError("--hours must be 24 or 168")
        p = replace(p, horizon_hours=o.hours)
    if o.timezone is not None:
        p = replace(p, timezone=o.timezone)
    if o.max_spot_fraction is not None:
        p = replace(p, workloads={k: replace(w, max_spot_fraction=o.max_spot_fraction) for k, w in p.workloads.items()})
    if o.node_gpus is not None:
        # the node size is the gangs' (a workload's shape, never its name); with no gang, every workload's
        gangs = [k for k, w in p.workloads.items() if w.gang] or list(p.workloads)
        p = replace(
            p, workloads={k: replace(w, node_gpus=o.node_gpus) if k in gangs else w for k, w in p.workloads.items()}
        )
    if o.markets is not None:
        p = replace(p, markets=o.markets)
    if o.clouds is not None:
        p = replace(p, clouds_allow=o.clouds)
    if o.regions is not None:
        p = replace(p, regions_allow=o.regions)
    if o.budget_per_hour is not None:
        p = replace(p, budget_per_hour=o.budget_per_hour)
    return p


def workloads(policy: Policy) -> tuple[Workload, ...]:
    return tuple(
        Workload(
            name=name,
            max_spot_fraction=w.max_spot_fraction,
            node_gpus=w.node_gpus,
            gang=w.gang,
            spread_zones=w.spread_zones,
            lost_hours_per_interruption=w.lost_hours_per_interruption,
            interconnect=ACCEPTS[w.interconnect],
        )
        for name, w in policy.workloads.items()
    )


def demand(policy: Policy) -> dict[str, tuple[int, ...]]:
    """GPUs each workload needs in each slot. A policy whose demand is work a second (a workload
    with a model) is refused here: its demand is not GPUs (gpuprov.work_planning reads it)."""
    work = [name for name, w in policy.workloads.items() if w.work is not None]
    if work:
        raise ConfigError(
            f"policy {policy.name!r}: {', '.join(work)} asks for work a second, not GPUs",
            hint="plan it with gpuprov plan --policy (demand in work units); this command counts GPUs",
        )
    if policy.gpus is None:
        raise ConfigError(f"policy {policy.name!r} names no total; pass --gpus")
    return demand_slots(policy, policy.gpus)
