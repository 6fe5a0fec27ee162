"""GCP live prices: Cloud Billing Catalog unit prices times Compute Engine machine shapes.

Requests (google-cloud-billing over REST, google-cloud-compute; credentials from
``google.auth.default()`` unless given; retries on 429/5xx through ``google.api_core.retry``):

* ``CloudCatalogClient.list_skus`` for Compute Engine (``services/6F81-5844-456A``, USD):
  one page chain, concurrently with
* ``AcceleratorTypesClient.aggregated_list``: the zones that have GPUs, and how many
  cards of each an instance may attach; then per GPU zone, concurrently,
  ``MachineTypesClient.list`` filtered to the GPU machine families and the n1 hosts.

An instance's price = vCPUs × the family's core price + RAM GiB × its RAM price + GPUs ×
the GPU price, per usage type: OnDemand -> on_demand, Preemptible -> spot, Commit1Yr /
Commit3Yr -> reserved_1y / reserved_3y. Machine types with built-in GPUs (a2, a3, a4, g2) and
n1 hosts for attachable T4/V100/P4/P100 come from ``pricing.skypilot``'s mapping. A SKU
applies to every region in its ``serviceRegions``; its unit price is the first tier of its
latest ``pricingInfo`` (``units + nanos / 10**9``, exact). Commitments are regional in GCP,
so reserved offers have zone None, one per region and machine shape.

Names differ between usage types ("A3 Instance Core" on demand, "A3 Cpu" in commitments,
"Spot Preemptible …" and "… attached to Spot Preemptible VMs" for spot): ``sku_key``
normalises them to (kind, family or GPU). Family of a machine type: its prefix
(``a2-highgpu-1g`` -> A2), except a3-megagpu, billed as "A3Plus", and a3-ultragpu, assumed
"A3Ultra" (no sample seen: if the catalog names it otherwise, its offers are skipped and
counted, not priced with A3 rates); n1 commitments carry no family ("Commitment v1: Cpu in …")
and count as N1.
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpuprov.errors import ConfigError, GpuprovError, UnknownGpuError
from gpuprov.models import Cloud, Market, Offer
from pricing import gcp_machines
from pricing import gpus as gpu_names
from pricing.base import FetchContext, FetchResult, MalformedResponseError, SourceError
from pricing.skypilot import _GCP_ATTACHABLE, _GCP_BUILTIN, GCP_N1_HOST, _gcp_builtin
from sdk import gcp as sdk_gcp

SOURCE = "live:gcp-cloudbilling+compute"
COMPUTE_SERVICE = "services/6F81-5844-456A"
USAGE_MARKET = {
    "OnDemand": Market.ON_DEMAND,
    "Preemptible": Market.SPOT,
    "Commit1Yr": Market.RESERVED_1Y,
    "Commit3Yr": Market.RESERVED_3Y,
}
UNITS = {"CPU": "h", "RAM": "GiBy.h", "GPU": "h"}
# Billing's GPU names -> the accelerator spellings of _GCP_BUILTIN (attachables: canonical names).
SKU_GPUS = {
    "nvidia tesla a100": "A100",
    "nvidia a100 80gb": "A100-80GB",
    "nvidia h100 80gb": "H100",
    "nvidia h100 80gb mega": "H100-MEGA",
    "nvidia h100 80gb plus": "H100-MEGA",
    "nvidia h200 141gb": "H200",
    "nvidia b200": "B200",
    "nvidia l4": "L4",
    "nvidia tesla t4": "T4",
    "nvidia tesla v100": "V100",
    "nvidia tesla p4": "P4",
    "nvidia tesla p100": "P100",
}
FAMILY_OVERRIDES = {"a3-megagpu": "A3PLUS", "a3-ultragpu": "A3ULTRA"}  # billing names, not prefixes
_CORE_RAM = re.compile(r"(?:(?P<family>[\w-]+?) )?(?:Predefined )?(?:Instance )?(?P<kind>Core|Cpu|Ram)")

PriceKey = tuple[str, str, str, str]  # usage type, kind (CPU/RAM/GPU), family or GPU, region
_Pool = tuple[str, str, str, int, Market]  # region, machine type, GPU, count, market


@dataclass(frozen=True, slots=True)
class UnitPrice:
    amount: Decimal
    currency: str


def _sdk() -> sdk_gcp.Gcp:
    return sdk_gcp.load("the GCP price source", billing=True)


# -- parsing (pure) ---------------------------------------------------------------------
def sku_key(description: str) -> tuple[str, str] | None:
    """(kind, family or GPU spelling) of a Compute Engine SKU description, or None."""
    text = description.strip().removeprefix("Commitment v1: ")
    text = re.sub(r"^(?:Spot )?Preemptible ", "", text).replace(" attached to Spot Preemptible VMs", "")
    text = re.sub(r"\s+(?:running\s+)?in\s+[A-Z].*$", "", text)
    if text.endswith(" GPU"):
        gpu = SKU_GPUS.get(text.removesuffix(" GPU").lower())
        return ("GPU", gpu) if gpu else None
    match = _CORE_RAM.fullmatch(text)
    if not match:
        return None
    kind = "RAM" if match["kind"] == "Ram" else "CPU"
    return kind, (match["family"] or "N1").upper()


def money(units: int | str, nanos: int) -> Decimal:
    return Decimal(units) + Decimal(nanos).scaleb(-9)


def unit_prices(skus: Iterable[Any], skipped: Counter[str]) -> dict[PriceKey, UnitPrice]:
    """Unit prices by (usage type, kind, family or GPU, region) from billing SKU messages."""
    out: dict[PriceKey, UnitPrice] = {}
    for sku in skus:
        usage = sku.category.usage_type
        key = sku_key(sku.description) if usage in USAGE_MARKET else None
        if key is None or sku.category.resource_family != "Compute":
            continue
        if not sku.pricing_info:
            skipped["SKU without pricing info"] += 1
            continue
        expression = sku.pricing_info[-1].pricing_expression
        if expression.usage_unit != UNITS[key[0]] or not expression.tiered_rates:
            skipped["SKU with an unexpected unit"] += 1
            continue
        rate = min(expression.tiered_rates, key=lambda r: r.start_usage_amount).unit_price
        price = UnitPrice(money(rate.units, rate.nanos), rate.currency_code or "USD")
        for region in sku.service_regions:
            k = (usage, key[0], key[1], region)
            if k not in out or price.amount < out[k].amount:
                out[k] = price
    return out


def family(machine_type: str) -> str:
    for prefix, name in FAMILY_OVERRIDES.items():
        if machine_type.startswith(prefix + "-"):
            return name
    return machine_type.split("-", 1)[0].upper()


def machine_filter() -> str:
    """A Compute API filter for the GPU machine families and the n1 hosts of attachable GPUs."""
    prefixes = sorted({pattern.split("-", 1)[0] for pattern, *_ in _GCP_BUILTIN})
    names = [f"{p}-.*" for p in prefixes] + sorted(GCP_N1_HOST.values())
    return f'name eq "({"|".join(names)})"'


# -- the source ---------------------------------------------------------------------------
class GcpPriceSource:
    cloud = Cloud.GCP
    name = SOURCE

    def __init__(
        self,
        project: str | None = None,
        credentials: Any = None,
        *,
        billing_endpoint: str | None = None,
        compute_endpoint: str | None = None,
        retry_initial: float = 1.0,
        retry_timeout: float = 120.0,
        timeout: float | None = None,  # per request; None: the network policy's (sdk/net.py)
    ) -> None:
        self.project = project
        self.credentials = credentials
        self.billing_endpoint = billing_endpoint
        self.compute_endpoint = compute_endpoint
        self.retry_initial = retry_initial
        self.retry_timeout = retry_timeout
        self.timeout = timeout
        self._clients: tuple[Any, Any, Any, str] | None = None
        self._lock = threading.Lock()

    def clients(self, sdk: sdk_gcp.Gcp) -> tuple[Any, Any, Any, str]:
        """(billing, accelerator types, machine types, project), made once per source."""
        with self._lock:
            if self._clients is None:
                creds, project = self.credentials, self.project or os.environ.get("GOOGLE_CLOUD_PROJECT")
                if creds is None:
                    creds, found = sdk.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
                    project = project or found
                if not project:
                    raise ConfigError(
                        "no GCP project for the Compute Engine machine-type lookups",
                        hint="set GOOGLE_CLOUD_PROJECT, or pass project= to GcpPriceSource",
                    )
                options = sdk.options.ClientOptions
                billing = sdk.billing.CloudCatalogClient(
                    credentials=creds,
                    transport="rest",
                    client_options=options(api_endpoint=self.billing_endpoint) if self.billing_endpoint else None,
                )
                compute = options(api_endpoint=self.compute_endpoint) if self.compute_endpoint else None
                self._clients = (
                    billing,
                    sdk.compute.AcceleratorTypesClient(credentials=creds, client_options=compute),
                    sdk.compute.MachineTypesClient(credentials=creds, client_options=compute),
                    project,
                )
            return self._clients

    def fetch(self, gpus: Collection[str] | None = None, ctx: FetchContext | None = None) -> FetchResult:
        ctx = ctx or FetchContext(self.cloud, self.name)
        sdk = _sdk()
        try:
            return _GcpFetch(self, sdk, ctx, gpus).run()
        except sdk.auth.exceptions.DefaultCredentialsError as exc:
            raise SourceError(
                self.name, "no GCP credentials found", hint="run 'gcloud auth application-default login'"
            ) from exc
        except sdk.errors.GoogleAPICallError as exc:
            raise SourceError(self.name, f"a GCP API call failed: {exc}") from exc
        except sdk.json_format.ParseError as exc:
            raise MalformedResponseError(self.name, f"a GCP API page is malformed: {exc}") from exc
        except GpuprovError:
            raise
        except Exception as exc:  # the network (refused, DNS, proxy, TLS, hung), a token refresh that failed
            raise SourceError(self.name, sdk_gcp.translated(exc, "a GCP API call").message) from exc


class _GcpFetch:
    def __init__(self, src: GcpPriceSource, sdk: sdk_gcp.Gcp, ctx: FetchContext, gpus: Collection[str] | None) -> None:
        self.src, self.sdk, self.ctx = src, sdk, ctx
        self.gpus = set(gpus) if gpus is not None else None
        self.skipped: Counter[str] = Counter()
        retry, errors = sdk.retry, sdk.errors
        throttled = retry.if_exception_type(
            errors.TooManyRequests,
            errors.ServiceUnavailable,
            errors.InternalServerError,
            errors.BadGateway,
            errors.GatewayTimeout,
        )
        # throttling until retry_timeout; a failed connection as the network policy says (sdk/gcp.py)
        self.retry = sdk_gcp.retry(throttled, src.retry_timeout, src.retry_initial)
        self.timeout = src.timeout or sdk_gcp.timeout()

    # -- leaf requests -----------------------------------------------------------------
    def _skus(self, client: Any) -> list[Any]:
        request = self.sdk.billing.ListSkusRequest(parent=COMPUTE_SERVICE, currency_code="USD")
        out: list[Any] = []
        for page in client.list_skus(
            request=request, retry=self.retry, timeout=self.src.timeout or sdk_gcp.timeout()
        ).pages:
            self.ctx.request_done("list_skus")
            out.extend(page.skus)
            self.ctx.check()
        return out

    def _accelerators(self, client: Any, project: str) -> dict[str, dict[str, int]]:
        request = self.sdk.compute.AggregatedListAcceleratorTypesRequest(project=project)
        zones: dict[str, dict[str, int]] = {}
        for page in client.aggregated_list(
            request=request, retry=self.retry, timeout=self.src.timeout or sdk_gcp.timeout()
        ).pages:
            self.ctx.request_done("acceleratorTypes.aggregatedList")
            for scope, scoped in page.items.items():
                for accel in scoped.accelerator_types:
                    zones.setdefault(scope.removeprefix("zones/"), {})[accel.name] = int(
                        accel.maximum_cards_per_instance
                    )
            self.ctx.check()
        return zones

    def _machines(self, client: Any, project: str, zone: str) -> list[Any]:
        request = self.sdk.compute.ListMachineTypesRequest(project=project, zone=zone, filter=machine_filter())
        out: list[Any] = []
        for page in client.list(request=request, retry=self.retry, timeout=self.timeout).pages:
            self.ctx.request_done("machineTypes.list")
            out.extend(page.items)
            self.ctx.check()
        return out

    # -- orchestration -----------------------------------------------------------------
    def run(self) -> FetchResult:
        ctx = self.ctx
        billing, accel_client, machine_client, project = self.src.clients(self.sdk)
        ctx.expect(2)
        f_skus = ctx.submit(self._skus, billing)
        [accels] = ctx.gather([ctx.submit(self._accelerators, accel_client, project)])
        zones = sorted(z for z, names in accels.items() if names and self._wanted(names))
        ctx.expect(len(zones))
        machines = ctx.gather([ctx.submit(self._machines, machine_client, project, z) for z in zones])
        [skus] = ctx.gather([f_skus])
        prices = unit_prices(skus, self.skipped)
        offers: list[Offer] = []
        reserved_seen: set[_Pool] = set()
        for zone, items in zip(zones, machines, strict=True):
            offers += self._zone_offers(zone, items, accels[zone], prices, reserved_seen)
        return FetchResult(offers=offers, skipped=self.skipped, requests=ctx.requests)

    def _wanted(self, accelerators: Collection[str]) -> bool:
        """Whether a zone with these accelerator types can have offers of the GPUs asked for."""
        if self.gpus is None:
            return True
        for name in accelerators:
            try:
                if gpu_names.canonical(name) in self.gpus:
                    return True
            except UnknownGpuError:
                continue
        return False

    def _zone_offers(
        self,
        zone: str,
        machines: list[Any],
        accels: Mapping[str, int],
        prices: Mapping[PriceKey, UnitPrice],
        reserved_seen: set[_Pool],
    ) -> list[Offer]:
        region = zone.rsplit("-", 1)[0]
        hosts = {m.name: m for m in machines}
        shapes: list[tuple[Any, str, int, str | None]] = []
        for machine in machines:
            builtin = _gcp_builtin(machine.name)
            if builtin is not None:
                shapes.append((machine, builtin[0], builtin[1], builtin[2]))
        for accel_name, max_cards in sorted(accels.items()):
            try:
                attached = gpu_names.canonical(accel_name)
            except UnknownGpuError:
                continue
            if attached in _GCP_ATTACHABLE:
                shapes += [
                    (hosts[h], attached, n, None)
                    for n, h in sorted(GCP_N1_HOST.items())
                    if n <= max_cards and h in hosts
                ]
        out: list[Offer] = []
        for machine, accel, count, interconnect in shapes:
            gpu = gpu_names.canonical(accel)
            if self.gpus is not None and gpu not in self.gpus:
                continue
            for usage, market in USAGE_MARKET.items():
                if not gcp_machines.sold_in(machine.name, market):  # a3-highgpu-1g/2g/4g: spot only
                    continue
                if market.is_reserved:  # regional: once per region, not once per zone
                    pool = (region, machine.name, gpu, count, market)
                    if pool in reserved_seen:
                        continue
                    reserved_seen.add(pool)
                price = self._price(usage, machine, accel, count, region, prices)
                if price is None:
                    continue
                out.append(
                    Offer(
                        cloud=Cloud.GCP,
                        region=region,
                        zone=None if market.is_reserved else zone,
                        instance_type=machine.name,
                        gpu=gpu,
                        gpus_per_instance=count,
                        gpu_memory_gib=gpu_names.memory_gib(gpu),
                        vcpus=int(machine.guest_cpus),
                        memory_gib=Decimal(int(machine.memory_mb)) / 1024,
                        market=market,
                        hourly_usd=price.amount,
                        interconnect=interconnect,
                        currency=price.currency,
                    )
                )
        return out

    def _price(
        self, usage: str, machine: Any, accel: str, count: int, region: str, prices: Mapping[PriceKey, UnitPrice]
    ) -> UnitPrice | None:
        fam = family(machine.name)
        parts = [
            (prices.get((usage, "CPU", fam, region)), Decimal(int(machine.guest_cpus)), f"{fam} core"),
            (prices.get((usage, "RAM", fam, region)), Decimal(int(machine.memory_mb)) / 1024, f"{fam} RAM"),
            (prices.get((usage, "GPU", accel, region)), Decimal(count), f"{accel} GPU"),
        ]
        total, currency = Decimal(0), "USD"
        for unit, quantity, what in parts:
            if unit is None:
                self.skipped[f"no {usage} SKU for {what}"] += 1
                return None
            total += unit.amount * quantity
            if unit.currency != "USD":
                currency = unit.currency
        return UnitPrice(total, currency)
