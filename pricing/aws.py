"""AWS live prices: the Price List Query API for on-demand and reserved, EC2 for the rest.

Requests (all through boto3 clients with ``retries={"mode": "standard"}``; endpoints
follow botocore's own overrides, e.g. ``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_PRICING``,
``AWS_ENDPOINT_URL_EC2``; credentials come from boto3's standard chain):

* ``ec2.describe_regions`` once, unless the regions are given;
* concurrently: ``describe_instance_types`` for the p* and g* types, once, in the first
  region (GPU specs from ``GpuInfo``; specs do not vary by region), and per region
  ``describe_availability_zones`` (zone name -> zone id) and ``pricing.get_products`` (Linux,
  shared tenancy, no pre-installed software, capacity status Used, ``instanceFamily``
  "GPU instance", that ``regionCode``);
* then per region, concurrently: ``describe_instance_type_offerings`` by zone id and
  ``describe_spot_price_history`` (Linux/UNIX, the latest quote per zone) for the GPU types,
  and ``describe_instance_types`` for types priced there that the first region lacks.

Offers: on-demand per availability-zone id that offers the type; spot per zone id (zone
names from the spot history are mapped to ids, so live offers agree with the bundled
snapshot's ``use1-az1`` ids); reserved per region (zone None). Capacity Block SKUs
(``marketoption`` CapacityBlock, operation ``RunInstances:CB``, priced 0) are skipped.

Reserved: the Market has one value per term, so of the *standard* offering class the
no-upfront option is the market value where it exists; otherwise the option with the
cheapest effective hourly price, where effective hourly = upfront fee / term hours +
recurring hourly (1 year = 8,760 h, 3 years = 26,280 h). Convertible terms are ignored.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from gpuprov.errors import GpuprovError, UnknownGpuError
from gpuprov.models import Cloud, Market, Offer
from pricing import gpus as gpu_names
from pricing import interconnect
from pricing.base import FetchContext, FetchResult, MalformedResponseError, SourceError
from pricing.validate import MISSING, to_price
from sdk import aws as sdk_aws

SOURCE = "live:aws-pricelist+ec2"
PRICING_REGION = "us-east-1"  # the Price List Query API endpoint region
GPU_TYPE_PATTERNS = ("p*", "g*")  # instance-type wildcards that hold every NVIDIA/AMD GPU type
PRODUCT_FILTERS = (
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("instanceFamily", "GPU instance"),
)
SPOT_PRODUCT = "Linux/UNIX"
TERM_HOURS = {"1yr": Decimal(8760), "3yr": Decimal(26280)}
TERM_MARKET = {"1yr": Market.RESERVED_1Y, "3yr": Market.RESERVED_3Y}
QUANTUM = Decimal("1e-10")  # the Price List's own precision
_INSTANCE_TYPE = re.compile(r'"instanceType"\s*:\s*"([^"]+)"')

CAPACITY_BLOCK = "capacity block SKU"
NOT_RUN_INSTANCES = "not a plain RunInstances SKU"
NO_ZONE = "on-demand price but no zone offers the type"
UNKNOWN_ZONE = "spot quote in an unknown zone"


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    instance_type: str
    gpu: str
    gpus: int
    vcpus: int
    memory_gib: Decimal


@dataclass(frozen=True, slots=True)
class Price:
    amount: Decimal | None
    currency: str = "USD"


@dataclass
class ProductPrices:
    instance_type: str
    region: str
    on_demand: Price | None
    reserved: dict[Market, Price] = field(default_factory=dict)


def _sdk() -> tuple[Any, Any]:
    aws = sdk_aws.load("the AWS price source")
    return aws.boto3, aws.botocore


def _timestamp(fallback: Callable[[str], datetime], value: str) -> datetime:
    """ISO 8601 timestamps the fast way (botocore's default goes through dateutil), always aware."""
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return fallback(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# -- parsing (pure) ---------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _canonical(name: str) -> str | None:
    try:
        return gpu_names.canonical(name)
    except UnknownGpuError:
        return None


def gpu_spec(item: Mapping[str, Any]) -> InstanceSpec | str:
    """An InstanceSpec from one ``describe_instance_types`` item, or the reason it is none."""
    gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        return "no GPU"
    first = gpus[0]
    name, mib = str(first.get("Name", "")), int((first.get("MemoryInfo") or {}).get("SizeInMiB", 0))
    canonical = _canonical(name)
    if canonical is None:
        return f"unknown accelerator {name}"
    if mib and round(mib / 1024) != gpu_names.memory_gib(canonical):
        # p4de reports "A100" with 80 GiB: the memory tells the variant
        canonical = _canonical(f"{name}-{round(mib / 1024)}GB") or canonical
    count = sum(int(g.get("Count", 0)) for g in gpus)
    memory = Decimal(int(item["MemoryInfo"]["SizeInMiB"])) / 1024
    return InstanceSpec(
        instance_type=item["InstanceType"],
        gpu=canonical,
        gpus=count,
        vcpus=int(item["VCpuInfo"]["DefaultVCpus"]),
        memory_gib=memory,
    )


def _money(dimension: Mapping[str, Any]) -> Price:
    per_unit = dimension.get("pricePerUnit") or {}
    if "USD" in per_unit:
        return Price(to_price(per_unit["USD"]))
    for currency, value in per_unit.items():
        return Price(to_price(value), str(currency))
    return Price(None)


def _on_demand(terms: Mapping[str, Any]) -> Price | None:
    for term in terms.values():
        for dim in (term.get("priceDimensions") or {}).values():
            if dim.get("unit") == "Hrs":
                return _money(dim)
    return None


def _effective(term: Mapping[str, Any], hours: Decimal) -> Price:
    upfront, hourly, currency = Decimal(0), Decimal(0), "USD"
    for dim in (term.get("priceDimensions") or {}).values():
        price = _money(dim)
        if price.amount is None:
            return Price(None)
        currency = price.currency
        if dim.get("unit") == "Quantity":
            upfront += price.amount
        elif dim.get("unit") == "Hrs":
            hourly += price.amount
    total = upfront / hours + hourly
    return Price(total.quantize(QUANTUM) if total.is_finite() else total, currency)


def choose_reserved(terms: Mapping[str, Any]) -> dict[Market, Price]:
    """The market value of each reserved term: standard no-upfront, else the cheapest standard option."""
    options: dict[str, list[tuple[str, Price]]] = {}
    for term in terms.values():
        attrs = term.get("termAttributes") or {}
        lease = attrs.get("LeaseContractLength")
        if attrs.get("OfferingClass") != "standard" or lease not in TERM_HOURS:
            continue
        options.setdefault(lease, []).append(
            (str(attrs.get("PurchaseOption", "")), _effective(term, TERM_HOURS[lease]))
        )
    chosen: dict[Market, Price] = {}
    for lease, opts in options.items():
        no_upfront = [p for option, p in opts if option == "No Upfront"]
        if no_upfront:
            chosen[TERM_MARKET[lease]] = no_upfront[0]
            continue
        finite = [p for _, p in opts if p.amount is not None and p.amount.is_finite()]
        chosen[TERM_MARKET[lease]] = min(finite, key=lambda p: p.amount or 0) if finite else opts[0][1]
    return chosen


def parse_product(text: str, source: str = SOURCE) -> ProductPrices | str:
    """One ``PriceList`` entry (a JSON string) as prices, or the reason it is skipped."""
    try:
        record = json.loads(text, parse_float=Decimal)
        attrs = record["product"]["attributes"]
        terms = record.get("terms") or {}
        if not isinstance(attrs, dict) or not isinstance(terms, dict):
            raise TypeError("attributes and terms must be objects")
    except (ValueError, KeyError, TypeError) as exc:
        raise MalformedResponseError(source, f"a GetProducts PriceList entry is malformed: {exc}") from None
    operation = str(attrs.get("operation", "RunInstances"))
    if attrs.get("marketoption") == "CapacityBlock" or operation.endswith(":CB"):
        return CAPACITY_BLOCK
    if operation != "RunInstances":
        return NOT_RUN_INSTANCES
    return ProductPrices(
        instance_type=str(attrs.get("instanceType", "")),
        region=str(attrs.get("regionCode", "")),
        on_demand=_on_demand(terms.get("OnDemand") or {}),
        reserved=choose_reserved(terms.get("Reserved") or {}),
    )


def _instance_type(text: str) -> str:
    """The instanceType of a PriceList entry, without parsing all of it (malformed: "")."""
    found = _INSTANCE_TYPE.search(text)
    return found.group(1) if found else ""


def latest_spot(history: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """The latest spot price per (zone name, instance type), as the wire's text."""
    latest: dict[tuple[str, str], tuple[datetime, str]] = {}
    for item in history:
        key = (str(item["AvailabilityZone"]), str(item["InstanceType"]))
        stamp = item["Timestamp"]
        if key not in latest or stamp > latest[key][0]:
            latest[key] = (stamp, str(item["SpotPrice"]))
    return {key: price for key, (_, price) in latest.items()}


# -- the source ---------------------------------------------------------------------------
class AwsPriceSource:
    """AWS prices for the given regions (None: every region ``describe_regions`` lists)."""

    cloud = Cloud.AWS
    name = SOURCE

    def __init__(
        self,
        regions: Sequence[str] | None = None,
        session: Any = None,
        *,
        max_attempts: int = 8,
        connect_timeout: float | None = None,  # None: the network policy's (sdk/net.py)
        read_timeout: float | None = None,
        pool_connections: int = 32,
    ) -> None:
        self.regions = list(regions) if regions else None
        self.session = session
        self.max_attempts = max_attempts
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.pool_connections = pool_connections
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def client(self, boto3: Any, botocore: Any, service: str, region: str) -> Any:
        """A client per service and region, made once per source (clients are thread-safe; sessions not)."""
        with self._lock:
            if self.session is None:
                core = botocore.session.get_session()
                core.get_component("response_parser_factory").set_parser_defaults(
                    timestamp_parser=functools.partial(_timestamp, botocore.utils.parse_timestamp)
                )
                self.session = boto3.Session(botocore_session=core)
            key = (service, region)
            if key not in self._clients:
                config = sdk_aws.config(
                    max_attempts=self.max_attempts,
                    connect_timeout=self.connect_timeout,
                    read_timeout=self.read_timeout,
                    max_pool_connections=self.pool_connections,
                )
                self._clients[key] = sdk_aws.client(self.session, service, region, config)
            return self._clients[key]

    def fetch(self, gpus: Collection[str] | None = None, ctx: FetchContext | None = None) -> FetchResult:
        ctx = ctx or FetchContext(self.cloud, self.name)
        boto3, botocore = _sdk()
        errors = botocore.exceptions
        try:
            return _AwsFetch(self, boto3, botocore, ctx, gpus).run()
        except errors.NoCredentialsError as exc:
            raise SourceError(
                self.name,
                "no AWS credentials found",
                hint="configure them the boto3 way (AWS_PROFILE, aws configure, instance role)",
            ) from exc
        except errors.ClientError as exc:
            raise SourceError(self.name, f"an AWS API call failed: {exc}") from exc
        except GpuprovError:
            raise
        except Exception as exc:  # the network (refused, DNS, proxy, TLS, hung) or an answer not understood
            raise SourceError(self.name, sdk_aws.translated(exc, "an AWS API call").message) from exc


class _AwsFetch:
    def __init__(
        self, src: AwsPriceSource, boto3: Any, botocore: Any, ctx: FetchContext, gpus: Collection[str] | None
    ) -> None:
        self.src, self.ctx, self.gpus = src, ctx, set(gpus) if gpus is not None else None
        self.boto3, self.botocore = boto3, botocore
        self.skipped: Counter[str] = Counter()

    def _client(self, service: str, region: str) -> Any:
        return self.src.client(self.boto3, self.botocore, service, region)

    def _pages(self, client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
        out: list[Any] = []
        for page in client.get_paginator(operation).paginate(**kwargs):
            self.ctx.request_done(operation)
            out.extend(page.get(key, []))
            self.ctx.check()
        return out

    # -- leaf requests (run in the pool) ------------------------------------------------
    def _types(self, ec2: Any, names: list[str] | None = None) -> list[dict[str, Any]]:
        if names:
            return self._pages(ec2, "describe_instance_types", "InstanceTypes", InstanceTypes=names)
        return self._pages(
            ec2,
            "describe_instance_types",
            "InstanceTypes",
            Filters=[{"Name": "instance-type", "Values": list(GPU_TYPE_PATTERNS)}],
        )

    def _zone_ids(self, ec2: Any) -> dict[str, str]:
        zones = ec2.describe_availability_zones(AllAvailabilityZones=True)["AvailabilityZones"]
        self.ctx.request_done("describe_availability_zones")
        return {z["ZoneName"]: z["ZoneId"] for z in zones}

    def _products(self, pricing: Any, region: str) -> list[str]:
        filters = [
            {"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (*PRODUCT_FILTERS, ("regionCode", region))
        ]
        return self._pages(
            pricing,
            "get_products",
            "PriceList",
            ServiceCode="AmazonEC2",
            Filters=filters,
            FormatVersion="aws_v1",
            PaginationConfig={"PageSize": 100},
        )

    def _offerings(self, ec2: Any, types: list[str]) -> dict[str, list[str]]:
        items = self._pages(
            ec2,
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone-id",
            Filters=[{"Name": "instance-type", "Values": types}],
        )
        zones: dict[str, list[str]] = {}
        for item in items:
            zones.setdefault(item["InstanceType"], []).append(item["Location"])
        return zones

    def _spot(self, ec2: Any, types: list[str]) -> dict[tuple[str, str], str]:
        return latest_spot(
            self._pages(
                ec2,
                "describe_spot_price_history",
                "SpotPriceHistory",
                InstanceTypes=types,
                ProductDescriptions=[SPOT_PRODUCT],
                StartTime=datetime.now(UTC),
            )
        )

    # -- orchestration (the source's own thread) -----------------------------------------
    def run(self) -> FetchResult:
        ctx = self.ctx
        if self.src.regions:
            regions = self.src.regions
        else:
            ctx.expect(1)
            listed = self._client("ec2", PRICING_REGION).describe_regions()["Regions"]
            ctx.request_done("describe_regions")
            regions = sorted(r["RegionName"] for r in listed)
        ec2 = {r: self._client("ec2", r) for r in regions}
        pricing = self._client("pricing", PRICING_REGION)
        # round 1: GPU specs once (they do not vary by region); per region zone ids and prices
        ctx.expect(1 + 2 * len(regions))
        f_types = ctx.submit(self._types, ec2[regions[0]])
        f_zones = [ctx.submit(self._zone_ids, ec2[r]) for r in regions]
        f_products = [ctx.submit(self._products, pricing, r) for r in regions]
        [described] = ctx.gather([f_types])
        known = {item["InstanceType"] for item in described}
        specs = self._specs(described)
        zone_ids = dict(zip(regions, ctx.gather(f_zones), strict=True))
        products = dict(zip(regions, ctx.gather(f_products), strict=True))
        # round 2, per region: offerings and spot quotes of the GPU types, and the specs of
        # types priced there that the first region does not know
        priced = {r: {_instance_type(text) for text in products[r]} - {""} for r in regions}
        unknown = {r: sorted(priced[r] - known) for r in regions}
        wanted = {r: sorted(t for t in priced[r] | set(specs) if t in specs or t in unknown[r]) for r in regions}
        ctx.expect(sum(1 for r in regions if unknown[r]) + 2 * len(regions))
        f_more = [ctx.submit(self._types, ec2[r], unknown[r][:100]) for r in regions if unknown[r]]
        f_offers = [ctx.submit(self._offerings, ec2[r], wanted[r]) for r in regions]
        f_spot = [ctx.submit(self._spot, ec2[r], wanted[r]) for r in regions]
        for items in ctx.gather(f_more):
            specs.update(self._specs(items))
        offerings = dict(zip(regions, ctx.gather(f_offers), strict=True))
        spots = dict(zip(regions, ctx.gather(f_spot), strict=True))
        offers: list[Offer] = []
        for r in regions:
            offers += self._region_offers(r, specs, products[r], offerings[r], zone_ids[r], spots[r])
        return FetchResult(offers=offers, skipped=self.skipped, requests=ctx.requests)

    def _specs(self, items: list[dict[str, Any]]) -> dict[str, InstanceSpec]:
        specs: dict[str, InstanceSpec] = {}
        for item in items:
            spec = gpu_spec(item)
            if isinstance(spec, str):
                if spec != "no GPU" and self.gpus is None:  # out of scope when filtering
                    self.skipped[spec] += 1
            elif self.gpus is None or spec.gpu in self.gpus:
                specs[spec.instance_type] = spec
        return specs

    def _offer(self, spec: InstanceSpec, region: str, zone: str | None, market: Market, price: Price) -> Offer | None:
        if price.amount is None:
            self.skipped[MISSING] += 1
            return None
        return Offer(
            cloud=Cloud.AWS,
            region=region,
            zone=zone,
            instance_type=spec.instance_type,
            gpu=spec.gpu,
            gpus_per_instance=spec.gpus,
            gpu_memory_gib=gpu_names.memory_gib(spec.gpu),
            vcpus=spec.vcpus,
            memory_gib=spec.memory_gib,
            market=market,
            hourly_usd=price.amount,
            currency=price.currency,
            interconnect=interconnect.of("aws", spec.instance_type),
        )

    def _region_offers(
        self,
        region: str,
        specs: Mapping[str, InstanceSpec],
        products: list[str],
        offerings: Mapping[str, list[str]],
        zone_ids: Mapping[str, str],
        spots: Mapping[tuple[str, str], str],
    ) -> list[Offer]:
        out: list[Offer | None] = []
        seen: set[str] = set()
        for text in products:
            prices = parse_product(text, self.src.name)
            if isinstance(prices, str):
                self.skipped[prices] += 1
                continue
            spec = specs.get(prices.instance_type)
            if spec is None or prices.region != region or prices.instance_type in seen:
                continue
            seen.add(prices.instance_type)
            zones = sorted(offerings.get(spec.instance_type, []))
            if prices.on_demand is not None:
                if not zones:
                    self.skipped[NO_ZONE] += 1
                out += [self._offer(spec, region, z, Market.ON_DEMAND, prices.on_demand) for z in zones]
            out += [self._offer(spec, region, None, m, p) for m, p in sorted(prices.reserved.items())]
        for (zone_name, itype), text in sorted(spots.items()):
            spec = specs.get(itype)
            if spec is None:
                continue
            zone_id = zone_ids.get(zone_name)
            if zone_id is None:
                self.skipped[UNKNOWN_ZONE] += 1
                continue
            out.append(self._offer(spec, region, zone_id, Market.SPOT, Price(to_price(text))))
        return [o for o in out if o is not None]
