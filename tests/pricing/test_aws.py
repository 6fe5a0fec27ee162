"""AWS prices: moto for EC2, recorded GetProducts pages and spot history through botocore hooks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from gpuprov.models import Cloud, Market, Offer
from pricing import aws
from pricing.base import FetchContext, MalformedResponseError, SourceError
from tests.pricing import fakes

REGIONS = ["us-east-1", "us-west-2"]


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_PRICING", "AWS_ENDPOINT_URL_EC2"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's standard retry mode sleeps up to seconds between attempts; not in tests."""
    from botocore.retries import standard

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)


def by_key(offers: list[Offer]) -> dict[tuple[str, str | None, str, Market], Offer]:
    out = {(o.region, o.zone, o.instance_type, o.market): o for o in offers}
    assert len(out) == len(offers), "one offer per pool"
    return out


def test_prices_specs_and_zone_ids() -> None:
    result = aws.AwsPriceSource(REGIONS, fakes.aws_session()).fetch()
    offers = by_key(result.offers)
    p4d = offers[("us-east-1", "use1-az1", "p4d.24xlarge", Market.ON_DEMAND)]
    assert (p4d.cloud, p4d.gpu, p4d.gpus_per_instance, p4d.gpu_memory_gib) == (Cloud.AWS, "A100-40GB", 8, 40)
    assert (p4d.vcpus, p4d.memory_gib, p4d.hourly_usd) == (96, Decimal(1152), Decimal("21.957642"))
    # spot: zone names from the history mapped to zone ids (moto: us-east-1b is use1-az1)
    assert offers[("us-east-1", "use1-az1", "p4d.24xlarge", Market.SPOT)].hourly_usd == Decimal("2.4655")
    assert offers[("us-west-2", "usw2-az2", "p5.48xlarge", Market.SPOT)].hourly_usd == Decimal("12.9785")
    # on demand in every zone that offers the type (moto's offerings), and nowhere else
    p4d_zones = {k[1] for k in offers if k[2] == "p4d.24xlarge" and k[0] == "us-east-1" and k[3] is Market.ON_DEMAND}
    assert p4d_zones == {"use1-az1", "use1-az2", "use1-az4", "use1-az6"}
    assert all(o.zone is not None and "-az" in o.zone for o in result.offers if not o.market.is_reserved)
    # specs once; per region zones, products (us-east-1: 2 pages), offerings, spot
    assert result.requests == 1 + 2 * 4 + 1


def test_capacity_block_sku_is_skipped_not_priced_zero() -> None:
    result = aws.AwsPriceSource(["us-east-1"], fakes.aws_session()).fetch()
    assert result.skipped[aws.CAPACITY_BLOCK] == 1
    assert all(o.hourly_usd > 0 for o in result.offers)


def test_latest_spot_quote_wins_and_unknown_zones_are_counted() -> None:
    result = aws.AwsPriceSource(["us-east-1"], fakes.aws_session()).fetch()
    offers = by_key(result.offers)
    # us-east-1c (use1-az2) has an older 9.04 quote and a newer 8.1915 one
    assert offers[("us-east-1", "use1-az2", "p4d.24xlarge", Market.SPOT)].hourly_usd == Decimal("8.1915")
    assert result.skipped[aws.UNKNOWN_ZONE] == 1  # the local zone us-east-1-atl-2a is not in moto's list


def test_reserved_is_regional_and_prefers_standard_no_upfront() -> None:
    offers = by_key(aws.AwsPriceSource(REGIONS, fakes.aws_session()).fetch().offers)
    r1 = offers[("us-east-1", None, "p4d.24xlarge", Market.RESERVED_1Y)]
    assert r1.hourly_usd == Decimal("13.921094")  # the real 1-year standard no-upfront rate
    assert offers[("us-east-1", None, "p4d.24xlarge", Market.RESERVED_3Y)].hourly_usd == Decimal("7.257164")
    # g5.xlarge has no 3-year no-upfront option: the cheaper of partial (4020 + 0.153/h) and all upfront (7557)
    g5 = offers[("us-east-1", None, "g5.xlarge", Market.RESERVED_3Y)]
    assert g5.hourly_usd == (Decimal(7557) / 26280).quantize(Decimal("1e-10"))
    assert g5.hourly_usd < Decimal(4020) / 26280 + Decimal("0.153")
    assert ("us-east-1", None, "p5.48xlarge", Market.RESERVED_1Y) not in offers  # no reserved term recorded
    assert not any(o.market.is_reserved and o.zone for o in offers.values())


