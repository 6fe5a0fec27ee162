"""The Azure VM reservations a tenant's identity can see.

Reservations REST, "Reservation - List All" (api-version 2022-11-01)::

    GET https://management.azure.com/providers/Microsoft.Capacity/reservations?api-version=2022-11-01

followed through ``nextLink``, with a bearer token for ``https://management.azure.com/.default``
from azure-identity's ``DefaultAzureCredential`` (imported lazily; tests pass their own
credential) over ``requests``. Kept: ``reservedResourceType == VirtualMachines`` and
``provisioningState == Succeeded``; ``sku.name`` is the VM size, ``location`` the region,
``quantity`` the count, ``effectiveDateTime``/``expiryDateTime`` the dates (``benefitStartTime``
or ``purchaseDateTime`` where ``effectiveDateTime`` is absent), ``term`` P1Y/P3Y. Hourly = the
catalog's ``reserved_1y``/``reserved_3y`` price of that size there; without one the reservation
is a note. Instance size flexibility (a reservation applying to other sizes of its group) is
not modelled: the record holds the size bought.

Ids: ``azure:reservation:<reservationOrderId>/<reservationId>`` (the resource's ``name``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from commitments.records import Commitment, Kind, Known, from_cloud
from gpuprov.errors import CredentialsError, ProvisioningError, TransientError, UnreachableError
from gpuprov.models import Offer
from sdk import azure as sdk_azure

ARM = "https://management.azure.com"
URL = f"{ARM}/providers/Microsoft.Capacity/reservations"
API_VERSION = "2022-11-01"
SCOPE = f"{ARM}/.default"
TERMS = {"P1Y": ("1y", "reserved_1y"), "P3Y": ("3y", "reserved_3y")}
MAX_PAGES = 1000


def _credential() -> Any:
    sdk_azure.load("Azure discovery")
    return sdk_azure.credential()


def reserved_prices(offers: Iterable[Offer]) -> dict[tuple[str, str, str], Decimal]:
    """(region, size, market) → the catalog's Azure reserved price (the lowest over zones)."""
    out: dict[tuple[str, str, str], Decimal] = {}
    for o in offers:
        if o.cloud.value == "azure" and o.market.is_reserved:
            key = (o.region, o.instance_type, o.market.value)
            out[key] = min(out.get(key, o.hourly_usd), o.hourly_usd)
    return out


def _pages(credential: Any, session: Any) -> list[dict[str, Any]]:
    import requests
    from azure.core.exceptions import ClientAuthenticationError

    try:
        token = credential.get_token(SCOPE).token
    except ClientAuthenticationError as exc:
        if sdk_azure.unreachable(exc) is not None:  # the token request itself found no network
            raise sdk_azure.translated(exc, "Azure Reservation - List All") from None
        raise CredentialsError(
            f"Azure credentials: {type(exc).__name__}",
            hint="az login, or set AZURE_CLIENT_ID / AZURE_TENANT_ID and a secret or certificate",
        ) from None
    from sdk import http as sdk_http

    http = session or sdk_http.session(statuses=False)
    url: str | None = URL
    params: dict[str, str] | None = {"api-version": API_VERSION}
    seen: set[str] = set()
    items: list[dict[str, Any]] = []
    while url:
        if len(seen) >= MAX_PAGES or url in seen:
            raise ProvisioningError("Azure Reservation - List All: nextLink loops or never ends")
        seen.add(url)
        try:
            answer = http.get(
                url, params=params, headers={"Authorization": f"Bearer {token}"}, timeout=sdk_http.timeout()
            )
        except requests.RequestException as exc:
            reason = sdk_http.unreachable(exc, "azure")
            if reason is not None:
                raise UnreachableError(f"Azure Reservation - List All: {reason}") from None
            raise TransientError(
                f"Azure Reservation - List All: could not reach Azure ({type(exc).__name__})"
            ) from None
        if answer.status_code != 200:
            code = ""
            try:
                code = str(answer.json().get("error", {}).get("code", ""))[:80]
            except ValueError:
                pass
            named = code or f"HTTP {answer.status_code}"
            if answer.status_code in (401, 403):
                raise CredentialsError(
                    f"Azure refused Reservation - List All: {named}", hint="the identity needs Reservations Reader"
                )
            if answer.status_code in (408, 429) or answer.status_code >= 500:
                raise TransientError(f"Azure Reservation - List All: {named}")
            raise ProvisioningError(f"Azure Reservation - List All failed: {named}")
        try:
            body = answer.json()
        except ValueError:
            raise ProvisioningError("Azure Reservation - List All: the answer is not JSON") from None
        if not isinstance(body, dict) or not isinstance(body.get("value", []), list):
            raise ProvisioningError("Azure Reservation - List All: the answer has no value list")
        items += [v for v in body.get("value", []) if isinstance(v, dict)]
        link = body.get("nextLink")
        url, params = (link if isinstance(link, str) and link.startswith(ARM + "/") else None), None
    return items


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def discover(
    offers: Sequence[Offer] = (),
    now: datetime | None = None,
    credential: Any = None,
    session: Any = None,
    known: Known | None = None,
) -> tuple[list[Commitment], list[str]]:
    """The VM reservations listed, as records, and notes on what was skipped."""
    items = _pages(credential or _credential(), session)
    prices = reserved_prices(offers)
    out: list[Commitment] = []
    notes: list[str] = []
    for item in items:
        found = item.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        if props.get("reservedResourceType") != "VirtualMachines" or props.get("provisioningState") != "Succeeded":
            continue
        rid = f"azure:reservation:{item.get('name')}"
        label = rid[:160]
        size, region = _get(item, "sku", "name"), item.get("location")
        term = props.get("term")
        if term not in TERMS:
            notes.append(f"azure: skipped {label}: term {str(term)[:10]!r} is neither P1Y nor P3Y")
            continue
        short, market = TERMS[term]
        price = prices.get((str(region), str(size), market))
        if price is None:
            notes.append(f"azure: skipped {label}: the catalog has no {market} price of {str(size)[:40]} in {region}")
            continue
        raw = {
            "id": rid,
            "cloud": "azure",
            "kind": Kind.RESERVATION.value,
            "instance_type": size,
            "region": region,
            "count": props.get("quantity"),
            "hourly_usd": format(price, "f"),
            "term": short,
            "starts": props.get("effectiveDateTime") or props.get("benefitStartTime") or props.get("purchaseDateTime"),
            "ends": props.get("expiryDateTime") or props.get("expiryDate"),
        }
        checked = from_cloud(raw, "azure", known)
        if isinstance(checked, str):
            notes.append(f"azure: skipped {label}: {checked}")
        else:
            out.append(checked)
    return out, notes
