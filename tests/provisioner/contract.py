"""The driver contract (provisioner/base.py), as a test mixin every driver's tests reuse.

Use::

    class TestMyContract(DriverContract):
        request_cloud, request_region, request_zone = Cloud.GCP, "us-central1", "us-central1-a"
        request_instance_type = "a2-highgpu-1g"
        unknown_instance_id = "us-central1-a/gpuprov-000000000000000000000000"

        @pytest.fixture
        def driver(self) -> Iterator[Driver]: ...   # a fresh, empty cloud per test

Override ``make_request`` for other request shapes, ``count_in_cloud`` to count a token's live
instances from the cloud's own state (the default asks ``describe``), and ``creations_in_cloud``
when the fake can tell how many instances a token has started (the default cannot: None).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuprov.models import Cloud, Market
from provisioner.base import Driver, InstanceHandle, LaunchRequest, launch_token


class DriverContract:
    owner = "contract-owner"
    other_owner = "contract-other"
    plan_id = "contract-plan"
    workload = "train"
    launch_states = frozenset({"pending", "running"})

    request_cloud: Cloud = Cloud.AWS
    request_region = "us-east-1"
    request_zone: str | None = None
    request_instance_type = "p4d.24xlarge"
    unknown_instance_id = "unknown-instance"

    # -- hooks --------------------------------------------------------------------------
    def token(self, index: int) -> str:
        return launch_token(self.plan_id, ("contract", self.request_instance_type), index)

    def make_request(self, token: str, market: Market, owner: str | None = None) -> LaunchRequest:
        return LaunchRequest(
            cloud=self.request_cloud,
            region=self.request_region,
            zone=self.request_zone,
            instance_type=self.request_instance_type,
            market=market,
            token=token,
            owner=owner or self.owner,
            plan_id=self.plan_id,
            workload=self.workload,
        )

    def count_in_cloud(self, driver: Driver, token: str) -> int:
        return sum(1 for h in driver.describe(self.owner) if h.token == token)

    def creations_in_cloud(self, token: str) -> int | None:
        return None

    # -- the contract -------------------------------------------------------------------
    def _assert_matches(self, handle: InstanceHandle, request: LaunchRequest) -> None:
        assert handle.cloud == request.cloud
        assert handle.state in self.launch_states
        assert (handle.owner, handle.plan_id, handle.token, handle.workload, handle.market) == (
            request.owner,
            request.plan_id,
            request.token,
            request.workload,
            request.market,
        )
        assert handle.instance_type == request.instance_type
        assert handle.region == request.region
        if handle.launched_at is not None:
            assert handle.launched_at.utcoffset() == timedelta(0)

    @pytest.mark.parametrize("market", [Market.SPOT, Market.ON_DEMAND])
    def test_launch_returns_a_live_handle_with_the_request_tags(self, driver: Driver, market: Market) -> None:
        request = self.make_request(self.token(1), market)
        handle = driver.launch(request)
        self._assert_matches(handle, request)
        listed = driver.describe(self.owner)
        assert [h.instance_id for h in listed] == [handle.instance_id]
        self._assert_matches(listed[0], request)

    def test_launching_a_token_twice_returns_the_same_instance(self, driver: Driver) -> None:
        request = self.make_request(self.token(2), Market.SPOT)
        first = driver.launch(request)
        second = driver.launch(request)
        assert second.instance_id == first.instance_id
        assert self.count_in_cloud(driver, request.token) == 1
        assert self.creations_in_cloud(request.token) in (None, 1)

    def test_describe_lists_exactly_the_owners_live_instances(self, driver: Driver) -> None:
        mine = [
            driver.launch(self.make_request(self.token(3), Market.SPOT)),
            driver.launch(self.make_request(self.token(4), Market.ON_DEMAND)),
        ]
        theirs = driver.launch(self.make_request(self.token(5), Market.SPOT, owner=self.other_owner))
        gone = driver.launch(self.make_request(self.token(6), Market.SPOT))
        driver.terminate([gone.instance_id])
        assert [h.instance_id for h in driver.describe(self.owner)] == sorted(h.instance_id for h in mine)
        assert [h.instance_id for h in driver.describe(self.other_owner)] == [theirs.instance_id]
        assert driver.describe("contract-nobody") == []

    def test_terminate_is_idempotent(self, driver: Driver) -> None:
        handle = driver.launch(self.make_request(self.token(7), Market.SPOT))
        driver.terminate([handle.instance_id])
        driver.terminate([handle.instance_id])
        driver.terminate([self.unknown_instance_id])
        driver.terminate([])
        assert driver.describe(self.owner) == []
        assert self.count_in_cloud(driver, handle.token) == 0

    def test_launch_after_terminate_starts_a_new_instance(self, driver: Driver) -> None:
        request = self.make_request(self.token(8), Market.SPOT)
        first = driver.launch(request)
        driver.terminate([first.instance_id])
        again = driver.launch(request)
        self._assert_matches(again, request)
        assert [h.token for h in driver.describe(self.owner)] == [request.token]
        assert self.count_in_cloud(driver, request.token) == 1
        assert self.creations_in_cloud(request.token) in (None, 2)
