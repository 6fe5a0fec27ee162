"""Making the drivers a run needs, from the config file and the environment."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from gpuprov.config import Config
from gpuprov.errors import ConfigError
from gpuprov.models import Cloud
from provisioner.base import Driver

FAKE_ENV = "GPUPROV_FAKE_CLOUD"


def make(clouds: Collection[Cloud], regions: dict[Cloud, set[str]], zones: dict[Cloud, set[str]],
         cfg: Config) -> dict[Cloud, Driver]:
    """Drivers for these clouds. ``GPUPROV_FAKE_CLOUD=/path/state`` gives in-memory fakes kept in
    JSON files beside that path instead (for dry runs and tests; nothing is launched)."""
    fake = os.environ.get(FAKE_ENV)
    out: dict[Cloud, Driver] = {}
    for cloud in sorted(clouds):
        if fake:
            from provisioner.drivers.fake import FakeDriver

            out[cloud] = FakeDriver(cloud, state_file=Path(f"{fake}.{cloud.value}.json"))
        elif cloud is Cloud.AWS:
            from provisioner.drivers.aws import AwsDriver

            aws_regions = set(regions.get(cloud, set())) | set(cfg.aws.get("regions", []))
            out[cloud] = AwsDriver(sorted(aws_regions) or ["us-east-1"], image=cfg.aws.get("image"),
                                   subnets=cfg.aws.get("subnets"), key_name=cfg.aws.get("key_name"))
        elif cloud is Cloud.GCP:
            from provisioner.drivers.gcp import GcpDriver

            project = cfg.gcp.get("project")
            if not project:
                raise ConfigError("no GCP project configured",
                                  hint="set gcp.project in the config or GOOGLE_CLOUD_PROJECT")
            kwargs: dict[str, Any] = {k: cfg.gcp[k] for k in ("image", "network", "subnetwork") if k in cfg.gcp}
            out[cloud] = GcpDriver(project, sorted(zones.get(cloud, set()) | set(cfg.gcp.get("zones", []))), **kwargs)
        else:
            from provisioner.drivers.azure import AzureDriver
            from provisioner.multi import PerRegion

            sub, group = cfg.azure.get("subscription_id"), cfg.azure.get("resource_group")
            if not sub or not group:
                raise ConfigError("no Azure subscription or resource group configured",
                                  hint="set azure.subscription_id and azure.resource_group in the config")
            extra = {k: cfg.azure[k] for k in ("image_reference", "admin_username", "ssh_public_key", "subnet_id")
                     if k in cfg.azure}
            locations = sorted(regions.get(cloud, set()) | set(cfg.azure.get("regions", []))) or ["eastus"]
            out[cloud] = PerRegion(cloud, {loc: AzureDriver(sub, group, loc, **extra) for loc in locations})
    return out
