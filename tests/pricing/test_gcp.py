"""GCP prices: recorded Cloud Billing and Compute Engine pages replayed into the real REST clients."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest
import responses
from google.auth.credentials import AnonymousCredentials
from responses import matchers

from gpuprov.errors import ConfigError
from gpuprov.models import Market, Offer
from pricing import gcp
from pricing.base import MalformedResponseError, SourceError
from tests.pricing import fakes

D = Decimal


@pytest.fixture
def rsps() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as mock:
        yield mock


def source(**kw: object) -> gcp.GcpPriceSource:
    return gcp.GcpPriceSource(project=fakes.GCP_PROJECT, credentials=AnonymousCredentials(), **kw)  # type: ignore[arg-type]


def by_key(offers: list[Offer]) -> dict[tuple[str | None, str, str, Market], Offer]:
    out = {(o.zone or o.region, o.instance_type, o.gpu, o.market): o for o in offers}
    assert len(out) == len(offers)
    return out


def test_instance_price_is_cores_plus_ram_plus_gpus(rsps: responses.RequestsMock) -> None:
    fakes.register_gcp(rsps)
    result = source().fetch()
    offers = by_key(result.offers)
    # real SKUs (2024-09): A3 core 0.025498, A3 RAM 0.00222034 per GiB, H100 9.796551 in Virginia
    a3 = offers[("us-east4-a", "a3-highgpu-8g", "H100", Market.ON_DEMAND)]
    assert a3.hourly_usd == 208 * D("0.025498") + 1872 * D("0.00222034") + 8 * D("9.796551") == D("87.83246848")
    assert (a3.vcpus, a3.memory_gib, a3.gpus_per_instance, a3.interconnect) == (208, D(1872), 8, "GPUDirect-TCPX")
    spot = offers[("us-east4-a", "a3-highgpu-8g", "H100", Market.SPOT)]
    assert spot.hourly_usd == 208 * D("0.01402") + 1872 * D("0.001221") + 8 * D("5.3881")
    # commitments: "A3 Cpu"/"A3 Ram" naming, regional (zone None)
    r1 = offers[("us-east4", "a3-highgpu-8g", "H100", Market.RESERVED_1Y)]
    assert r1.zone is None
    assert r1.hourly_usd == 208 * D("0.01773248") + 1872 * D("0.001544126") + 8 * D("6.798809")
    # a2-highgpu-1g: the real opencost page's A2 + A100 SKUs; equals the published 3.673385/h
    assert offers[("us-central1-a", "a2-highgpu-1g", "A100-40GB", Market.ON_DEMAND)].hourly_usd == D("3.673385")
    assert result.requests == 8  # 3 billing pages, 1 accelerator list, 4 machine-type pages


def test_mega_gpus_use_the_a3plus_family(rsps: responses.RequestsMock) -> None:
    fakes.register_gcp(rsps)
    offers = by_key(source().fetch().offers)
    mega = offers[("us-east4-a", "a3-megagpu-8g", "H100", Market.ON_DEMAND)]
    assert mega.hourly_usd == 208 * D("0.0269236") + 1872 * D("0.002344479") + 8 * D("10.34428")
    assert mega.interconnect == "GPUDirect-TCPXO"


def test_n1_hosts_with_attached_t4(rsps: responses.RequestsMock) -> None:
    fakes.register_gcp(rsps)
    result = source().fetch()
    offers = by_key(result.offers)
    t4 = {(o.instance_type, o.gpus_per_instance) for o in result.offers if o.gpu == "T4"}
    assert t4 == {("n1-standard-8", 1), ("n1-standard-16", 2), ("n1-standard-32", 4)}  # T4 allows up to 4 cards
    one = offers[("us-central1-a", "n1-standard-8", "T4", Market.ON_DEMAND)]
    assert one.hourly_usd == 8 * D("0.031611") + 30 * D("0.004237") + D("0.35")
    # no N1/T4 commitment SKUs in the fixture: reserved skipped and counted, not invented
    assert not any(o.gpu == "T4" and o.market.is_reserved for o in result.offers)
    assert result.skipped["no Commit1Yr SKU for N1 core"] == 3


def test_reserved_offers_are_one_per_region(rsps: responses.RequestsMock) -> None:
    fakes.register_gcp(rsps)
    result = source().fetch()
    reserved = [(o.region, o.instance_type, o.market) for o in result.offers if o.market.is_reserved]
    assert len(reserved) == len(set(reserved)) > 0
    assert {o.market for o in result.offers} == set(Market)


def test_missing_family_prices_are_counted(rsps: responses.RequestsMock) -> None:
    fakes.register_gcp(rsps)
    result = source().fetch()
    assert not any(o.region == "europe-west4" and o.instance_type.startswith("g2") for o in result.offers)
    assert result.skipped["no OnDemand SKU for G2 core"] == 1


def test_gpu_filter_narrows_zones_and_offers(rsps: responses.RequestsMock) -> None:
    rsps.assert_all_requests_are_fired = False
    fakes.register_gcp(rsps)
    result = source().fetch({"L4"})
    assert {o.instance_type for o in result.offers} == {"g2-standard-4", "g2-standard-48"}
    zones = {c.request.url.split("/zones/")[1].split("/")[0] for c in rsps.calls if "/zones/" in c.request.url}
    assert zones == {"us-central1-a"}  # the only zone with an nvidia-l4


def test_throttled_billing_page_is_retried(rsps: responses.RequestsMock) -> None:
    fakes.register_gcp(rsps, skus=False)
    query, _ = fakes.gcp_sku_pages()[0]
    rsps.get(
        fakes.BILLING_URL,
        status=429,
        match=[matchers.query_param_matcher(query)],
        json={"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}},
    )
    fakes.register_gcp(rsps, compute=False)
    result = source(retry_initial=0.01).fetch()
    assert len([c for c in rsps.calls if "cloudbilling" in c.request.url]) == 4
    assert len(result.offers) == 42


def test_malformed_billing_page(rsps: responses.RequestsMock) -> None:
    rsps.assert_all_requests_are_fired = False
    fakes.register_gcp(rsps, skus=False)
    rsps.get(
        fakes.BILLING_URL, body="<html>maintenance</html>", match=[matchers.query_param_matcher(fakes.BILLING_QUERY)]
    )
    with pytest.raises(MalformedResponseError) as err:
        source().fetch()
    assert err.value.source == gcp.SOURCE


def test_forbidden_is_a_source_error(rsps: responses.RequestsMock) -> None:
    rsps.assert_all_requests_are_fired = False
    fakes.register_gcp(rsps, compute=False)
    denied = {"error": {"code": 403, "message": "Compute Engine API has not been used", "status": "PERMISSION_DENIED"}}
    rsps.get(f"{fakes.COMPUTE_URL}/aggregated/acceleratorTypes", status=403, json=denied)
    with pytest.raises(SourceError) as err:
        source().fetch()
    assert "403" in err.value.message


def test_a_project_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    with pytest.raises(ConfigError):
        gcp.GcpPriceSource(credentials=AnonymousCredentials()).fetch()


# -- pure parsing -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("description", "key"),
    [
        ("A3 Instance Core running in Virginia", ("CPU", "A3")),
        ("Spot Preemptible A3Plus Instance Ram running in Netherlands", ("RAM", "A3PLUS")),
        ("Commitment v1: A3 Cpu in Americas for 3 Years", ("CPU", "A3")),
        ("Commitment v1: A3 Ram in Virginia for 1 Year", ("RAM", "A3")),
        ("Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas", ("GPU", "H100")),
        ("Commitment v1: Nvidia H100 80GB Mega GPU running in Virginia for 1 Year", ("GPU", "H100-MEGA")),
        ("Nvidia Tesla A100 GPU running in Americas", ("GPU", "A100")),
        ("N1 Predefined Instance Core running in Americas", ("CPU", "N1")),
        ("Commitment v1: Cpu in Americas for 1 Year", ("CPU", "N1")),
        ("Nvidia RTX Pro 6000 GPU running in Americas", None),
        ("Licensing Fee for Windows Server on VM", None),
    ],
)
def test_sku_key(description: str, key: tuple[str, str] | None) -> None:
    assert gcp.sku_key(description) == key


def test_every_real_sku_in_the_h100_sample_is_understood() -> None:
    skus = json.loads((fakes.GCP / "skus-page1.json").read_text())["skus"]
    keys = {gcp.sku_key(s["description"]) for s in skus}
    assert None not in keys
    assert keys == {
        ("CPU", "A3"),
        ("RAM", "A3"),
        ("CPU", "A3PLUS"),
        ("RAM", "A3PLUS"),
        ("GPU", "H100"),
        ("GPU", "H100-MEGA"),
    }


def test_money_is_exact() -> None:
    assert gcp.money("9", 796550569) == D("9.796550569")
    assert gcp.money(0, 4237000) == D("0.004237")
    assert gcp.family("a3-megagpu-8g") == "A3PLUS" and gcp.family("g2-standard-4") == "G2"
