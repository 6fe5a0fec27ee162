"""One driver face over several per-location drivers of one cloud (Azure drivers are per region)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuprov.errors import ProvisioningError
from gpuprov.models import Cloud
from provisioner.base import Driver, InstanceHandle, LaunchRequest


class PerRegion:
    def __init__(self, cloud: Cloud, drivers: Mapping[str, Driver]) -> None:
        if not drivers:
            raise ValueError("PerRegion needs at least one driver")
        self.cloud = cloud
        self.drivers = dict(drivers)

    def describe(self, owner: str) -> list[InstanceHandle]:
        seen: dict[str, InstanceHandle] = {}
        for region in sorted(self.drivers):
            for h in self.drivers[region].describe(owner):
                seen.setdefault(h.instance_id, h)
        return sorted(seen.values(), key=lambda h: h.instance_id)

    def launch(self, request: LaunchRequest) -> InstanceHandle:
        driver = self.drivers.get(request.region)
        if driver is None:
            raise ProvisioningError(f"no {self.cloud} driver for region {request.region}")
        return driver.launch(request)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        # ids are unique in the account's scope: any one of the drivers can end them
        self.drivers[sorted(self.drivers)[0]].terminate(instance_ids)
