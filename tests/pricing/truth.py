"""The price-truth rules, written apart from the build script (scripts/build_snapshot.py) and the
reader's rules (pricing/quality.py), so the suite in test_price_truth.py checks them rather than
repeats them. Each function returns failures as (rule, offer key, detail) rows.

Data read here comes straight from data/sources/ (the GCP price list, anycloud's zone lists, the
Cloud Billing SKU extract) and from the bundled snapshot.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpuprov.models import Market, Offer
from tests.conftest import ROOT

SRC = ROOT / "data" / "sources"
EXCEPTIONS = SRC / "PRICE-EXCEPTIONS.csv"
CENT = Decimal("0.01")
MONTH = Decimal(730)

# Commitment price over on-demand price, per term: the documented bounds. In the bundle GCP's
# resource-based committed-use prices for accelerator-optimized types are 0.62-0.69 of on demand
# for 1 year and 0.34-0.45 for 3 years, AWS 1-year standard no-upfront reservations 0.62-0.70
# (shared data PROVENANCE: GCP 1 year saves 29-38%, 3 years 54-66%). Bounds with room on both sides:
RATIO_BOUNDS = {
    Market.RESERVED_1Y: (Decimal("0.50"), Decimal("0.80")),
    Market.RESERVED_3Y: (Decimal("0.25"), Decimal("0.60")),
}
# Sizes of one family with the same vCPUs and memory per GPU are priced (nearly) linearly: list
# per-GPU prices within this share of each other (GCP a2-highgpu-1g..8g and a3-highgpu-* exactly;
# Azure NV36ads/NV72ads_A10_v5 2% apart). Spot is left out: each size is its own spot market.
LINEAR = Decimal("0.05")

GCP_FAMILIES = re.compile(r"(a2|a3|a4|g2)-")


@dataclass(frozen=True)
class Failure:
    rule: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    detail: str


def failure(rule: str, o: Offer, detail: str) -> Failure:
    return Failure(rule, o.cloud.value, o.region, o.zone or "", o.instance_type, o.market.value, detail)


# --- GCP: the list and the SKUs --------------------------------------------------------------------


def list_rows() -> dict[tuple[str, str], dict[str, str]]:
    """(machine type, region) -> the GCP price list's row (Cyclenerd pricing.yml, per region)."""
    with open(SRC / "gcp" / "cyclenerd-pricing-gpu-all-regions.csv", encoding="utf-8") as fh:
        return {(r["machine_type"], r["region"]): r for r in csv.DictReader(fh)}


# GCP bills these exactly as the listed type (same family SKUs, GPU SKU and quantities)
BILLED_AS = {"a3-edgegpu-8g": "a3-highgpu-8g"}
LIST_COLUMN = {
    Market.ON_DEMAND: "hour",
    Market.SPOT: "hour_spot",
    Market.RESERVED_1Y: "month_1y",
    Market.RESERVED_3Y: "month_3y",
}


def list_price(row: dict[str, str], market: Market) -> Decimal | None:
    text = row[LIST_COLUMN[market]]
    if not text:
        return None
    value = Decimal(text)
    return value / MONTH if market in (Market.RESERVED_1Y, Market.RESERVED_3Y) else value


def gcp_composition(offers: Iterable[Offer]) -> list[Failure]:
    """Every GCP a2/a3/a4/g2 offer against the list's price of its machine type (or of the type it
    is billed as) in its region and market, to the cent; an offer the list cannot price fails."""
    rows = list_rows()
    out = []
    for o in offers:
        if o.cloud.value != "gcp" or not GCP_FAMILIES.match(o.instance_type):
            continue
        row = rows.get((BILLED_AS.get(o.instance_type, o.instance_type), o.region))
        expected = None if row is None else list_price(row, o.market)
        if expected is None:
            out.append(failure("gcp-composition", o, "no list price for its type, region and market"))
        elif abs(o.hourly_usd - expected) >= CENT / 2:
            out.append(failure("gcp-composition", o, f"bundle {o.hourly_usd} != list {expected:.6f}"))
    return out


def sku_prices() -> dict[tuple[str, str, str], Decimal]:
    """(region, usage type, component) -> USD per unit from the Cloud Billing SKU extract.
    Components: a3.core, a3.ram, a3plus.core, a3plus.ram, gpu.h100, gpu.h100-mega."""
    skus = json.loads((SRC / "gcp" / "cloudbilling-skus-a3-h100.json").read_text(encoding="utf-8"))
    out: dict[tuple[str, str, str], Decimal] = {}
    for sku in skus:
        desc = sku["description"]
        plus = "Mega" in desc or "Plus" in desc
        if "GPU" in desc:
            part = "gpu.h100-mega" if plus else "gpu.h100"
        else:
            part = ("a3plus." if plus else "a3.") + ("ram" if "Ram" in desc else "core")
        rate = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][-1]["unitPrice"]
        price = Decimal(rate["units"]) + Decimal(rate["nanos"]) / Decimal(10**9)
        for region in sku["serviceRegions"]:
            out[(region, sku["category"]["usageType"], part)] = price
    return out


USAGE = {
    Market.ON_DEMAND: "OnDemand",
    Market.SPOT: "Preemptible",
    Market.RESERVED_1Y: "Commit1Yr",
    Market.RESERVED_3Y: "Commit3Yr",
}
# A3 High: per GPU 26 vCPUs, 234 GB and 2 x 375 GiB of bundled Local SSD (a3-highgpu-8g: 208, 1,872, 6,000 GiB)
A3_HIGH_PER_GPU = (26, 234, 750)


