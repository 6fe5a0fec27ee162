"""A policy (plus command-line overrides) as optimizer inputs: workloads, demand, filters, caps."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from gpuprov.errors import ConfigError
from gpuprov.models import Offer, Workload
from policies.model import Policy
from policies.schedule import demand_slots

OfferKey = tuple[str, str, str, str, str]


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
    if o.node_gpus is not None and "training" in p.workloads:
        p = replace(p, workloads={**p.workloads, "training": replace(p.workloads["training"], node_gpus=o.node_gpus)})
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
        )
        for name, w in policy.workloads.items()
    )


def demand(policy: Policy) -> dict[str, tuple[int, ...]]:
    if policy.gpus is None:
        raise ConfigError(f"policy {policy.name!r} names no total; pass --gpus")
    return demand_slots(policy, policy.gpus)


def _match(value: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, g) for g in globs)


def allowed(policy: Policy, offer: Offer) -> bool:
    cloud = offer.cloud.value
    if policy.clouds_allow and cloud not in policy.clouds_allow:
        return False
    if cloud in policy.clouds_deny:
        return False
    if policy.regions_allow and not _match(offer.region, policy.regions_allow):
        return False
    if policy.markets is not None and offer.market.value not in policy.markets:
        return False
    return not _match(offer.region, policy.regions_deny)


def offer_caps(policy: Policy, offers: Sequence[Offer]) -> dict[OfferKey, int]:
    """The tightest cap that matches each offer (glob on cloud, region, zone, type, market)."""
    caps: dict[OfferKey, int] = {}
    for o in offers:
        for c in policy.offer_caps:
            pairs = (
                (o.cloud.value, c.cloud),
                (o.region, c.region),
                (o.zone or "", c.zone),
                (o.instance_type, c.instance_type),
                (o.market.value, c.market),
            )
            if all(fnmatch.fnmatchcase(value, glob) for value, glob in pairs):
                caps[o.key] = min(caps.get(o.key, c.max_instances), c.max_instances)
    return caps


def region_caps(policy: Policy) -> dict[tuple[str, str], int]:
    return {(c.cloud, c.region): c.max_instances for c in policy.region_caps}
