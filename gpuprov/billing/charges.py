"""One FOCUS row read and checked (``RowParser``), and what of it gpuprov keeps (``Charge``).

Every FOCUS column a row carries is checked against its data type (``gpuprov.billing.focus``);
the first bad value is one ``UsageError`` naming the row, its line and the column. A null in a
column the spec says allows none is an error in the five columns gpuprov cannot do without
(``focus.CORE``) and a counted conformance note elsewhere (real exports have them: the sample
data's Oracle rows carry a null ContractedCost).

What is kept (``kind``):

``instance``    a charge of a GPU instance: a compute charge whose SKU, meter or description names
                an instance type of the price catalog or of a GPU family (AWS p*/g*, GCP a2/a3/g2…,
                Azure N-series), or any charge of a resource with gpuprov's tags;
``tagged``      another charge with gpuprov's tags (a disk, an address);
``commitment``  a row of a commitment discount (CommitmentDiscountId set): its purchase, its
                unused part, its use by other resources (commitment utilization needs them all);
``capacity``    a row of a capacity reservation (CapacityReservationId set).

Everything else is counted (rows, BilledCost, EffectiveCost, ListCost) and not stored.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from gpuprov import names
from gpuprov.billing import focus
from gpuprov.billing.focus import BadValue
from gpuprov.errors import UsageError

MAX_TEXT = 2048  # characters in one stored identifier
SEEN = 50_000  # values remembered by their text before the memo starts afresh (bounded memory)
OWNER_TAG, PLAN_TAG, WORKLOAD_TAG, MARKET_TAG = "gpuprov-owner", "gpuprov-plan", "gpuprov-workload", "gpuprov-market"
MARKETS = ("on_demand", "spot", "reserved_1y", "reserved_3y")
_WORKLOAD = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")

# instance types as they appear in SKU meters and descriptions
_AWS_TYPE = re.compile(r"\b([a-z][a-z0-9-]*[0-9][a-z0-9-]*\.[a-z0-9-]*(?:large|metal)[a-z0-9-]*)\b")
_GCP_TYPE = re.compile(r"\b([a-z][a-z0-9]*[0-9]-[a-z]+-[0-9]+g?(?:-[a-z]+)?)\b")
_AZURE_TYPE = re.compile(r"\b(standard_[a-z0-9_]+)\b", re.IGNORECASE)
# GPU families beyond the catalog's types: AWS P and G instances, GCP accelerator-optimized and G2,
# Azure N-series
GPU_FAMILY = {
    "aws": re.compile(r"^(?:p[2-9][a-z0-9-]*|g[3-9][a-z0-9]*|gr[0-9][a-z0-9]*)\."),
    "gcp": re.compile(r"^(?:a[2-9]|g[2-9])-"),
    "azure": re.compile(r"^standard_n[cdvg]", re.IGNORECASE),
}
# where an export names the instance type: FOCUS columns, then providers' x_ columns
TYPE_COLUMNS = ("SkuPriceDetails", "SkuMeter", "ChargeDescription")
X_TYPE_COLUMNS = ("x_UsageType", "x_SkuDetails", "x_SkuMeterName", "x_SkuMeterSubcategory", "x_SkuDescription")
# the text columns gpuprov keeps
TEXT_COLUMNS = (
    "ProviderName",
    "BillingAccountId",
    "SubAccountId",
    "BillingCurrency",
    "ResourceId",
    "ResourceType",
    "ServiceCategory",
    "SkuId",
    "RegionId",
    "AvailabilityZone",
    "PricingUnit",
    "ConsumedUnit",
    "CommitmentDiscountId",
    "CommitmentDiscountType",
    "CommitmentDiscountUnit",
    "CapacityReservationId",
)


def cloud_of(provider: str | None) -> str | None:
    """The cloud a ProviderName stands for (AWS, Microsoft, Google Cloud…), or None."""
    if not provider:
        return None
    p = provider.lower()
    if "aws" in p or "amazon" in p:
        return "aws"
    if "google" in p or "gcp" in p:
        return "gcp"
    if "microsoft" in p or "azure" in p:
        return "azure"
    return None


_CLOUDS: dict[str | None, str | None] = {}  # ProviderName -> cloud, as read


@dataclass(frozen=True, slots=True)
class Charge:
    """What gpuprov stores of one row. Money is Decimal, times aware UTC."""

    source_row: int  # the data row of the file it came from (1 = the first after the header)
    kind: str
    provider: str | None
    cloud: str | None
    billing_account_id: str | None
    sub_account_id: str | None
    billing_period_start: datetime | None
    charge_category: str
    charge_class: str | None
    charge_frequency: str | None
    pricing_category: str | None
    start: datetime
    end: datetime
    resource_id: str | None
    resource_type: str | None
    service_category: str | None
    sku_id: str | None
    region: str | None
    zone: str | None
    instance_type: str | None
    billed: Decimal
    effective: Decimal
    list_cost: Decimal | None
    contracted: Decimal | None
    pricing_quantity: Decimal | None
    pricing_unit: str | None
    consumed_quantity: Decimal | None
    consumed_unit: str | None
    commitment_id: str | None
    commitment_status: str | None
    commitment_type: str | None
    commitment_category: str | None
    commitment_quantity: Decimal | None
    commitment_unit: str | None
    capacity_reservation_id: str | None
    capacity_reservation_status: str | None
    owner: str | None
    plan_id: str | None
    workload: str | None
    market: str | None
    tag_problem: str | None = None


@dataclass(frozen=True, slots=True)
class Facts:
    """What every row adds to the import's totals, kept or not."""

    provider: str | None
    billing_account_id: str | None
    billing_period_start: datetime | None
    start: datetime
    end: datetime
    billed: Decimal
    effective: Decimal
    list_cost: Decimal | None


