"""Azure reservation discovery: Reservation - List All pages (tests/fixtures/azure/reservations,
see its PROVENANCE.md) replayed with ``responses``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import responses
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError
from responses import matchers

from commitments import azure
from commitments.records import Kind
from gpuprov.errors import CredentialsError, ProvisioningError
from gpuprov.models import Cloud, Market, Offer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "azure" / "reservations"
URL = "https://management.azure.com/providers/Microsoft.Capacity/reservations"
NOW = datetime(2026, 11, 10, tzinfo=UTC)
SECRET = "eyJ0eXAiOiJKV1Qi.fake-access-token.not-real"


class FakeCredential:
    def get_token(self, *scopes: str, **kw: Any) -> AccessToken:
        assert scopes == ("https://management.azure.com/.default",)
        return AccessToken(SECRET, int(time.time()) + 3600)


class NoCredential:
    def get_token(self, *scopes: str, **kw: Any) -> AccessToken:
        raise ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token")


def offer(size: str, region: str, market: str, price: str) -> Offer:
    return Offer(Cloud.AZURE, region, None, size, "A100-40GB", 1, 80, 24, Decimal(220), Market(market), Decimal(price))


# Made-up reserved prices (the bundled catalog carries no Azure reservations): on-demand times
# the 1-year and 3-year ratios of tests/fixtures/azure/PROVENANCE.md, rounded.
OFFERS = [
    offer("Standard_NC24ads_A100_v4", "eastus", "reserved_1y", "2.1667"),
    offer("Standard_NC24ads_A100_v4", "eastus", "on_demand", "3.673"),
    offer("Standard_ND96asr_v4", "westeurope", "reserved_3y", "10.4125"),
]


def page(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture
def replay() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as rsps:
        yield rsps


def serve(rsps: responses.RequestsMock) -> None:
    auth = matchers.header_matcher({"Authorization": f"Bearer {SECRET}"})
    rsps.get(
        URL,
        json=page("reservations.listAll.page1.json"),
        match=[matchers.query_param_matcher({"api-version": "2022-11-01"}), auth],
    )
    rsps.get(
        URL,
        json=page("reservations.listAll.page2.json"),
        match=[matchers.query_param_matcher({"api-version": "2022-11-01", "$skiptoken": "2"}), auth],
    )


def test_vm_reservations_become_records_priced_from_the_catalog(replay: responses.RequestsMock) -> None:
    serve(replay)
    records, notes = azure.discover(OFFERS, NOW, credential=FakeCredential())
    by_id = {r.id: r for r in records}
    a100 = by_id["azure:reservation:4b6e2f1a-0c3d-4e5f-8a9b-000000000001/9d0c1b2a-3e4f-4a5b-9c6d-000000000001"]
    assert (a100.kind, a100.instance_type, a100.region, a100.zone, a100.count, a100.term, a100.hourly_usd) == (
        Kind.RESERVATION,
        "Standard_NC24ads_A100_v4",
        "eastus",
        None,
        4,
        "1y",
        Decimal("2.1667"),
    )
    assert (a100.starts, a100.ends, a100.source) == (
        datetime(2026, 6, 1, tzinfo=UTC),
        datetime(2027, 6, 1, tzinfo=UTC),
        "azure",
    )
    nd = by_id["azure:reservation:4b6e2f1a-0c3d-4e5f-8a9b-000000000003/9d0c1b2a-3e4f-4a5b-9c6d-000000000005"]
    assert (nd.instance_type, nd.region, nd.count, nd.term, nd.hourly_usd) == (
        "Standard_ND96asr_v4",
        "westeurope",
        1,
        "3y",
        Decimal("10.4125"),
    )
    assert nd.starts == datetime(2025, 2, 10, 9, 30, 0, 123456, tzinfo=UTC)
    assert len(records) == 2

    joined = "\n".join(notes)
    assert len(notes) == 4, joined
    assert "000000000002: the catalog has no reserved_1y price of Standard_D2s_v3 in eastus" in joined
    assert "000000000006: term 'P5Y' is neither P1Y nor P3Y" in joined
    assert "000000000007: count must be at least 1, got -3" in joined
    assert "000000000008: ends 2026-05-01 00:00 is not after starts 2026-06-01 00:00" in joined
    assert SECRET not in joined


def test_no_credentials_is_one_line() -> None:
    with pytest.raises(CredentialsError, match="Azure credentials: ClientAuthenticationError"):
        azure.discover(OFFERS, NOW, credential=NoCredential())


def test_a_refusal_names_the_arm_code(replay: responses.RequestsMock) -> None:
    replay.get(URL, status=403, json={"error": {"code": "AuthorizationFailed", "message": "no access"}})
    with pytest.raises(CredentialsError, match="Azure refused Reservation - List All: AuthorizationFailed"):
        azure.discover(OFFERS, NOW, credential=FakeCredential())


def test_a_next_link_that_loops_stops(replay: responses.RequestsMock) -> None:
    body = {"value": [], "nextLink": f"{URL}?api-version=2022-11-01&$skiptoken=x"}
    replay.get(URL, json=body)
    with pytest.raises(ProvisioningError, match="nextLink loops"):
        azure.discover(OFFERS, NOW, credential=FakeCredential())