def test_gpu_filter_narrows_requests_and_offers() -> None:
    asked: list[list[str]] = []

    def spot(request: Any, **kw: Any) -> AWSResponse:
        from urllib.parse import parse_qs

        asked.append(
            sorted(v for k, vs in parse_qs(str(request.body)).items() if k.startswith("InstanceType") for v in vs)
        )
        return fakes.replay_spot(request, **kw)

    result = aws.AwsPriceSource(["us-east-1"], fakes.aws_session(spot=spot)).fetch({"H100"})
    assert {o.instance_type for o in result.offers} == {"p5.48xlarge"}
    [types] = asked  # one spot request, for the H100 types only (moto has two)
    assert "p5.48xlarge" in types and all(t.startswith("p5.") for t in types)


def test_throttled_get_products_is_retried(no_backoff: None) -> None:
    calls = {"n": 0}

    def throttle_twice(request: Any, **kw: Any) -> AWSResponse:
        calls["n"] += 1
        if calls["n"] <= 2:
            body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
            return fakes.aws_response(request.url, 400, body, "application/x-amz-json-1.1")
        return fakes.replay_products(request, **kw)

    result = aws.AwsPriceSource(["us-west-2"], fakes.aws_session(products=throttle_twice)).fetch()
    assert calls["n"] == 3
    assert any(o.market is Market.RESERVED_1Y for o in result.offers)


def test_throttling_that_never_ends_fails_the_source(no_backoff: None) -> None:
    def always(request: Any, **_kw: Any) -> AWSResponse:
        body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
        return fakes.aws_response(request.url, 400, body, "application/x-amz-json-1.1")

    with pytest.raises(SourceError) as err:
        aws.AwsPriceSource(["us-west-2"], fakes.aws_session(products=always), max_attempts=3).fetch()
    assert err.value.source == aws.SOURCE and "ThrottlingException" in err.value.message


def test_malformed_price_list_entry_fails_the_source() -> None:
    def broken(request: Any, **_kw: Any) -> AWSResponse:
        body = json.dumps({"FormatVersion": "aws_v1", "PriceList": ["{not json"]}).encode()
        return fakes.aws_response(request.url, 200, body, "application/x-amz-json-1.1")

    with pytest.raises(MalformedResponseError):
        aws.AwsPriceSource(["us-west-2"], fakes.aws_session(products=broken)).fetch()


def test_regions_come_from_describe_regions() -> None:
    session = fakes.aws_session()

    def two_regions(**_kw: Any) -> tuple[AWSResponse, dict[str, Any]]:
        regions = [{"RegionName": r, "Endpoint": f"ec2.{r}.amazonaws.com"} for r in ("us-west-2", "us-east-1")]
        return AWSResponse("https://ec2", 200, {}, None), {"Regions": regions}

    session.events.register("before-call.ec2.DescribeRegions", two_regions)
    ctx = FetchContext(Cloud.AWS)
    result = aws.AwsPriceSource(session=session).fetch(None, ctx)
    assert {o.region for o in result.offers} == set(REGIONS)
    assert ctx.requests == result.requests == 11


# -- pure parsing -------------------------------------------------------------------------
def _term(option: str, lease: str, upfront: str | None, hourly: str, cls: str = "standard") -> dict[str, Any]:
    dims: dict[str, Any] = {"h": {"unit": "Hrs", "pricePerUnit": {"USD": hourly}}}
    if upfront is not None:
        dims["u"] = {"unit": "Quantity", "pricePerUnit": {"USD": upfront}}
    return {
        "priceDimensions": dims,
        "termAttributes": {"LeaseContractLength": lease, "OfferingClass": cls, "PurchaseOption": option},
    }