class Types:
    """GPU instance types by cloud (the catalog's), plus the GPU family rules."""

    def __init__(self, known: Mapping[str, Collection[str]]) -> None:
        self.known = {c: set(v) for c, v in known.items()}
        self.azure = {_squash(t): t for t in self.known.get("azure", ())}
        self.azure_lower = {t.lower(): t for t in self.known.get("azure", ())}

    def is_gpu(self, cloud: str, itype: str) -> bool:
        return itype in self.known.get(cloud, ()) or bool(GPU_FAMILY[cloud].match(itype))

    def find(self, cloud: str, texts: Sequence[str]) -> str | None:
        """The first GPU instance type named in these texts."""
        for text in texts:
            if cloud == "aws":
                hits = _AWS_TYPE.findall(text)
            elif cloud == "gcp":
                hits = _GCP_TYPE.findall(text)
            else:
                hits = [self.azure_lower.get(h.lower(), h) for h in _AZURE_TYPE.findall(text)]
                squashed = _squash(text)
                hits += [t for s, t in self.azure.items() if s in squashed]  # a meter: "NC24ads A100 v4"
            for h in hits:
                if self.is_gpu(cloud, h):
                    return str(h)
        return None


def _squash(text: str) -> str:
    t = text.lower()
    t = t[len("standard_") :] if t.startswith("standard_") else t
    return re.sub(r"[\s_]+", "", t)


def _text(value: Any) -> str | None:
    if focus.is_null(value):
        return None
    text = str(value).strip()
    if len(text) > MAX_TEXT:
        raise BadValue(f"longer than {MAX_TEXT:,} characters")
    return text


