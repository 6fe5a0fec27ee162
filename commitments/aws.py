"""The AWS commitments an account holds: reserved instances, capacity reservations, Savings Plans.

boto3 is imported lazily (inside ``discover``), never when the CLI starts.

- Reserved instances: EC2 ``DescribeReservedInstances`` (state ``active``) in every region asked.
  Effective hourly = FixedPrice / (Duration in hours) + UsagePrice + the ``Hourly`` recurring
  charges. A zonal RI (``Scope = Availability Zone``) gets its zone as an AZ id (``use1-az1``),
  the way gpuprov's catalog names AWS zones: ``AvailabilityZoneId`` where EC2 returns it, else
  the zone name mapped with ``DescribeAvailabilityZones``.
- Capacity reservations: ``DescribeCapacityReservations`` (state ``active``); count =
  ``TotalInstanceCount``; hourly = the on-demand price of that type in that region from the
  catalog offers given (Linux, shared tenancy: what the catalog prices); without one it is
  skipped with a note. One with no ``EndDate`` (``EndDateType = unlimited``) is paid until
  cancelled: it is recorded as ending ``OPEN_ENDED_HOURS`` (a year) after discovery, which holds
  it through any plan horizon; the next discovery moves that end forward.
- Savings Plans: ``savingsplans.DescribeSavingsPlans`` (state ``active``), a global API.
  ``Compute`` plans cover any family and region; ``EC2Instance`` ones ``ec2InstanceFamily`` in
  ``region``; other types (SageMaker, Database) are not EC2 and are skipped with a note.
  ``commitment`` (USD an hour, a string) is the record's ``usd_per_hour``; the term comes from
  ``termDurationInSeconds``. Their rates are not part of the record: ``gpuprov commitments
  rates refresh`` (pricing/savings_plans.py) or the config's ``savings_plans`` give them.

Ids are the cloud's own, prefixed: ``aws:reserved_instance:<ReservedInstancesId>``,
``aws:capacity_reservation:<cr-…>``, ``aws:savings_plan:<savingsPlanId>``. A record that does
not pass the records module's checks (commitments/records.py) is skipped with a note naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from commitments.records import Commitment, Kind, Known, from_cloud
from gpuprov.errors import CredentialsError, ProvisioningError, TransientError, UnreachableError
from gpuprov.models import Offer
from sdk import aws as sdk_aws

HOME_REGION = "us-east-1"  # where DescribeRegions and the (global) Savings Plans API are asked
OPEN_ENDED_HOURS = 8760
SECONDS_PER_HOUR = 3600
TERM_SECONDS = {31_536_000: "1y", 94_608_000: "3y"}
SP_KINDS = {"Compute", "EC2Instance"}

Note = str


class _Calls:
    """Clients per (service, region), and AWS failures as gpuprov's errors (one line each)."""

    def __init__(self, session: Any) -> None:
        aws = sdk_aws.load("AWS discovery")
        self.exc = aws.exceptions
        self.session = session or aws.boto3.session.Session()
        self.config = sdk_aws.config()
        self.clients: dict[tuple[str, str], Any] = {}

    def client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self.clients:
            self.clients[key] = sdk_aws.client(self.session, service, region, self.config)
        return self.clients[key]

    def __call__(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        exc = self.exc
        try:
            return fn(**kwargs)
        except exc.NoCredentialsError:
            raise CredentialsError(
                "no AWS credentials found", hint="configure a profile, environment variables or an instance role"
            ) from None
        except exc.ClientError as err:
            code = sdk_aws.code_of(err)
            found = sdk_aws.kind(err)
            if found is sdk_aws.ErrorKind.AUTH:
                raise CredentialsError(f"AWS refused {what}: {code}", hint="the identity needs read access") from None
            if found is sdk_aws.ErrorKind.TRANSIENT:
                raise TransientError(f"AWS {what} kept failing after retries: {code}") from None
            raise ProvisioningError(f"AWS {what} failed: {code}") from None
        except Exception as err:  # the network, or an answer botocore cannot read: one line
            raise sdk_aws.translated(err, what, getattr(fn, "__self__", None)) from None


def _money(value: Any) -> Decimal | None:
    from gpuprov import numbers

    try:  # an amount AWS answered, through the one bounded parser
        return numbers.parse(value, "price row")
    except numbers.NumberError:
        return None


def _time(value: Any) -> Any:
    """Times as the records module reads them (an aware datetime, or text it will check)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return value


def ri_hourly(ri: Mapping[str, Any]) -> Decimal | None:
    """The effective price of one instance-hour: the upfront fee spread over the term, plus the
    usage price and the hourly recurring charges; None where a figure is missing or absurd."""
    fixed, usage, duration = _money(ri.get("FixedPrice")), _money(ri.get("UsagePrice")), ri.get("Duration")
    if fixed is None or usage is None or not isinstance(duration, int) or isinstance(duration, bool):
        return None
    if duration <= 0:
        return None
    recurring = Decimal(0)
    for charge in ri.get("RecurringCharges") or ():
        if not isinstance(charge, Mapping) or charge.get("Frequency") != "Hourly":
            continue
        amount = _money(charge.get("Amount"))
        if amount is None:
            return None
        recurring += amount
    return fixed * SECONDS_PER_HOUR / duration + usage + recurring


def on_demand_prices(offers: Iterable[Offer]) -> dict[tuple[str, str], Decimal]:
    """(region, instance type) → the AWS on-demand price (the lowest over its zones)."""
    out: dict[tuple[str, str], Decimal] = {}
    for o in offers:
        if o.cloud.value == "aws" and o.market.value == "on_demand":
            key = (o.region, o.instance_type)
            out[key] = min(out.get(key, o.hourly_usd), o.hourly_usd)
    return out


def _label(raw: Mapping[str, Any]) -> str:
    return str(raw.get("id", "?"))[:160]


def _keep(raw: Mapping[str, Any], known: Known | None, out: list[Commitment], notes: list[Note]) -> None:
    checked = from_cloud(raw, "aws", known)
    if isinstance(checked, str):
        notes.append(f"aws: skipped {_label(raw)}: {checked}")
    else:
        out.append(checked)


def discover(
    regions: Sequence[str] = (),
    offers: Sequence[Offer] = (),
    now: datetime | None = None,
    session: Any = None,
    known: Known | None = None,
) -> tuple[list[Commitment], list[Note]]:
    """The account's active reserved instances, capacity reservations and Savings Plans.

    A region that fails is a note (the others are still asked); missing or refused credentials
    fail the whole cloud (``CredentialsError``), since every region would say the same."""
    when = now or datetime.now(UTC)
    call = _Calls(session)
    asked = sorted(set(regions))
    if not asked:
        answer = call("DescribeRegions", call.client("ec2", HOME_REGION).describe_regions)
        asked = sorted(str(r["RegionName"]) for r in answer.get("Regions", []) if r.get("RegionName"))
    prices = on_demand_prices(offers)
    out: list[Commitment] = []
    notes: list[Note] = []
    for region in asked:
        try:
            _region(call, region, prices, when, known, out, notes)
        except (CredentialsError, UnreachableError):
            raise  # every region would say the same: the cloud was not asked
        except ProvisioningError as exc:
            notes.append(f"aws {region}: {exc.message}")
    _savings_plans(call, known, out, notes)
    return out, notes


def _region(
    call: _Calls,
    region: str,
    prices: Mapping[tuple[str, str], Decimal],
    when: datetime,
    known: Known | None,
    out: list[Commitment],
    notes: list[Note],
) -> None:
    ec2 = call.client("ec2", region)
    zone_ids: dict[str, str] | None = None

    def zone_id(name: str) -> str | None:
        nonlocal zone_ids
        if zone_ids is None:
            answer = call("DescribeAvailabilityZones", ec2.describe_availability_zones)
            zone_ids = {
                str(z["ZoneName"]): str(z["ZoneId"])
                for z in answer.get("AvailabilityZones", [])
                if z.get("ZoneName") and z.get("ZoneId")
            }
        return zone_ids.get(name)

    active = [{"Name": "state", "Values": ["active"]}]
    answer = call("DescribeReservedInstances", ec2.describe_reserved_instances, Filters=active)
    for ri in answer.get("ReservedInstances", []):
        if ri.get("State") != "active":
            continue
        rid = f"aws:reserved_instance:{ri.get('ReservedInstancesId')}"
        hourly = ri_hourly(ri)
        if hourly is None:
            notes.append(f"aws: skipped {rid[:160]}: no usable FixedPrice, UsagePrice, Duration or hourly charges")
            continue
        if ri.get("CurrencyCode", "USD") != "USD":
            notes.append(f"aws: skipped {rid[:160]}: priced in {str(ri.get('CurrencyCode'))[:8]}, not USD")
            continue
        zone = None
        if ri.get("Scope") == "Availability Zone":
            zone = ri.get("AvailabilityZoneId") or zone_id(str(ri.get("AvailabilityZone")))
            if zone is None:
                notes.append(f"aws: skipped {rid[:160]}: zone {str(ri.get('AvailabilityZone'))[:40]!r} not in {region}")
                continue
        duration = ri.get("Duration")
        raw = {
            "id": rid,
            "cloud": "aws",
            "kind": Kind.RESERVED_INSTANCE.value,
            "instance_type": ri.get("InstanceType"),
            "region": region,
            "zone": zone,
            "count": ri.get("InstanceCount"),
            "hourly_usd": format(hourly, "f"),
            "term": TERM_SECONDS.get(duration) if isinstance(duration, int) else None,
            "starts": _time(ri.get("Start")),
            "ends": _time(ri.get("End")),
        }
        _keep(raw, known, out, notes)

    pages = call(
        "DescribeCapacityReservations",
        lambda: list(ec2.get_paginator("describe_capacity_reservations").paginate(Filters=active)),
    )
    for page in pages:
        for cr in page.get("CapacityReservations", []):
            if cr.get("State") != "active":
                continue
            rid = f"aws:capacity_reservation:{cr.get('CapacityReservationId')}"
            itype = cr.get("InstanceType")
            price = prices.get((region, str(itype)))
            if price is None:
                notes.append(
                    f"aws: skipped {rid[:160]}: no on-demand price of {str(itype)[:40]} in {region} in the catalog"
                )
                continue
            zone = cr.get("AvailabilityZoneId")
            if not zone and cr.get("AvailabilityZone"):
                zone = zone_id(str(cr["AvailabilityZone"]))
            ends = cr.get("EndDate") or when + timedelta(hours=OPEN_ENDED_HOURS)
            raw = {
                "id": rid,
                "cloud": "aws",
                "kind": Kind.CAPACITY_RESERVATION.value,
                "instance_type": itype,
                "region": region,
                "zone": zone,
                "count": cr.get("TotalInstanceCount"),
                "hourly_usd": format(price, "f"),
                "starts": _time(cr.get("StartDate") or cr.get("CreateDate")),
                "ends": _time(ends),
            }
            _keep(raw, known, out, notes)


def _savings_plans(call: _Calls, known: Known | None, out: list[Commitment], notes: list[Note]) -> None:
    sp = call.client("savingsplans", HOME_REGION)
    token: str | None = None
    seen: set[str] = set()
    while True:
        kwargs: dict[str, Any] = {"states": ["active"]}
        if token:
            kwargs["nextToken"] = token
        answer = call("DescribeSavingsPlans", sp.describe_savings_plans, **kwargs)
        for plan in answer.get("savingsPlans", []):
            rid = f"aws:savings_plan:{plan.get('savingsPlanId')}"
            if plan.get("state") != "active":
                continue
            kind = plan.get("savingsPlanType")
            if kind not in SP_KINDS:
                notes.append(f"aws: skipped {rid[:160]}: a {str(kind)[:20]} Savings Plan covers no EC2 usage")
                continue
            if plan.get("currency", "USD") != "USD":
                notes.append(f"aws: skipped {rid[:160]}: committed in {str(plan.get('currency'))[:8]}, not USD")
                continue
            duration = plan.get("termDurationInSeconds")
            ec2_instance = kind == "EC2Instance"
            raw = {
                "id": rid,
                "cloud": "aws",
                "kind": Kind.SAVINGS_PLAN.value,
                "usd_per_hour": plan.get("commitment"),
                "family": plan.get("ec2InstanceFamily") if ec2_instance else None,
                "region": plan.get("region") if ec2_instance else None,
                "term": TERM_SECONDS.get(duration) if isinstance(duration, int) else None,
                "starts": plan.get("start"),
                "ends": plan.get("end"),
            }
            if ec2_instance and not (raw["family"] and raw["region"]):
                notes.append(f"aws: skipped {rid[:160]}: an EC2 Instance Savings Plan without family or region")
                continue
            _keep(raw, known, out, notes)
        token = answer.get("nextToken")
        if not token or token in seen:
            return
        seen.add(token)
