"""Making the drivers a run needs, from the config file and the environment; asking them all.

Discovery: a fleet command asks every cloud that is configured or has credentials (AWS: the
``aws`` config section or the SDK's usual environment variables and files; GCP: a project;
Azure: a subscription and resource group), every cloud a plan or the fleet's own journal
names, in every region the config lists or, where it lists none, every region the account
can see. What could not be asked is reported, never taken for "nothing runs there".
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprov.config import Config
from gpuprov.errors import ConfigError, MissingExtraError
from gpuprov.models import Cloud, InstanceHandle
from provisioner.base import Driver

if TYPE_CHECKING:
    from gpuprov.plandoc import PlanDocument
    from gpuprov.store.state import StateStore

FAKE_ENV = "GPUPROV_FAKE_CLOUD"


def make(
    clouds: Collection[Cloud], regions: dict[Cloud, set[str]], zones: dict[Cloud, set[str]], cfg: Config
) -> dict[Cloud, Driver]:
    """Drivers for these clouds. ``GPUPROV_FAKE_CLOUD=/path/state`` gives in-memory fakes kept in
    JSON files beside that path instead (for dry runs and tests; nothing is launched)."""
    fake = os.environ.get(FAKE_ENV)
    out: dict[Cloud, Driver] = {}
    for cloud in sorted(clouds):
        if fake:
            from provisioner.drivers.fake import FakeDriver

            out[cloud] = FakeDriver(
                cloud,
                state_file=Path(f"{fake}.{cloud.value}.json"),
                latency=_env_number("GPUPROV_FAKE_LATENCY") or 0.0,
                rate=_env_number("GPUPROV_FAKE_RATE"),
            )
        elif cloud is Cloud.AWS:
            from provisioner.drivers.aws import AwsDriver

            listed = set(cfg.aws.get("regions", []))  # none listed: every region the account sees
            aws_regions = (listed | set(regions.get(cloud, set()))) if listed else set()
            out[cloud] = AwsDriver(
                sorted(aws_regions),
                image=cfg.aws.get("image"),
                subnets=cfg.aws.get("subnets"),
                key_name=cfg.aws.get("key_name"),
                security_groups=cfg.aws.get("security_groups") or (),
                bootstrap=cfg.bootstrap,
            )
        elif cloud is Cloud.GCP:
            from provisioner.drivers.gcp import GcpDriver

            project = cfg.gcp.get("project")
            if not project:
                raise ConfigError(
                    "no GCP project configured", hint="set gcp.project in the config or GOOGLE_CLOUD_PROJECT"
                )
            kwargs: dict[str, Any] = {
                k: cfg.gcp[k] for k in ("image", "network", "subnetwork", "endpoint") if k in cfg.gcp
            }
            listed = set(cfg.gcp.get("zones", []))  # none listed: every zone (aggregated list)
            gcp_zones = (listed | set(zones.get(cloud, set()))) if listed else set()
            out[cloud] = GcpDriver(project, sorted(gcp_zones), bootstrap=cfg.bootstrap, **kwargs)
        else:
            from provisioner.drivers.azure import AzureDriver
            from provisioner.multi import PerRegion

            sub, group = cfg.azure.get("subscription_id"), cfg.azure.get("resource_group")
            if not sub or not group:
                raise ConfigError(
                    "no Azure subscription or resource group configured",
                    hint="set azure.subscription_id and azure.resource_group in the config",
                )
            extra = {
                k: cfg.azure[k]
                for k in ("image_reference", "admin_username", "ssh_public_key", "subnet_id", "endpoint")
                if k in cfg.azure
            }
            locations = sorted(regions.get(cloud, set()) | set(cfg.azure.get("regions", []))) or ["eastus"]
            out[cloud] = PerRegion(
                cloud, {loc: AzureDriver(sub, group, loc, bootstrap=cfg.bootstrap, **extra) for loc in locations}
            )
    return out


def _env_number(name: str) -> float | None:
    """An environment variable's number, through the one bounded parser (gpuprov/numbers.py)."""
    from gpuprov import numbers

    text = os.environ.get(name)
    if not text:
        return None
    try:
        return float(numbers.parse(text, name))
    except numbers.NumberError as exc:
        raise ConfigError(f"{name} {exc.reason}") from None


def configured(cfg: Config) -> set[Cloud]:
    """Clouds this machine can ask, without a network call to find out."""
    if os.environ.get(FAKE_ENV):
        return set(Cloud)
    from sdk import aws as sdk_aws

    out: set[Cloud] = set()
    if sdk_aws.configured(cfg.aws):
        out.add(Cloud.AWS)
    if cfg.gcp.get("project"):
        out.add(Cloud.GCP)
    if cfg.azure.get("subscription_id") and cfg.azure.get("resource_group"):
        out.add(Cloud.AZURE)
    return out


def for_fleet(
    cfg: Config,
    needed: set[Cloud],
    regions: dict[Cloud, set[str]],
    zones: dict[Cloud, set[str]],
) -> tuple[dict[Cloud, Driver], dict[Cloud, str]]:
    """Drivers for every cloud the fleet may run in: ``needed`` (named by a plan, the mirror or
    the journal: a missing setting there is an error) and every configured one (a missing extra
    or setting there is reported in the second map and skipped)."""
    drivers: dict[Cloud, Driver] = {}
    skipped: dict[Cloud, str] = {}
    for cloud in sorted(needed | configured(cfg)):
        try:
            drivers.update(make({cloud}, regions, zones, cfg))
        except (ConfigError, MissingExtraError) as exc:
            if cloud in needed:
                raise
            skipped[cloud] = exc.message
    return drivers, skipped


def scope(
    docs: Sequence[PlanDocument], mirrored: Sequence[InstanceHandle]
) -> tuple[set[Cloud], dict[Cloud, set[str]], dict[Cloud, set[str]]]:
    """The clouds, regions and zones the plans place instances in and the mirror saw them in."""
    clouds: set[Cloud] = set()
    regions: dict[Cloud, set[str]] = {c: set() for c in Cloud}
    zones: dict[Cloud, set[str]] = {c: set() for c in Cloud}
    for doc in docs:
        for a in doc.placements():
            cloud = Cloud(a.cloud)
            clouds.add(cloud)
            regions[cloud].add(a.region)
            if a.zone:
                zones[cloud].add(a.zone)
    for h in mirrored:
        clouds.add(h.cloud)
        regions[h.cloud].add(h.region)
        if h.zone:
            zones[h.cloud].add(h.zone)
    return clouds, regions, zones


def for_owner(
    cfg: Config, owner: str, docs: Sequence[PlanDocument], state: StateStore
) -> tuple[dict[Cloud, Driver], dict[Cloud, str]]:
    """``for_fleet`` for a fleet's plans, what its mirror saw and every cloud its journal called."""
    mirrored, _ = state.mirrored(owner)
    clouds, regions, zones = scope(docs, mirrored)
    return for_fleet(cfg, clouds | state.clouds_used(owner), regions, zones)