class RowParser:
    """Reads the rows of one file laid out as ``layout`` (``focus.detect``)."""

    def __init__(self, layout: focus.Layout, header: Sequence[str], where: str, types: Types) -> None:
        self.layout, self.where, self.types = layout, where, types
        spec = focus.columns(layout.version)
        ix = layout.index
        self.ix = ix
        self.decimals = [
            (n, i, spec[n].nullable or n not in focus.CORE, spec[n].nullable, spec[n].non_negative)
            for n, i in ix.items()
            if spec[n].data_type == "Decimal"
        ]
        self.times = [(n, i, spec[n].nullable) for n, i in ix.items() if spec[n].data_type == "Date/Time"]
        self.enums = [
            (n, i, spec[n].nullable, {v: v for v in focus.ENUMS[n]}) for n, i in ix.items() if n in focus.ENUMS
        ]
        self.jsons = [(n, i) for n, i in ix.items() if spec[n].data_type == "JSON"]
        self.texts = [(n, ix[n]) for n in TEXT_COLUMNS if n in ix]
        clean = [str(h).strip().lstrip("\ufeff") for h in header]
        self.text_ix = [ix[c] for c in TYPE_COLUMNS if c in ix] + [clean.index(c) for c in X_TYPE_COLUMNS if c in clean]
        self.notes: Counter[str] = Counter()  # conformance: "null in ContractedCost" -> rows
        # values already read, by their text: bills repeat them (an hour's start, a price, a tag set)
        self.seen_dec: dict[str, Decimal] = {}
        self.seen_time: dict[str, datetime] = {}
        self.seen_json: dict[str, dict[str, Any]] = {}

    def fail(self, row: int, line: int | None, column: str, why: str) -> UsageError:
        at = f"row {row}" + (f" (line {line})" if line is not None else "")
        return UsageError(f"{self.where}: {at}: {column}: {why}; nothing was stored")

    def _null(self, row: int, line: int | None, name: str, allowed: bool, spec_allows: bool) -> None:
        if not allowed:
            raise self.fail(row, line, name, "null, and FOCUS allows no null here")
        if not spec_allows:
            self.notes[f"null in {name}"] += 1

    def parse(self, row: int, line: int | None, values: Sequence[Any]) -> tuple[Facts, Charge | None]:
        """Check every FOCUS value of the row; what it adds to the totals, and what is kept of it.
        (The loops test the common case inline: this runs once per row of files of millions.)"""
        nulls = focus.NULLS
        if len(self.seen_dec) + len(self.seen_time) + len(self.seen_json) > SEEN:
            self.seen_dec, self.seen_time, self.seen_json = {}, {}, {}
        seen_dec, seen_time, seen_json = self.seen_dec, self.seen_time, self.seen_json
        dec: dict[str, Decimal | None] = {}
        for name, i, may_be_null, spec_nullable, non_negative in self.decimals:
            v = values[i]
            if v is None or (v.__class__ is str and (v in nulls or v.isspace())):
                self._null(row, line, name, may_be_null, spec_nullable)
                dec[name] = None
                continue
            d = seen_dec.get(v) if v.__class__ is str else None
            if d is None:
                try:
                    d = Decimal(v) if v.__class__ is str else focus.decimal(v)
                    if (
                        not d.is_finite()
                        or d.adjusted() >= focus.MAX_DIGITS
                        or (d and d.adjusted() < focus.MIN_ADJUSTED)
                        or (v.__class__ is str and not focus.PLAIN.fullmatch(v))
                        or len(d.as_tuple().digits) > focus.MAX_SIGNIFICANT
                    ):
                        d = focus.decimal(v)  # raises, saying why; or the value, checked at length
                    elif not d:
                        d = Decimal(0)  # 0E-999999999 is 0
                except (BadValue, InvalidOperation) as exc:
                    why = str(exc) if isinstance(exc, BadValue) else f"not a decimal: {names.show(str(v))}"
                    raise self.fail(row, line, name, why) from None
                if v.__class__ is str:
                    seen_dec[v] = d
            dec[name] = d
            if non_negative and d < 0:
                self.notes[f"a negative {name}"] += 1
        times: dict[str, datetime | None] = {}
        for name, i, nullable in self.times:
            v = values[i]
            if v is None or (v.__class__ is str and (v in nulls or v.isspace())):
                self._null(row, line, name, name not in focus.CORE, nullable)
                times[name] = None
                continue
            t = seen_time.get(v) if v.__class__ is str else None
            if t is None:
                try:
                    t = focus.when(v)
                except BadValue as exc:
                    raise self.fail(row, line, name, str(exc)) from None
                if v.__class__ is str:
                    seen_time[v] = t
            times[name] = t
        enums: dict[str, str | None] = {}
        for name, i, nullable, lookup in self.enums:
            v = values[i]
            if v is None or (v.__class__ is str and (v in nulls or v.isspace())):
                self._null(row, line, name, name not in focus.CORE, nullable)
                enums[name] = None
                continue
            found = lookup.get(v)
            if found is None:
                try:
                    found = focus.enum(name, v)
                except BadValue as exc:
                    raise self.fail(row, line, name, str(exc)) from None
            enums[name] = found
        objects: dict[str, dict[str, Any] | None] = {}
        for name, i in self.jsons:
            v = values[i]
            if v is None or (v.__class__ is str and (v in nulls or v.isspace())):
                objects[name] = None
                continue
            o = seen_json.get(v) if v.__class__ is str else None
            if o is None:
                try:
                    o = focus.key_values(v)
                except BadValue as exc:
                    raise self.fail(row, line, name, str(exc)) from None
                if v.__class__ is str:
                    seen_json[v] = o
            objects[name] = o
        start, end = times["ChargePeriodStart"], times["ChargePeriodEnd"]
        assert start is not None and end is not None  # CORE: checked above
        if end < start:
            raise self.fail(row, line, "ChargePeriodEnd", "before ChargePeriodStart")
        text: dict[str, str | None] = {}
        for name, i in self.texts:
            v = values[i]
            if v is None or (v.__class__ is str and (v in nulls or v.isspace())):
                text[name] = None
            elif v.__class__ is str and len(v) <= MAX_TEXT and not v[0].isspace() and not v[-1].isspace():
                text[name] = v
            else:
                try:
                    text[name] = _text(v)
                except BadValue as exc:
                    raise self.fail(row, line, name, str(exc)) from None
        billed, effective = dec["BilledCost"], dec["EffectiveCost"]
        assert billed is not None and effective is not None
        currency = text.get("BillingCurrency")
        if currency is not None and currency.upper() != "USD":
            raise self.fail(row, line, "BillingCurrency", f"{names.show(currency)}: gpuprov reads bills in USD")
        provider = text.get("ProviderName")
        facts = Facts(
            provider=provider,
            billing_account_id=text.get("BillingAccountId"),
            billing_period_start=times.get("BillingPeriodStart"),
            start=start,
            end=end,
            billed=billed,
            effective=effective,
            list_cost=dec.get("ListCost"),
        )
        cloud = _CLOUDS.get(provider) if provider in _CLOUDS else _CLOUDS.setdefault(provider, cloud_of(provider))
        tags = objects.get("Tags") or {}
        if tags and any("gpuprov" in k for k in tags if isinstance(k, str)):
            owner, plan_id, workload, market, problem = _gpuprov_tags(tags)
        else:
            owner = plan_id = workload = market = problem = None
        tagged = problem is not None or owner is not None
        category = enums["ChargeCategory"] or ""
        itype = None
        if cloud is not None and category not in ("Purchase", "Tax"):
            service = text.get("ServiceCategory")
            if service in (None, "Compute") or tagged:
                texts = [str(values[i]) for i in self.text_ix if not focus.is_null(values[i])]
                details = objects.get("SkuPriceDetails")
                if details:
                    texts = [str(v) for v in details.values()] + texts
                itype = self.types.find(cloud, texts)
        cid = text.get("CommitmentDiscountId")
        crid = text.get("CapacityReservationId")
        idle = enums.get("CommitmentDiscountStatus") == "Unused" or category == "Purchase"
        if cid is not None and idle:
            kind = "commitment"  # a purchase or an unused part, whatever instance type it names
        elif itype is not None or (tagged and category not in ("Purchase", "Tax")):
            kind = "instance" if itype is not None else "tagged"
        elif cid is not None:
            kind = "commitment"
        elif crid is not None:
            kind = "capacity"
        elif tagged:
            kind = "tagged"
        else:
            return facts, None
        charge = Charge(
            source_row=row,
            kind=kind,
            provider=provider,
            cloud=cloud,
            billing_account_id=facts.billing_account_id,
            sub_account_id=text.get("SubAccountId"),
            billing_period_start=facts.billing_period_start,
            charge_category=category,
            charge_class=enums.get("ChargeClass"),
            charge_frequency=enums.get("ChargeFrequency"),
            pricing_category=enums.get("PricingCategory"),
            start=start,
            end=end,
            resource_id=text.get("ResourceId"),
            resource_type=text.get("ResourceType"),
            service_category=text.get("ServiceCategory"),
            sku_id=text.get("SkuId"),
            region=text.get("RegionId"),
            zone=text.get("AvailabilityZone"),
            instance_type=itype,
            billed=billed,
            effective=effective,
            list_cost=dec.get("ListCost"),
            contracted=dec.get("ContractedCost"),
            pricing_quantity=dec.get("PricingQuantity"),
            pricing_unit=text.get("PricingUnit"),
            consumed_quantity=dec.get("ConsumedQuantity"),
            consumed_unit=text.get("ConsumedUnit"),
            commitment_id=cid,
            commitment_status=enums.get("CommitmentDiscountStatus"),
            commitment_type=text.get("CommitmentDiscountType"),
            commitment_category=enums.get("CommitmentDiscountCategory"),
            commitment_quantity=dec.get("CommitmentDiscountQuantity"),
            commitment_unit=text.get("CommitmentDiscountUnit"),
            capacity_reservation_id=crid,
            capacity_reservation_status=enums.get("CapacityReservationStatus"),
            owner=owner,
            plan_id=plan_id,
            workload=workload,
            market=market,
            tag_problem=problem,
        )
        return facts, charge


