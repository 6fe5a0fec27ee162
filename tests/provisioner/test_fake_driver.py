"""The in-memory fake honours the same contract as the real drivers, and persists when asked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprov.errors import CapacityError
from gpuprov.models import Cloud, Market
from provisioner.base import Driver, LaunchRequest
from provisioner.drivers.fake import FakeDriver
from tests.provisioner.contract import DriverContract


class TestFakeContract(DriverContract):
    request_cloud, request_region, request_zone = Cloud.GCP, "us-central1", "us-central1-a"
    request_instance_type = "a2-highgpu-8g"

    @pytest.fixture
    def driver(self) -> Iterator[Driver]:
        yield FakeDriver(Cloud.GCP)


def _req(token: str) -> LaunchRequest:
    return LaunchRequest(
        cloud=Cloud.AWS,
        region="us-east-1",
        zone="use1-az1",
        instance_type="p4d.24xlarge",
        market=Market.SPOT,
        token=token,
        owner="o",
        plan_id="p",
        workload="w",
    )


def test_capacity_is_enforced_per_pool() -> None:
    d = FakeDriver(Cloud.AWS, capacity={("use1-az1", "p4d.24xlarge", "spot"): 1})
    d.launch(_req("a"))
    with pytest.raises(CapacityError) as err:
        d.launch(_req("b"))
    assert err.value.pool == ("aws", "use1-az1", "p4d.24xlarge", "spot")


def test_state_file_survives_the_process(tmp_path: Path) -> None:
    path = tmp_path / "cloud.json"
    h = FakeDriver(Cloud.AWS, state_file=path).launch(_req("a"))
    again = FakeDriver(Cloud.AWS, state_file=path)
    assert [x.instance_id for x in again.describe("o")] == [h.instance_id]
    again.terminate([h.instance_id])
    assert FakeDriver(Cloud.AWS, state_file=path).describe("o") == []
