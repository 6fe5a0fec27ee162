"""What a plan asks you to buy before its reserved instances bill at the reserved rate.

A plan's reservations are recommendations: until a matching commitment is bought, the instances
that use them are ordinary on-demand instances and are billed so. ``to_buy`` compares a plan's
reservations with the commitments held now (the inventory: ``gpuprov commitments import`` /
``discover``) and returns what is missing, each with the purchase that buys it:

- AWS: a Standard Reserved Instance, No Upfront, Linux/UNIX, of the plan's term, regional (the
  bundle's reserved rates are regional): ``DescribeReservedInstancesOfferings`` finds the
  offering, ``PurchaseReservedInstancesOffering`` buys it.
- GCP: a resource-based regional commitment (``regionCommitments.insert``) of the machine
  family's commitment type for the vCPUs, memory and GPUs of those instances.
- Azure: a reservation order (Microsoft.Capacity ``reservationOrders`` Purchase) of the VM size
  in its region, shared scope, billed monthly.

A held commitment counts where it covers the reservation's type and place, less what the plan
already uses of it for its on-demand allocations (the plan's ``commitments.held``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from commitments.records import Commitment
from gpuprov.plandoc import PlanDocument, Reservation
from gpuprov.vocabulary import accelerator_type, commitment_type

KIND = {"aws": "reserved_instance", "gcp": "committed_use", "azure": "reservation"}
# per instance type: (vCPUs, memory GiB), for a GCP commitment's resources; None where unknown
Shape = Callable[[str, str], tuple[int, Decimal] | None]


@dataclass(frozen=True)
class ToBuy:
    reservation: Reservation
    missing: int  # of its instances, how many no held commitment covers now
    purchase: str  # the call that buys them, one line

    @property
    def kind(self) -> str:
        return KIND[self.reservation.cloud]

    @property
    def hourly_usd(self) -> Decimal:
        """What the missing part costs every hour of its term once bought."""
        return self.reservation.unit_hourly_usd * self.missing

    @property
    def liability_usd(self) -> Decimal:
        """What buying it commits to: unit × instances × term hours."""
        return (self.reservation.unit_hourly_usd * self.missing * self.reservation.term_hours).quantize(Decimal("0.01"))

    @property
    def on_demand_hourly_usd(self) -> Decimal | None:
        """What those instances bill an hour while it is not bought."""
        unit = self.reservation.on_demand_unit_hourly_usd
        return None if unit is None else unit * self.missing


def _counted(held: Sequence[Commitment], doc: PlanDocument, now: datetime) -> dict[str, int]:
    """Per held counted commitment active now, the instances the plan leaves free of it."""
    used = {h.id: max((int(v) for v in h.used_by_slot), default=0) for h in doc.commitments.held if h.count}
    return {c.id: (c.count or 0) - used.get(c.id, 0) for c in held if c.kind.counted and c.active(now)}


def to_buy(doc: PlanDocument, held: Sequence[Commitment], now: datetime, shape: Shape | None = None) -> list[ToBuy]:
    """The plan's reservations no held commitment covers now (see the module docstring)."""
    free = _counted(held, doc, now)
    by_id = {c.id: c for c in held}
    out = []
    for r in sorted(doc.reservations, key=lambda r: (r.cloud, r.location, r.instance_type, r.market)):
        need = r.instances
        for cid in sorted(free, key=lambda i: (by_id[i].zone is None, i)):  # zonal ones first
            if need == 0:
                break
            if free[cid] > 0 and by_id[cid].covers(r.cloud, r.region, r.zone, r.instance_type):
                take = min(need, free[cid])
                free[cid] -= take
                need -= take
        if need:
            out.append(ToBuy(r, need, purchase(r, need, shape)))
    return out


def _years(r: Reservation) -> int:
    return r.term_hours // 8760


def purchase(r: Reservation, count: int, shape: Shape | None = None) -> str:
    """The cloud call that buys ``count`` of a reservation's instances, as one line."""
    years = _years(r)
    if r.cloud == "aws":
        seconds = 94_608_000 if years == 3 else 31_536_000
        return (
            f"aws ec2 describe-reserved-instances-offerings --region {r.region} --instance-type {r.instance_type} "
            f'--offering-class standard --offering-type "No Upfront" --product-description Linux/UNIX '
            f"--min-duration {seconds} --max-duration {seconds}; then aws ec2 purchase-reserved-instances-offering "
            f"--region {r.region} --reserved-instances-offering-id <the offering's id> --instance-count {count}"
        )
    if r.cloud == "gcp":
        kind = commitment_type(r.instance_type) or "<the machine family's commitment type>"
        accel = accelerator_type(r.instance_type, r.gpu) or "<accelerator>"
        sized = shape(r.instance_type, r.region) if shape is not None else None
        resources = (
            f"--resources=vcpu={sized[0] * count},memory={(sized[1] * count).normalize():f}GB "
            if sized is not None
            else "--resources=vcpu=<vCPUs>,memory=<memory> "
        )
        return (
            f"gcloud compute commitments create gpuprov-{r.instance_type}-{count} --region={r.region} "
            f"--plan={12 * years}-month --type={kind.lower().replace('_', '-')} {resources}"
            f"--resources-accelerator=type={accel},count={r.gpus_per_instance * count}"
        )
    return (
        f"az reservations reservation-order purchase --reservation-order-id <a new order id> --sku {r.instance_type} "
        f"--location {r.region} --quantity {count} --term P{years}Y --billing-plan Monthly "
        f"--reserved-resource-type VirtualMachines --applied-scope-type Shared --billing-scope /subscriptions/<id> "
        f"--display-name gpuprov-{r.instance_type}"
    )