def _tag(tags: Mapping[str, Any], key: str) -> Any:
    """A gpuprov tag by its key, or by the key under a provider's prefix (``user:gpuprov-owner``)."""
    if key in tags:
        return tags[key]
    for k, v in tags.items():
        if isinstance(k, str) and (k.endswith(":" + key) or k.endswith("/" + key)):
            return v
    return None


def _gpuprov_tags(tags: Mapping[str, Any]) -> tuple[str | None, str | None, str | None, str | None, str | None]:
    """(owner, plan, workload, market, problem) from a row's tags: data, never trusted."""
    raw = {k: _tag(tags, k) for k in (OWNER_TAG, PLAN_TAG, WORKLOAD_TAG, MARKET_TAG)}
    if all(v is None for v in raw.values()):
        return None, None, None, None, None
    bad = []

    def pick(key: str, ok: bool) -> str | None:
        value = raw[key]
        if value is None:
            return None
        if isinstance(value, str) and ok:
            return value
        bad.append(key)
        return None

    o, p, w, m = (raw[k] for k in (OWNER_TAG, PLAN_TAG, WORKLOAD_TAG, MARKET_TAG))
    owner = pick(OWNER_TAG, isinstance(o, str) and bool(names.OWNER.fullmatch(o)))
    plan = pick(PLAN_TAG, isinstance(p, str) and bool(names.PLAN_ID.fullmatch(p)))
    workload = pick(WORKLOAD_TAG, isinstance(w, str) and bool(_WORKLOAD.fullmatch(w)))
    market = pick(MARKET_TAG, m in MARKETS)
    return owner, plan, workload, market, (f"unreadable gpuprov tags: {', '.join(bad)}" if bad else None)
