"""Local fakes for the price sources: recorded pages replayed into the real SDK clients.

AWS: moto (``mock_aws``) answers the EC2 calls; recorded ``GetProducts`` pages and
``DescribeSpotPriceHistory`` responses are replayed through botocore ``before-send``
hooks (moto has no Price List API, and its spot history is a placeholder). GCP and Azure:
recorded HTTP responses registered with ``responses``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AWS = FIXTURES / "aws"
GCP = FIXTURES / "gcp"
AZURE = FIXTURES / "azure"


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_kw: Any) -> Iterator[bytes]:
        yield self.body


def aws_response(url: str, status: int, body: bytes, content_type: str) -> AWSResponse:
    return AWSResponse(url, status, {"content-type": content_type}, _Raw(body))


def _region_of(request: Any) -> str:
    auth = request.headers.get("Authorization", b"")
    text = auth.decode() if isinstance(auth, bytes) else str(auth)
    match = re.search(r"Credential=[^/]+/\d+/([a-z0-9-]+)/", text)
    assert match, text
    return match.group(1)


def products_page(request: Any) -> bytes:
    """The recorded GetProducts page the request asks for (regionCode filter, NextToken)."""
    body = json.loads(request.body)
    assert body["ServiceCode"] == "AmazonEC2"
    fields = {f["Field"]: f["Value"] for f in body["Filters"]}
    assert fields["operatingSystem"] == "Linux" and fields["capacitystatus"] == "Used"
    region = fields["regionCode"]
    page = 2 if body.get("NextToken") else 1
    path = AWS / f"get-products-{region}-page{page}.json"
    if not path.exists():
        return json.dumps({"FormatVersion": "aws_v1", "PriceList": []}).encode()
    return path.read_bytes()


def spot_page(request: Any) -> bytes:
    path = AWS / f"describe-spot-price-history-{_region_of(request)}.xml"
    if not path.exists():
        return (
            b'<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            b"<requestId>r</requestId><spotPriceHistorySet/></DescribeSpotPriceHistoryResponse>"
        )
    return path.read_bytes()


Hook = Callable[..., AWSResponse | None]


def replay_products(request: Any, **_kw: Any) -> AWSResponse:
    return aws_response(request.url, 200, products_page(request), "application/x-amz-json-1.1")


def replay_spot(request: Any, **_kw: Any) -> AWSResponse:
    return aws_response(request.url, 200, spot_page(request), "text/xml")


def aws_session(products: Hook = replay_products, spot: Hook = replay_spot) -> Any:
    """A boto3 session (use inside ``mock_aws``) whose clients replay the recorded pages."""
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
    session.events.register_first("before-send.pricing.GetProducts", products)
    session.events.register_first("before-send.ec2.DescribeSpotPriceHistory", spot)
    return session


# -- GCP -----------------------------------------------------------------------------------
GCP_PROJECT = "gpuprov-test"
BILLING_URL = "https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus"
COMPUTE_URL = f"https://compute.googleapis.com/compute/v1/projects/{GCP_PROJECT}"
BILLING_QUERY = {"currencyCode": "USD", "$alt": "json;enum-encoding=int"}


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def gcp_sku_pages() -> list[tuple[dict[str, str], Any]]:
    """(query, body) of the three recorded billing pages, chained by nextPageToken."""
    pages = [_json(GCP / f"skus-page{i}.json") for i in (1, 2, 3)]
    queries = [
        dict(BILLING_QUERY),
        dict(BILLING_QUERY, pageToken=pages[0]["nextPageToken"]),
        dict(BILLING_QUERY, pageToken=pages[1]["nextPageToken"]),
    ]
    return list(zip(queries, pages, strict=True))


def register_gcp(rsps: Any, skus: bool = True, compute: bool = True) -> None:
    """Register the recorded Cloud Billing and Compute Engine pages with a ``responses`` mock."""
    from responses import matchers

    if skus:
        for query, body in gcp_sku_pages():
            rsps.get(BILLING_URL, json=body, match=[matchers.query_param_matcher(query)])
    if compute:
        rsps.get(f"{COMPUTE_URL}/aggregated/acceleratorTypes", json=_json(GCP / "accelerator-types-aggregated.json"))
        for zone in ("us-central1-a", "us-east4-a", "europe-west4-a"):
            first = _json(GCP / f"machine-types-{zone}-page1.json")
            url = f"{COMPUTE_URL}/zones/{zone}/machineTypes"
            token = first.get("nextPageToken")
            rsps.get(url, json=first, match=[_no_page_token])
            if token:
                rsps.get(
                    url,
                    json=_json(GCP / f"machine-types-{zone}-page2.json"),
                    match=[matchers.query_param_matcher({"pageToken": token}, strict_match=False)],
                )


def _no_page_token(request: Any) -> tuple[bool, str]:
    return ("pageToken=" not in (request.url or ""), "a first page has no pageToken")


# -- Azure ---------------------------------------------------------------------------------
AZURE_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
ARM_SKUS_URL = f"https://management.azure.com/subscriptions/{AZURE_SUBSCRIPTION}/providers/Microsoft.Compute/skus"
PRICES_URL = "https://prices.azure.com/api/retail/prices"
AZURE_SIZES = (
    "Standard_NC24ads_A100_v4",
    "Standard_NC4as_T4_v3",
    "Standard_NC6s_v3",
    "Standard_ND96asr_v4",
    "Standard_ND96isr_H100_v5",
)
EMPTY_PAGE = {
    "BillingCurrency": "USD",
    "CustomerEntityId": "Default",
    "CustomerEntityType": "Retail",
    "Items": [],
    "NextPageLink": None,
    "Count": 0,
}


class FakeCredential:
    def get_token(self, *_scopes: str, **_kw: Any) -> Any:
        import time

        from azure.core.credentials import AccessToken

        return AccessToken("fake-token", int(time.time()) + 3600)


def retail_filter(size: str, price_type: str) -> str:
    return f"serviceName eq 'Virtual Machines' and armSkuName eq '{size}' and priceType eq '{price_type}'"


def azure_pages(size: str, price_type: str) -> list[Any]:
    pages = sorted(AZURE.glob(f"retail-{size}-{price_type}-page*.json"))
    return [_json(p) for p in pages] or [EMPTY_PAGE]


def register_azure(rsps: Any, skip: Collection[tuple[str, str]] = (), prices_url: str = PRICES_URL) -> None:
    """Register Resource SKUs and every retail page chain, except the (size, price type) in ``skip``."""
    from responses import matchers

    page1 = _json(AZURE / "resource-skus-page1.json")
    rsps.get(ARM_SKUS_URL, json=page1, match=[matchers.query_param_matcher({"api-version": "2021-07-01"})])
    rsps.get(
        ARM_SKUS_URL,
        json=_json(AZURE / "resource-skus-page2.json"),
        match=[matchers.query_param_matcher({"api-version": "2021-07-01", "$skiptoken": "c2t1cy1wYWdlLTI="})],
    )
    for size in AZURE_SIZES:
        for price_type in ("Consumption", "Reservation"):
            if (size, price_type) not in skip:
                register_chain(rsps, size, price_type, azure_pages(size, price_type), prices_url)


def register_chain(rsps: Any, size: str, price_type: str, pages: list[Any], prices_url: str = PRICES_URL) -> None:
    from responses import matchers

    query = {"$filter": retail_filter(size, price_type)}
    seen = 0
    for i, page in enumerate(pages):
        if i == 0:
            rsps.get(prices_url, json=page, match=[matchers.query_param_matcher(query)])
        elif pages[i - 1]["NextPageLink"]:
            rsps.get(
                pages[i - 1]["NextPageLink"].split("?")[0],
                json=page,
                match=[matchers.query_param_matcher(dict(query, **{"$skip": str(seen)}))],
            )
        else:
            rsps.get(prices_url, json=page, match=[matchers.query_param_matcher(dict(query, **{"$skip": str(seen)}))])
        seen += len(page["Items"])