def a3_sku_residuals(offers: Iterable[Offer]) -> dict[tuple[str, str], set[Decimal]]:
    """For A3 High offers where the SKU extract prices the region: (region, market) -> the set of
    USD per GiB-month of bundled Local SSD left after the SKUs' cores, RAM and GPUs (rounded to
    1e-4). One value per key means every size and zone agrees with the SKUs plus one SSD rate."""
    skus = sku_prices()
    out: dict[tuple[str, str], set[Decimal]] = defaultdict(set)
    for o in offers:
        if o.cloud.value != "gcp" or not re.fullmatch(r"a3-(highgpu|edgegpu)-\dg", o.instance_type):
            continue
        usage = USAGE[o.market]
        try:
            core, ram, gpu = (skus[(o.region, usage, k)] for k in ("a3.core", "a3.ram", "gpu.h100"))
        except KeyError:
            continue
        n = o.gpus_per_instance
        vcpus, mem, ssd = (n * x for x in A3_HIGH_PER_GPU)
        rest = o.hourly_usd - (vcpus * core + mem * ram + n * gpu)
        out[(o.region, o.market.value)].add((rest * MONTH / ssd).quantize(Decimal("0.0001")))
    return out


# --- sanity rules over every offer -----------------------------------------------------------------


def family(o: Offer) -> str:
    name = o.instance_type
    if o.cloud.value == "aws":
        return name.split(".")[0]
    if o.cloud.value == "gcp":
        return name.rsplit("-", 1)[0]
    return re.sub(r"\d+", "", name.removeprefix("Standard_"), count=1)


def sanity(offers: Sequence[Offer]) -> list[Failure]:
    """spot < on demand; each commitment < on demand, 3 years < 1 year, and commitment / on demand
    within RATIO_BOUNDS; sizes of one family with the same shape per GPU priced linearly."""
    od_loc: dict[tuple[str, str, str], Decimal] = {}
    od_region: dict[tuple[str, str, str], Decimal] = {}
    r1: dict[tuple[str, str, str], Decimal] = {}
    for o in offers:
        key = (o.cloud.value, o.region, o.instance_type)
        if o.market is Market.ON_DEMAND:
            here = (o.cloud.value, o.location, o.instance_type)
            od_loc[here] = min(od_loc.get(here, o.hourly_usd), o.hourly_usd)
            od_region[key] = min(od_region.get(key, o.hourly_usd), o.hourly_usd)
        elif o.market is Market.RESERVED_1Y:
            r1[key] = o.hourly_usd
    out = []
    for o in offers:
        key = (o.cloud.value, o.region, o.instance_type)
        if o.market is Market.SPOT:
            ref = od_loc.get((o.cloud.value, o.location, o.instance_type)) or od_region.get(key)
            if ref is not None and o.hourly_usd >= ref:
                out.append(failure("spot-below-on-demand", o, f"spot {o.hourly_usd} >= on demand {ref}"))
        elif o.market in RATIO_BOUNDS:
            ref = od_region.get(key)
            if ref is None:
                continue  # no alternative: plans do not recommend it (planning.without_alternative)
            lo, hi = RATIO_BOUNDS[o.market]
            ratio = o.hourly_usd / ref
            if ratio >= 1:
                out.append(failure("commitment-below-on-demand", o, f"{o.hourly_usd} >= on demand {ref}"))
            elif not lo <= ratio <= hi:
                out.append(failure("commitment-ratio", o, f"{ratio:.3f} of on demand, outside [{lo}, {hi}]"))
            if o.market is Market.RESERVED_3Y and key in r1 and o.hourly_usd >= r1[key]:
                out.append(failure("3y-below-1y", o, f"{o.hourly_usd} >= 1 year {r1[key]}"))
    shapes: dict[tuple[object, ...], list[Offer]] = defaultdict(list)
    for o in offers:
        if o.gpu_fraction is None and o.gpus_per_instance > 0 and o.market is not Market.SPOT:
            per = (Decimal(o.vcpus) / o.gpus_per_instance, o.memory_gib / o.gpus_per_instance)
            shapes[(o.cloud.value, family(o), o.location, o.market.value, o.gpu, *per)].append(o)
    for group in shapes.values():
        if len({o.instance_type for o in group}) < 2:
            continue
        low = min(o.usd_per_gpu_hour for o in group)
        for o in group:
            if o.usd_per_gpu_hour > low * (1 + LINEAR):
                out.append(
                    failure("per-gpu-linear", o, f"{o.usd_per_gpu_hour:.4f}/GPU-h against {low:.4f} in its family")
                )
    return out


# --- the reviewed exceptions -----------------------------------------------------------------------


@dataclass(frozen=True)
class Exception_:
    rule: str
    cloud: str
    instance_type: str  # glob
    region: str  # glob
    market: str  # glob
    reason: str
    source: str

    def covers(self, f: Failure) -> bool:
        return (
            self.rule == f.rule
            and self.cloud == f.cloud
            and fnmatch.fnmatchcase(f.instance_type, self.instance_type)
            and fnmatch.fnmatchcase(f.region, self.region)
            and fnmatch.fnmatchcase(f.market, self.market)
        )


def exceptions() -> list[Exception_]:
    with open(EXCEPTIONS, encoding="utf-8") as fh:
        return [Exception_(**row) for row in csv.DictReader(fh)]
