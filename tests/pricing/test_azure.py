"""Azure prices: recorded Resource SKUs and Retail Prices pages, replayed with ``responses``."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
import responses
from responses import matchers

from gpuprov.models import Market, Offer
from pricing import azure
from pricing.base import MalformedResponseError, SourceError
from tests.pricing import fakes

D = Decimal
A100 = "Standard_NC24ads_A100_v4"
T4 = "Standard_NC4as_T4_v3"


@pytest.fixture
def rsps(monkeypatch: pytest.MonkeyPatch) -> Iterator[responses.RequestsMock]:
    monkeypatch.delenv(azure.PRICES_URL_ENV, raising=False)
    with responses.RequestsMock() as mock:
        yield mock


def source(sleeps: list[float] | None = None, **kw: object) -> azure.AzurePriceSource:
    record = sleeps if sleeps is not None else []
    return azure.AzurePriceSource(fakes.AZURE_SUBSCRIPTION, fakes.FakeCredential(), sleep=record.append, **kw)  # type: ignore[arg-type]


def by_key(offers: list[Offer]) -> dict[tuple[str, str, Market], Offer]:
    out = {(o.region, o.instance_type, o.market): o for o in offers}
    assert len(out) == len(offers)
    return out


def test_markets_and_specs(rsps: responses.RequestsMock) -> None:
    fakes.register_azure(rsps)
    result = azure.AzurePriceSource(fakes.AZURE_SUBSCRIPTION, fakes.FakeCredential()).fetch()
    offers = by_key(result.offers)
    od = offers[("eastus", A100, Market.ON_DEMAND)]
    assert (od.gpu, od.gpus_per_instance, od.vcpus, od.memory_gib, od.zone) == ("A100-80GB", 1, 24, D(220), None)
    assert od.hourly_usd == D("3.673")
    assert str(offers[("eastus", A100, Market.SPOT)].hourly_usd) == "0.746721"  # no float detour
    assert offers[("eastus", "Standard_ND96asr_v4", Market.ON_DEMAND)].gpu == "A100-40GB"
    assert offers[("westeurope", "Standard_ND96isr_H100_v5", Market.SPOT)].hourly_usd == D("23.620397")


def test_reservation_totals_become_hourly(rsps: responses.RequestsMock) -> None:
    fakes.register_azure(rsps)
    offers = by_key(source().fetch().offers)
    # the recorded 1 Year row says 18980 for the whole term, with unitOfMeasure "1 Hour"
    assert offers[("eastus", A100, Market.RESERVED_1Y)].hourly_usd == (D(18980) / 8760).quantize(D("1e-10"))
    assert offers[("eastus", A100, Market.RESERVED_3Y)].hourly_usd == (D(36682) / 26280).quantize(D("1e-10"))
    reserved, on_demand = offers[("eastus", A100, Market.RESERVED_1Y)], offers[("eastus", A100, Market.ON_DEMAND)]
    assert reserved.hourly_usd < on_demand.hourly_usd


def test_low_priority_and_windows_rows_are_skipped(rsps: responses.RequestsMock) -> None:
    fakes.register_azure(rsps)
    result = source().fetch()
    assert result.skipped[azure.LOW_PRIORITY] == 55 and result.skipped[azure.WINDOWS] == 55
    spot = {o.hourly_usd for o in result.offers if o.instance_type == A100 and o.market is Market.SPOT}
    assert D("0.746721") in spot


def test_paging_follows_next_page_link_and_falls_back_to_skip(rsps: responses.RequestsMock) -> None:
    fakes.register_azure(rsps)
    result = source().fetch()
    urls = [c.request.url for c in rsps.calls]
    assert any(
        u.startswith("https://prices.azure.com:443/") and "%24skip=100" not in u and "$skip=100" in u for u in urls
    )  # NextPageLink as given
    assert any(T4 in u.replace("%27", "'") and "%24skip=100" in u for u in urls)  # $skip fallback
    t4_regions = {o.region for o in result.offers if o.instance_type == T4 and o.market is Market.ON_DEMAND}
    assert len(t4_regions) == 29  # rows from both pages
    assert "westus3" in t4_regions  # the last region is on the second page


def test_fractional_and_empty_sizes(rsps: responses.RequestsMock) -> None:
    fakes.register_azure(rsps)
    result = source().fetch()
    assert result.skipped["fractional GPU"] == 2
    assert not any(o.instance_type in ("Standard_NV6ads_A10_v5", "Standard_NC6s_v3") for o in result.offers)


def test_gpu_filter_asks_only_for_matching_sizes(rsps: responses.RequestsMock) -> None:
    rsps.assert_all_requests_are_fired = False
    fakes.register_azure(rsps)
    result = source().fetch({"H100"})
    assert {o.instance_type for o in result.offers} == {"Standard_ND96isr_H100_v5"}
    retail = [c for c in rsps.calls if "prices.azure.com" in c.request.url]
    assert len(retail) == 2 and all("H100" in c.request.url for c in retail)


def test_throttling_honours_retry_after(rsps: responses.RequestsMock) -> None:
    query = {"$filter": fakes.retail_filter("Standard_ND96asr_v4", "Consumption")}
    rsps.get(fakes.PRICES_URL, status=429, headers={"Retry-After": "7"}, match=[matchers.query_param_matcher(query)])
    rsps.get(fakes.PRICES_URL, status=503, match=[matchers.query_param_matcher(query)])
    fakes.register_azure(rsps)
    sleeps: list[float] = []
    result = source(sleeps, backoff=0.5).fetch()
    assert sleeps == [7.0, 1.0]  # Retry-After, then exponential backoff (0.5 * 2)
    assert ("eastus", "Standard_ND96asr_v4", Market.ON_DEMAND) in by_key(result.offers)


def test_throttling_without_end_fails_the_source(rsps: responses.RequestsMock) -> None:
    rsps.assert_all_requests_are_fired = False
    fakes.register_azure(rsps, skip={("Standard_ND96asr_v4", "Reservation")})
    query = {"$filter": fakes.retail_filter("Standard_ND96asr_v4", "Reservation")}
    rsps.get(fakes.PRICES_URL, status=429, match=[matchers.query_param_matcher(query)])
    with pytest.raises(SourceError) as err:
        source(max_attempts=3).fetch()
    assert "HTTP 429" in err.value.message and err.value.source == azure.SOURCE


@pytest.mark.parametrize("body", ["<html>gateway</html>", '{"BillingCurrency": "USD"}'])
def test_malformed_page(rsps: responses.RequestsMock, body: str) -> None:
    rsps.assert_all_requests_are_fired = False
    fakes.register_azure(rsps, skip={(T4, "Consumption")})
    query = {"$filter": fakes.retail_filter(T4, "Consumption")}
    rsps.get(fakes.PRICES_URL, body=body, match=[matchers.query_param_matcher(query)])
    with pytest.raises(MalformedResponseError):
        source().fetch()


def test_prices_url_from_the_environment(rsps: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch) -> None:
    rsps.assert_all_requests_are_fired = False
    local = "http://127.0.0.1:8765/api/retail/prices"
    monkeypatch.setenv(azure.PRICES_URL_ENV, local)
    fakes.register_azure(rsps, prices_url=local)
    result = source().fetch({"H100"})
    retail = [c.request.url for c in rsps.calls if "/api/retail/prices" in c.request.url]
    assert len(retail) == 2 and all(u.startswith(local) for u in retail)
    assert any(o.market is Market.ON_DEMAND for o in result.offers)


def test_without_a_subscription_the_anonymous_retail_api_still_prices_the_known_sizes(
    rsps: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    rsps.assert_all_requests_are_fired = False
    for size in fakes.AZURE_SIZES:
        for price_type in ("Consumption", "Reservation"):
            fakes.register_chain(rsps, size, price_type, fakes.azure_pages(size, price_type))
    rsps.get(fakes.PRICES_URL, json={"Items": [], "NextPageLink": None, "Count": 0})  # every other size: no rows
    result = azure.AzurePriceSource(credential=fakes.FakeCredential()).fetch({"A100-80GB"})
    assert result.skipped[azure.NO_SUBSCRIPTION] == 1
    assert not [c for c in rsps.calls if "resourceSkus" in c.request.url]  # ARM was never asked
    offers = by_key(result.offers)
    od = offers[("eastus", A100, Market.ON_DEMAND)]
    known = azure.bundled_sizes()[A100]
    assert (od.gpu, od.gpus_per_instance, od.vcpus) == (known.gpu, known.gpus, known.vcpus)
    assert od.hourly_usd == D("3.673")


# -- pure parsing -------------------------------------------------------------------------
def _row(**kw: object) -> dict[str, object]:
    row: dict[str, object] = {
        "type": "Consumption",
        "meterName": "NC24ads A100 v4",
        "skuName": "NC24ads A100 v4",
        "productName": "Virtual Machines NCadsA100v4 Series",
        "unitOfMeasure": "1 Hour",
        "tierMinimumUnits": D("0.0"),
        "isPrimaryMeterRegion": True,
    }
    row.update(kw)
    return row


def test_market_of() -> None:
    assert azure.market_of(_row()) == (Market.ON_DEMAND, 1)
    assert azure.market_of(_row(meterName="NC24ads A100 v4 Spot", skuName="NC24ads A100 v4 Spot")) == (Market.SPOT, 1)
    assert azure.market_of(_row(meterName="NC24ads A100 v4 Low Priority")) == azure.LOW_PRIORITY
    assert azure.market_of(_row(productName="Virtual Machines NCadsA100v4 Series Windows")) == azure.WINDOWS
    assert azure.market_of(_row(type="Reservation", reservationTerm="3 Years")) == (Market.RESERVED_3Y, 26280)
    assert azure.market_of(_row(type="Reservation", reservationTerm="5 Years")) == azure.UNEXPECTED
    assert azure.market_of(_row(type="DevTestConsumption")) == azure.UNEXPECTED
    assert azure.market_of(_row(isPrimaryMeterRegion=False)) == azure.NOT_PRIMARY


@pytest.mark.parametrize(
    ("size", "gpu"),
    [
        ("Standard_NC24ads_A100_v4", "A100-80GB"),
        ("Standard_ND96amsr_A100_v4", "A100-80GB"),
        ("Standard_ND96asr_v4", "A100-40GB"),
        ("Standard_NC4as_T4_v3", "T4"),
        ("Standard_ND96isr_H100_v5", "H100"),
        ("Standard_NC40ads_H100_v5", "H100"),
        ("Standard_ND96isr_H200_v5", "H200"),
        ("Standard_NC6s_v3", "V100"),
        ("Standard_NC24rs_v3", "V100"),
        ("Standard_ND40rs_v2", "V100-32GB"),
        ("Standard_NV36ads_A10_v5", "A10"),
        ("Standard_ND96isr_MI300X_v5", "MI300X"),
        ("Standard_NV12s_v3", "M60"),
        ("Standard_D8_v4", None),
    ],
)
def test_series_gpu(size: str, gpu: str | None) -> None:
    assert azure.series_gpu(size) == gpu


def test_retry_after() -> None:
    assert azure.retry_after("3", 1.0) == 3.0
    assert azure.retry_after(None, 1.5) == 1.5
    assert azure.retry_after("soon", 2.0) == 2.0
    assert azure.retry_after("999", 1.0) == 60.0
    assert azure.retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1.0) == 0.0  # a date in the past


def test_a_dropped_connection_is_not_retried_by_the_source(rsps: responses.RequestsMock) -> None:
    """Connection errors are retried by the session's urllib3 ``Retry`` (sdk/http.py, the one
    network policy; exercised through real sockets in tests/hostile/test_network_faults.py), which
    ``responses`` bypasses: what reaches the source has been retried already, and is one
    "cannot reach" error at once, not a second loop of its own."""
    import requests

    query = {"$filter": fakes.retail_filter("Standard_ND96asr_v4", "Reservation")}
    rsps.get(
        fakes.PRICES_URL, body=requests.ConnectionError("reset by peer"), match=[matchers.query_param_matcher(query)]
    )
    fakes.register_azure(rsps)
    rsps.assert_all_requests_are_fired = False  # the fetch stops at the first page
    sleeps: list[float] = []
    with pytest.raises(SourceError) as info:
        source(sleeps, backoff=0.25).fetch()
    assert sleeps == [] and "cannot reach azure" in str(info.value)