def test_choose_reserved_effective_hourly() -> None:
    terms = {
        "a": _term("All Upfront", "1yr", "8760", "0"),
        "p": _term("Partial Upfront", "1yr", "4380", "0.4"),
        "c": _term("No Upfront", "1yr", None, "0.1", cls="convertible"),
    }
    chosen = aws.choose_reserved(terms)
    assert chosen == {Market.RESERVED_1Y: aws.Price(Decimal("0.9"))}  # partial: 4380/8760 + 0.4 = 0.9 < 1.0
    terms["n"] = _term("No Upfront", "1yr", None, "1.1")
    assert aws.choose_reserved(terms)[Market.RESERVED_1Y].amount == Decimal("1.1")  # no upfront wins


def test_non_usd_prices_keep_their_currency() -> None:
    record = {
        "product": {
            "attributes": {"instanceType": "p4d.24xlarge", "regionCode": "cn-north-1", "operation": "RunInstances"}
        },
        "terms": {"OnDemand": {"t": {"priceDimensions": {"d": {"unit": "Hrs", "pricePerUnit": {"CNY": "200.5"}}}}}},
    }
    parsed = aws.parse_product(json.dumps(record))
    assert isinstance(parsed, aws.ProductPrices)
    assert parsed.on_demand == aws.Price(Decimal("200.5"), "CNY")


def test_gpu_spec_tells_a100_variants_apart_by_memory() -> None:
    item = {
        "InstanceType": "p4de.24xlarge",
        "VCpuInfo": {"DefaultVCpus": 96},
        "MemoryInfo": {"SizeInMiB": 1179648},
        "GpuInfo": {"Gpus": [{"Name": "A100", "Count": 8, "MemoryInfo": {"SizeInMiB": 81920}}]},
    }
    spec = aws.gpu_spec(item)
    assert isinstance(spec, aws.InstanceSpec) and spec.gpu == "A100-80GB"
    item["GpuInfo"]["Gpus"][0]["MemoryInfo"]["SizeInMiB"] = 40960
    assert aws.gpu_spec(item) == aws.InstanceSpec("p4de.24xlarge", "A100-40GB", 8, 96, Decimal(1152))
    assert aws.gpu_spec({"InstanceType": "m5.large"}) == "no GPU"


def test_a_source_without_a_session_makes_its_own_clients_once() -> None:
    import boto3
    import botocore

    source = aws.AwsPriceSource(["us-east-1"])
    pricing = source.client(boto3, botocore, "pricing", "us-east-1")
    ec2 = source.client(boto3, botocore, "ec2", "us-east-1")
    assert source.client(boto3, botocore, "ec2", "us-east-1") is ec2  # cached
    pricing.meta.events.register_first("before-send.pricing.GetProducts", fakes.replay_products)
    ec2.meta.events.register_first("before-send.ec2.DescribeSpotPriceHistory", fakes.replay_spot)
    offers = by_key(source.fetch().offers)
    # the latest quote still wins with the fast ISO-8601 timestamp parser of the source's own session
    assert offers[("us-east-1", "use1-az2", "p4d.24xlarge", Market.SPOT)].hourly_usd == Decimal("8.1915")


def test_timestamps_are_parsed_aware() -> None:
    from datetime import UTC, datetime

    def fallback(value: str) -> datetime:
        return datetime(2000, 1, 1, tzinfo=UTC)

    assert aws._timestamp(fallback, "2025-11-30T23:12:41.000Z") == datetime(2025, 11, 30, 23, 12, 41, tzinfo=UTC)
    assert aws._timestamp(fallback, "2025-11-30T23:12:41").tzinfo is UTC
    assert aws._timestamp(fallback, "Mon, 30 Nov 2025 23:12:41 GMT") == datetime(2000, 1, 1, tzinfo=UTC)
