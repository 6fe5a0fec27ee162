"""AWS Savings Plans rates, live: the share off on-demand each kind of plan gives an instance family.

``savingsplans.DescribeSavingsPlansOfferingRates`` (boto3 client ``savingsplans``, imported
lazily; the API is global, asked in us-east-1; paged by ``nextToken``), filtered to:
savingsPlanTypes Compute and EC2Instance, payment option **No Upfront** (the discount of a plan
whose commitment is paid hour by hour, which is what a plan's $/h is), products EC2,
serviceCodes AmazonEC2, operation RunInstances (Linux), and the filters region, tenancy
``shared``, productDescription ``Linux/UNIX`` and instanceType (the catalog's AWS GPU types in
that region). A result is kept when its unit is ``Hrs`` (a rate per instance-hour) and its
usageType carries the instance type (``USE1-BoxUsage:p4d.24xlarge``).

Each rate becomes a discount ``1 − rate / on-demand`` (on-demand from the catalog) per
``(kind_term, instance type, region)``, e.g. ``compute_1y``; a family's discount for planning is
the smallest over its types and regions refreshed (the conservative one, since the config's
table is per family only). No rates are bundled: until ``gpuprov commitments rates refresh``
stores some, the config's ``savings_plans`` discounts apply; afterwards a refreshed
(kind_term, family) takes precedence over the config's and the config fills the rest (``merge``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpuprov.errors import CredentialsError, PricingError
from gpuprov.models import Offer
from sdk import aws as sdk_aws

HOME_REGION = "us-east-1"
PLAN_KINDS = {"Compute": "compute", "EC2Instance": "ec2_instance"}
TERMS = {31_536_000: "1y", 94_608_000: "3y"}
PAYMENT_OPTION = "No Upfront"
MAX_PAGES = 1000


@dataclass(frozen=True)
class Rate:
    kind: str  # compute_1y, compute_3y, ec2_instance_1y, ec2_instance_3y
    region: str
    instance_type: str
    rate: Decimal  # USD per instance-hour under the plan
    on_demand: Decimal  # USD per instance-hour, the catalog's

    @property
    def family(self) -> str:
        return self.instance_type.split(".", 1)[0]

    @property
    def discount(self) -> Decimal:
        return 1 - self.rate / self.on_demand

    def row(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "region": self.region,
            "instance_type": self.instance_type,
            "rate": format(self.rate, "f"),
            "on_demand": format(self.on_demand, "f"),
        }


def on_demand(offers: Iterable[Offer], region: str) -> dict[str, Decimal]:
    """Instance type → the catalog's AWS on-demand price in ``region`` (lowest over zones)."""
    out: dict[str, Decimal] = {}
    for o in offers:
        if o.cloud.value == "aws" and o.market.value == "on_demand" and o.region == region:
            out[o.instance_type] = min(out.get(o.instance_type, o.hourly_usd), o.hourly_usd)
    return out


def parse(
    results: Iterable[Mapping[str, Any]], prices: Mapping[str, Decimal], region: str
) -> tuple[list[Rate], list[str]]:
    """Rates from ``searchResults`` entries; notes on the entries that cannot be used."""
    rates: dict[tuple[str, str], Rate] = {}
    notes: list[str] = []
    for r in results:
        offering = r.get("savingsPlanOffering") or {}
        kind = PLAN_KINDS.get(str(offering.get("planType")))
        term = TERMS.get(offering.get("durationSeconds"))  # type: ignore[arg-type]
        props = {str(p.get("name")): str(p.get("value")) for p in r.get("properties") or () if isinstance(p, Mapping)}
        itype = props.get("instanceType", "")
        if kind is None or term is None or offering.get("paymentOption") != PAYMENT_OPTION:
            continue
        if r.get("unit") != "Hrs" or r.get("operation") != "RunInstances" or r.get("productType") != "EC2":
            continue
        if props.get("region", region) != region or props.get("tenancy", "shared") != "shared":
            continue
        if not itype or itype not in str(r.get("usageType", "")):
            continue
        price = prices.get(itype)
        if price is None or price <= 0:
            continue
        from gpuprov import numbers

        try:
            rate = numbers.parse(r.get("rate"), "price row")
        except numbers.NumberError:
            rate = Decimal("NaN")
        if not rate.is_finite() or rate <= 0 or rate >= price:
            notes.append(f"{kind}_{term} {itype} in {region}: rate {str(r.get('rate'))[:20]!r} is no discount")
            continue
        found = Rate(f"{kind}_{term}", region, itype, rate, price)
        key = (found.kind, itype)
        if key not in rates or found.rate > rates[key].rate:  # two offerings: keep the dearer rate
            rates[key] = found
    return sorted(rates.values(), key=lambda x: (x.kind, x.instance_type)), notes


