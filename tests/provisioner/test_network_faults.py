"""Each driver against its cloud's API endpoint refused, hung (accepts, never answers) and answering
garbage, on loopback: every verb fails as one line of gpuprov's error tree with exit 4, as
"cannot reach <cloud> <endpoint>", "<cloud> <endpoint> did not answer within N s" or "an answer
gpuprov does not understand", within the network policy's bounds (a failed connection tried
``connect_retries`` + 1 times, a hung one once). The real SDK clients make the calls (boto3 with
``AWS_ENDPOINT_URL``, google-cloud-compute with ``gcp.endpoint``, azure-mgmt-compute with
``azure.endpoint``); credentials are stand-ins (the network is what is tested here; the token
endpoints fail the same way in tests/hostile/test_network_faults.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuprov.errors import GpuprovError, UnreachableError
from gpuprov.models import Cloud, Market
from provisioner.base import LaunchRequest
from sdk import net
from tests.hostile.faults import endpoint

POLICY = net.Network(connect_timeout=1.0, read_timeout=1.0, connect_retries=1)
SSH = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake gpuprov"
SUBNET = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/default"


@pytest.fixture(autouse=True)
def short_policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = net.policy()
    net.configure(POLICY)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for key in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(key, raising=False)
    yield
    net.configure(before)


def _driver(cloud: Cloud, url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    if cloud is Cloud.AWS:
        from provisioner.drivers.aws import AwsDriver

        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        return AwsDriver(["us-east-1"], image="ami-0123456789abcdef0", sleep=lambda _s: None)
    if cloud is Cloud.GCP:
        from google.auth.credentials import AnonymousCredentials

        from provisioner.drivers.gcp import GcpDriver, GcpPolling

        poll = GcpPolling(initial=0.01, maximum=0.05, multiplier=2.0, timeout=5.0, retry_deadline=5.0)
        return GcpDriver("p", ["us-central1-a"], credentials=AnonymousCredentials(), poll=poll, endpoint=url)
    from azure.core.credentials import AccessToken

    from provisioner.drivers.azure import AzureDriver

    class Credential:
        def get_token(self, *_s: str, **_k: Any) -> AccessToken:
            return AccessToken("fake", int(time.time()) + 3600)

    return AzureDriver("s", "rg", "eastus", credential=Credential(), ssh_public_key=SSH, subnet_id=SUBNET, endpoint=url)


def _call(driver: Any, cloud: Cloud, verb: str) -> Any:
    if verb == "describe":
        return driver.describe("fleet")
    if verb == "terminate":
        ids = {Cloud.AWS: "us-east-1/i-0123456789abcdef0", Cloud.GCP: "us-central1-a/gpuprov-x", Cloud.AZURE: "x"}
        return driver.terminate([ids[cloud]])
    place = {
        Cloud.AWS: ("us-east-1", "use1-az1", "p4d.24xlarge"),
        Cloud.GCP: ("us-central1", "us-central1-a", "a2-highgpu-1g"),
        Cloud.AZURE: ("eastus", None, "Standard_NC24ads_A100_v4"),
    }[cloud]
    return driver.launch(
        LaunchRequest(
            cloud=cloud,
            region=place[0],
            zone=place[1],
            instance_type=place[2],
            market=Market.SPOT,
            token="0123456789abcdef01234567",
            owner="fleet",
            plan_id="p",
            workload="inference",
        )
    )


WORDS = {
    "refused": ("cannot reach",),
    "hung": ("did not answer in time (connect 1 s, read 1 s)",),
    "garbage": ("does not understand", "cannot reach"),  # a body no parser reads; or a connection cut short
}


@pytest.mark.parametrize("verb", ["describe", "launch", "terminate"])
@pytest.mark.parametrize("fault", sorted(WORDS))
@pytest.mark.parametrize("cloud", list(Cloud), ids=[c.value for c in Cloud])
def test_a_failing_endpoint_is_one_line_exit_4_within_the_policy(
    cloud: Cloud, fault: str, verb: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if (cloud, fault, verb) == (Cloud.AZURE, "garbage", "terminate"):
        # ARM's DELETE answered "200 OK": azure-core's poller takes it as done and reads no body,
        # so the delete is accepted; the describe that follows (destroy, apply) then fails
        with endpoint(fault) as url:
            _call(_driver(cloud, url, monkeypatch), cloud, verb)
            with pytest.raises(GpuprovError, match="does not understand"):
                _call(_driver(cloud, url, monkeypatch), cloud, "describe")
        return
    with endpoint(fault) as url:
        driver = _driver(cloud, url, monkeypatch)
        start = time.monotonic()
        with pytest.raises(GpuprovError) as err:
            _call(driver, cloud, verb)
        elapsed = time.monotonic() - start
    message = err.value.message
    assert err.value.exit_code == 4 and "\n" not in message, message
    assert any(w in message for w in WORDS[fault]), message
    assert cloud.value in message.lower(), message
    if fault == "refused":
        host = url.removeprefix("http://")
        assert isinstance(err.value, UnreachableError) and host in message, message
    if fault == "hung":
        assert isinstance(err.value, UnreachableError)
        # one read timeout, not retried (AWS's launch looks its token up once more: two)
        assert elapsed < 2 * POLICY.read_timeout + 3.0, elapsed


def test_a_refused_connection_is_retried_as_the_policy_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """connect_retries = 1: two connection attempts per call, for each cloud's SDK."""
    import socket
    import threading

    for cloud in Cloud:
        accepted = []
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)

        def close_at_once(s: socket.socket = srv, seen: list[int] = accepted) -> None:
            s.settimeout(0.2)
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                try:
                    conn, _ = s.accept()
                except OSError:
                    continue
                seen.append(1)
                conn.close()  # accepted, then closed before any answer: the connection failed

        thread = threading.Thread(target=close_at_once, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{srv.getsockname()[1]}"
        with pytest.raises(GpuprovError):
            _driver(cloud, url, monkeypatch).describe("fleet")
        srv.close()
        thread.join()
        assert 1 <= len(accepted) <= 1 + POLICY.connect_retries + 1, (cloud, len(accepted))
