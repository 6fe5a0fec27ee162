"""Azure live prices: the Retail Prices API, with GPU counts and shapes from Resource SKUs.

Requests:

* ``ComputeManagementClient(credential, subscription_id).resource_skus.list()`` (azure-core
  retries throttling itself): the VM sizes whose capabilities list "GPUs", with "vCPUs" and
  "MemoryGB". Resource SKUs do not name the GPU model: ``SERIES`` maps size names to it.
* then per GPU size and price type, concurrently, one Retail Prices page chain
  (``GPUPROV_AZURE_PRICES_URL`` or https://prices.azure.com/api/retail/prices) with
  ``$filter`` = serviceName 'Virtual Machines', that ``armSkuName``, ``priceType``
  'Consumption' or 'Reservation'. Pages follow ``NextPageLink``; where it is empty although
  the page held 100 items, the next page is asked for with ``$skip``. Throttling (429, 503)
  and 5xx are retried, honouring ``Retry-After``, with exponential backoff otherwise.

Rows: Consumption rows are on demand, or spot where meterName/skuName ends in " Spot";
" Low Priority" rows (not spot) and Windows rows (productName) are skipped. A Reservation
row's ``retailPrice`` is the total for its term although ``unitOfMeasure`` says "1 Hour":
hourly = price / 8,760 ("1 Year") or / 26,280 ("3 Years"). Prices are per region (zone None).
JSON numbers are parsed straight to Decimal.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from typing import Any

from gpuprov.models import Cloud, Market, Offer
from pricing import azure_sizes, interconnect
from pricing import gpus as gpu_names
from pricing.base import FetchContext, FetchResult, MalformedResponseError, SourceError
from pricing.validate import MISSING, to_price
from sdk import azure as sdk_azure
from sdk import http as sdk_http

SOURCE = "live:azure-retail-prices+resource-skus"
PRICES_URL = "https://prices.azure.com/api/retail/prices"
PRICES_URL_ENV = "GPUPROV_AZURE_PRICES_URL"
PAGE_SIZE = 100
MAX_PAGES = 200  # per chain: a guard against a server that pages forever
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
TERM_HOURS = {"1 Year": (Market.RESERVED_1Y, Decimal(8760)), "3 Years": (Market.RESERVED_3Y, Decimal(26280))}
QUANTUM = Decimal("1e-10")
# size name -> GPU (first match wins); fractional sizes are skipped.
FRACTIONAL = re.compile(r"Standard_NV(6|12|18)ads_A10_v5|Standard_NV(4|8|16)as_v4|Standard_NV\d+ads_V710_v5", re.I)
SERIES: tuple[tuple[str, str], ...] = (
    (r"_T4_v3$", "T4"),
    (r"_A10_v[45]$", "A10"),
    (r"_A100_v4$", "A100-80GB"),
    (r"^Standard_ND96asr_v4$", "A100-40GB"),
    (r"_H100_v5$", "H100"),
    (r"_H200_v5$", "H200"),
    (r"_MI300X_v5$", "MI300X"),
    (r"^Standard_ND40rs_v2$", "V100-32GB"),
    (r"^Standard_NC\d+r?s_v3$", "V100"),
    (r"^Standard_NC\d+r?s_v2$", "P100"),
    (r"^Standard_NV\d+s_v3$", "M60"),
    (r"^Standard_NV\d+as_v4$", "MI25"),
    (r"^Standard_NC\d+r?$", "K80"),
)

_Pool = tuple[str, str, Market]  # region, size, market

LOW_PRIORITY = "low priority (not spot)"
WINDOWS = "Windows"
NOT_PRIMARY = "not the primary meter region"
UNEXPECTED = "unexpected row (unit, tier or term)"


@dataclass(frozen=True, slots=True)
class VmSize:
    name: str
    gpu: str
    gpus: int
    vcpus: int
    memory_gib: Decimal


NO_SUBSCRIPTION = "no Azure subscription: VM sizes from the bundled catalog, Resource SKUs not asked"


def bundled_sizes() -> dict[str, VmSize]:
    """The GPU VM sizes of the bundled Azure snapshot, with their GPUs, vCPUs and memory."""
    from pricing.snapshot import load_bundled

    out: dict[str, VmSize] = {}
    for snap in load_bundled():
        if snap.cloud is Cloud.AZURE:
            for o in snap.offers:
                if o.gpu_fraction is not None:  # partitions: not refreshed live (as vm_size skips them)
                    continue
                out.setdefault(
                    o.instance_type, VmSize(o.instance_type, o.gpu, o.gpus_per_instance, o.vcpus, o.memory_gib)
                )
    return out


def _sdk() -> sdk_azure.Azure:
    return sdk_azure.load("the Azure price source")


# -- parsing (pure) -------------------------------------------------------------------------
def series_gpu(size: str) -> str | None:
    for pattern, gpu in SERIES:
        if re.search(pattern, size, re.I):
            return gpu
    return None


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def vm_size(sku: Any, skipped: Counter[str]) -> VmSize | None:
    """A GPU VM size from one Resource SKU (a model or a dict), or None."""
    if _field(sku, "resource_type") not in ("virtualMachines", None) or not _field(sku, "name"):
        return None
    caps = {str(_field(c, "name")): str(_field(c, "value")) for c in _field(sku, "capabilities") or []}
    name = str(_field(sku, "name"))
    try:
        gpus, vcpus, memory = (Decimal(caps.get(k, "0")) for k in ("GPUs", "vCPUs", "MemoryGB"))
    except InvalidOperation:
        skipped[f"malformed capabilities of {name}"] += 1
        return None
    if gpus < 1:
        return None
    if FRACTIONAL.fullmatch(name):
        skipped["fractional GPU"] += 1
        return None
    gpu = series_gpu(name)
    if gpu is None:
        skipped[f"unknown GPU series {name}"] += 1
        return None
    return VmSize(name=name, gpu=gpu_names.canonical(gpu), gpus=int(gpus), vcpus=int(vcpus), memory_gib=memory)


def market_of(item: Mapping[str, Any]) -> tuple[Market, Decimal] | str:
    """The market of one retail row and the divisor that makes its price hourly, or a skip reason."""
    if "windows" in str(item.get("productName", "")).lower():
        return WINDOWS
    if item.get("isPrimaryMeterRegion") is False:
        return NOT_PRIMARY
    if to_price(item.get("tierMinimumUnits")) not in (None, Decimal(0)) or item.get("unitOfMeasure") != "1 Hour":
        return UNEXPECTED
    if item.get("type") == "Reservation":
        term = TERM_HOURS.get(str(item.get("reservationTerm")))
        return term if term is not None else UNEXPECTED
    if item.get("type") != "Consumption":
        return UNEXPECTED
    names = (str(item.get("meterName", "")), str(item.get("skuName", "")))
    if any(n.endswith(" Low Priority") for n in names):
        return LOW_PRIORITY
    if any(n.endswith(" Spot") for n in names):
        return Market.SPOT, Decimal(1)
    return Market.ON_DEMAND, Decimal(1)


def retail_filter(size: str, price_type: str) -> str:
    return f"serviceName eq 'Virtual Machines' and armSkuName eq '{size}' and priceType eq '{price_type}'"


def retry_after(value: str | None, default: float) -> float:
    """Seconds from a Retry-After header (seconds or an HTTP date), capped at a minute."""
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return default
    return min(max(seconds, 0.0), 60.0)


# -- the source -------------------------------------------------------------------------------
class AzurePriceSource:
    cloud = Cloud.AZURE
    name = SOURCE

    def __init__(
        self,
        subscription_id: str | None = None,
        credential: Any = None,
        *,
        prices_url: str | None = None,
        arm_endpoint: str | None = None,
        max_attempts: int = 6,
        backoff: float = 1.0,
        timeout: float = 30.0,
        pool_connections: int = 32,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.subscription_id = subscription_id
        self.credential = credential
        self.prices_url = prices_url
        self.arm_endpoint = arm_endpoint
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.timeout = timeout
        self.pool_connections = pool_connections
        self.sleep = sleep
        self._clients: tuple[Any, Any] | None = None
        self._lock = threading.Lock()

    def clients(self, sdk: sdk_azure.Azure) -> tuple[Any, Any]:
        """(the ARM compute client or None without a subscription, the HTTP session for the Retail
        API), made once per source. The Retail Prices API is anonymous: without a subscription the
        refresh goes on, with the VM sizes the bundled catalog knows (see ``bundled_sizes``)."""
        with self._lock:
            if self._clients is None:
                subscription = self.subscription_id or os.environ.get("AZURE_SUBSCRIPTION_ID")
                arm = None
                if subscription:  # the network policy's settings (sdk/azure.py) for the credential and ARM
                    credential = self.credential or sdk_azure.credential()
                    arm = sdk.compute_client(credential, subscription, **sdk_azure.arm(self.arm_endpoint))
                # a failed connection retried by urllib3 as the policy says (sdk/http.py); statuses here
                self._clients = (arm, sdk_http.session(statuses=False, pool=self.pool_connections))
            return self._clients

    def fetch(self, gpus: Collection[str] | None = None, ctx: FetchContext | None = None) -> FetchResult:
        ctx = ctx or FetchContext(self.cloud, self.name)
        sdk = _sdk()
        try:
            return _AzureFetch(self, sdk, ctx, gpus).run()
        except sdk.errors.ClientAuthenticationError as exc:
            raise SourceError(
                self.name,
                f"Azure authentication failed: {exc.message}",
                hint="sign in with 'az login' or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET",
            ) from exc
        except sdk.errors.AzureError as exc:
            reason = sdk_azure.unreachable(exc)
            raise SourceError(self.name, reason or f"an Azure API call failed: {exc.message}") from exc


class _AzureFetch:
    def __init__(
        self, src: AzurePriceSource, sdk: sdk_azure.Azure, ctx: FetchContext, gpus: Collection[str] | None
    ) -> None:
        self.src, self.sdk, self.ctx = src, sdk, ctx
        self.gpus = set(gpus) if gpus is not None else None
        self.base_url = src.prices_url or os.environ.get(PRICES_URL_ENV) or PRICES_URL
        self.skipped: Counter[str] = Counter()
        self.arm, self.http = src.clients(sdk)

    def _sizes(self) -> dict[str, VmSize]:
        if self.arm is None:
            self.skipped[NO_SUBSCRIPTION] += 1
            return {k: v for k, v in bundled_sizes().items() if self.gpus is None or v.gpu in self.gpus}
        client = self.arm
        local = bool(self.src.arm_endpoint and self.src.arm_endpoint.startswith("http://"))
        sizes: dict[str, VmSize] = {}
        self.ctx.expect(1)
        for page in client.resource_skus.list(**({"enforce_https": False} if local else {})).by_page():
            for sku in page:
                size = vm_size(sku, self.skipped)
                if size is not None and (self.gpus is None or size.gpu in self.gpus):
                    sizes.setdefault(size.name, size)
            self.ctx.request_done("resourceSkus.list")
            self.ctx.check()
        return sizes

    def _get(self, url: str, params: dict[str, str] | None) -> dict[str, Any]:
        requests = self.sdk.requests
        for attempt in range(1, self.src.max_attempts + 1):
            self.ctx.check()
            delay = self.src.backoff * 2 ** (attempt - 1)
            try:
                resp = self.http.get(url, params=params, timeout=sdk_http.timeout(read=self.src.timeout))
            except (requests.ConnectionError, requests.Timeout) as exc:  # retried already, by the session
                reason = sdk_http.unreachable(exc, "azure")
                raise SourceError(self.src.name, reason or f"the Retail Prices API is unreachable: {exc}") from exc
            except requests.exceptions.ChunkedEncodingError as exc:  # a cut body: asked again
                if attempt == self.src.max_attempts:
                    raise SourceError(self.src.name, "a Retail Prices page kept breaking off") from exc
                self.src.sleep(delay)
                continue
            except requests.RequestException as exc:
                raise SourceError(self.src.name, f"a Retail Prices request failed: {exc}") from exc
            if resp.status_code in RETRY_STATUS and attempt < self.src.max_attempts:
                self.src.sleep(retry_after(resp.headers.get("Retry-After"), delay))
                continue
            if resp.status_code != 200:
                raise SourceError(self.src.name, f"the Retail Prices API answered HTTP {resp.status_code} for {url}")
            try:
                page = resp.json(parse_float=Decimal)
            except ValueError as exc:
                raise MalformedResponseError(self.src.name, f"a Retail Prices page is not JSON: {exc}") from None
            if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
                raise MalformedResponseError(self.src.name, "a Retail Prices page has no Items list")
            self.ctx.request_done("retail prices page")
            return page
        raise AssertionError("unreachable")

    def _chain(self, size: str, price_type: str) -> list[dict[str, Any]]:
        """Every row of one filter, following NextPageLink, or $skip where it is missing."""
        first = {"$filter": retail_filter(size, price_type)}
        url, items = self.base_url, []
        params: dict[str, str] | None = dict(first)
        for _ in range(MAX_PAGES):
            page = self._get(url, params)
            items += page["Items"]
            link = page.get("NextPageLink")
            if link:
                url, params = str(link), None
            elif len(page["Items"]) >= PAGE_SIZE:
                url, params = self.base_url, dict(first, **{"$skip": str(len(items))})
            else:
                return items
        raise MalformedResponseError(self.src.name, f"more than {MAX_PAGES} pages for {size} {price_type}")

    def run(self) -> FetchResult:
        sizes = self._sizes()
        chains = [(size, kind) for size in sorted(sizes) for kind in ("Consumption", "Reservation")]
        self.ctx.expect(len(chains))
        pages = self.ctx.gather([self.ctx.submit(self._chain, size, kind) for size, kind in chains])
        offers: dict[_Pool, tuple[str, Offer]] = {}
        for (size, _), items in zip(chains, pages, strict=True):
            for item in items:
                self._add(sizes[size], item, offers)
        return FetchResult(offers=[o for _, o in offers.values()], skipped=self.skipped, requests=self.ctx.requests)

    def _add(self, size: VmSize, item: Mapping[str, Any], offers: dict[_Pool, tuple[str, Offer]]) -> None:
        region = str(item.get("armRegionName") or "")
        if item.get("armSkuName") != size.name or item.get("serviceName") != "Virtual Machines" or not region:
            self.skipped[UNEXPECTED] += 1
            return
        kind = market_of(item)
        if isinstance(kind, str):
            self.skipped[kind] += 1
            return
        market, hours = kind
        price = to_price(item.get("retailPrice"))
        if price is None:
            self.skipped[MISSING] += 1
            return
        hourly = (price / hours).quantize(QUANTUM) if hours != 1 and price.is_finite() else price
        offer = Offer(
            cloud=Cloud.AZURE,
            region=region,
            zone=None,
            instance_type=size.name,
            gpu=size.gpu,
            gpus_per_instance=size.gpus,
            gpu_memory_gib=gpu_names.memory_gib(size.gpu),
            vcpus=size.vcpus,
            memory_gib=size.memory_gib,
            market=market,
            hourly_usd=hourly,
            currency=str(item.get("currencyCode") or "USD"),
            interconnect=interconnect.of("azure", size.name),
        )
        offer = azure_sizes.corrected(offer)  # GPUs and GPU memory from Microsoft's size tables
        key, since = (region, size.name, market), str(item.get("effectiveStartDate") or "")
        if key not in offers or since > offers[key][0]:  # the newest row of a meter wins
            offers[key] = (since, offer)