def fetch(region: str, offers: Sequence[Offer], session: Any = None) -> tuple[list[Rate], list[str]]:
    """The live rates for the catalog's AWS GPU types in ``region``."""
    prices = on_demand(offers, region)
    if not prices:
        raise PricingError(f"the catalog has no AWS on-demand price in {region[:40]}", hint="gpuprov pricing refresh")
    aws = sdk_aws.load("Savings Plans rates")
    bexc = aws.exceptions
    client = sdk_aws.client(session or aws.boto3.session.Session(), "savingsplans", HOME_REGION)
    request: dict[str, Any] = {
        "savingsPlanPaymentOptions": [PAYMENT_OPTION],
        "savingsPlanTypes": sorted(PLAN_KINDS),
        "products": ["EC2"],
        "serviceCodes": ["AmazonEC2"],
        "operations": ["RunInstances"],
        "filters": [
            {"name": "region", "values": [region]},
            {"name": "tenancy", "values": ["shared"]},
            {"name": "productDescription", "values": ["Linux/UNIX"]},
            {"name": "instanceType", "values": sorted(prices)},
        ],
        "maxResults": 1000,
    }
    results: list[Mapping[str, Any]] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        try:
            answer = client.describe_savings_plans_offering_rates(**request, **({"nextToken": token} if token else {}))
        except bexc.NoCredentialsError:
            raise CredentialsError("no AWS credentials found", hint="configure a profile or environment") from None
        except bexc.ClientError as exc:
            code = sdk_aws.code_of(exc)
            if sdk_aws.kind(exc) is sdk_aws.ErrorKind.AUTH:
                raise CredentialsError(f"AWS refused DescribeSavingsPlansOfferingRates: {code}") from None
            raise PricingError(f"AWS DescribeSavingsPlansOfferingRates failed: {code}") from None
        except Exception as exc:  # the network, or an answer botocore cannot read: one line
            raise PricingError(sdk_aws.translated(exc, "DescribeSavingsPlansOfferingRates", client).message) from None
        results += answer.get("searchResults", [])
        token = answer.get("nextToken")
        if not token:
            break
    else:
        raise PricingError("AWS DescribeSavingsPlansOfferingRates: nextToken never ends")
    return parse(results, prices, region)


def discounts(rates: Iterable[Rate]) -> dict[str, dict[str, Decimal]]:
    """(kind_term → family → share off on-demand): the smallest over a family's types and regions."""
    out: dict[str, dict[str, Decimal]] = {}
    for r in rates:
        table = out.setdefault(r.kind, {})
        table[r.family] = min(table.get(r.family, r.discount), r.discount)
    return out


def merge(
    configured: Mapping[str, Mapping[str, Decimal]], refreshed: Mapping[str, Mapping[str, Decimal]]
) -> dict[str, dict[str, Decimal]]:
    """The config's table with every refreshed (kind_term, family) taking precedence."""
    out = {kind: dict(table) for kind, table in configured.items()}
    for kind, table in refreshed.items():
        out.setdefault(kind, {}).update(table)
    return out


def from_rows(rows: Iterable[Mapping[str, str]]) -> list[Rate]:
    """Rates back from the store's rows (see gpuprov/store/savings_plans.py)."""
    return [Rate(r["kind"], r["region"], r["instance_type"], Decimal(r["rate"]), Decimal(r["on_demand"])) for r in rows]
