"""The scaling-group view of a plan document (``gpuprov.plandoc``), for the renderers.

Pure: no I/O. ``read_plan`` takes the validated, typed document (never raw JSON) and raises
``PlanFormatError`` (a ``ValueError``) only where the layout cannot be expressed in Terraform.

Scaling groups: allocations are grouped per (cloud, region, zone, workload). A reserved
allocation (workload "reserved") is a billing discount, not capacity of its own: it joins the
group in the same cloud and region (and zone, when both have one) that runs its instance type,
else one whose workload's node size matches its GPUs per instance (first by workload name);
a reservation nothing matches becomes a group of its own, so that the paid-for capacity runs.
Reserved capacity arrives per workload (``PlanDocument.placements``): the instances of a
reservation each workload uses, in whole instances.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from gpuprov.bootstrap import Bootstrap
from gpuprov.plandoc import Allocation, PlanDocument, WorkloadSpec
from terraform.names import ident

HOURS_PER_MONTH = Decimal(730)
CLOUDS = ("aws", "gcp", "azure")
CYCLE_HOURS = {"constant": 24, "day": 24, "week": 168}
DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class PlanFormatError(ValueError):
    """The plan document is not in the saved-plan format."""


@dataclass(frozen=True)
class Window:
    """A turn of the schedule: from ``start_slot`` (inclusive) to ``end_slot``, wrapping around."""

    name: str
    start_slot: int
    end_slot: int

    @property
    def ident(self) -> str:
        return ident(self.name)


@dataclass(frozen=True)
class Template:
    """What one launch template / instance template / scale set runs: a type in one market kind."""

    instance_type: str
    spot: bool
    gpus_per_instance: int
    allocations: tuple[Allocation, ...]

    def by_slot(self, slots: int) -> tuple[int, ...]:
        return tuple(sum(a.instances_by_slot[t] for a in self.allocations) for t in range(slots))

    @property
    def reserved_instances(self) -> int:
        return sum(a.instances for a in self.allocations if a.reserved)

    @property
    def market_tag(self) -> str:
        return "spot" if self.spot else "od"


@dataclass(frozen=True)
class Group:
    """One scaling group: a workload's capacity in one cloud location."""

    cloud: str
    region: str
    zone: str | None
    workload: str
    gang: bool
    allocations: tuple[Allocation, ...]

    @property
    def location(self) -> str:
        return self.zone or self.region

    @property
    def label(self) -> str:
        """The Terraform resource name of the group, e.g. ``training_use1_az4``."""
        return ident(f"{self.workload}_{self.location}")

    def capacity_by_slot(self, slots: int) -> tuple[int, ...]:
        return tuple(sum(a.instances_by_slot[t] for a in self.allocations) for t in range(slots))

    def templates(self) -> tuple[Template, ...]:
        """Distinct (instance type, spot or not): reserved capacity runs as on-demand."""
        keys = sorted(
            {(a.instance_type, a.spot) for a in self.allocations}, key=lambda k: (k[1], k[0])
        )  # on-demand first, then spot; by type
        out = []
        for itype, spot in keys:
            allocs = tuple(a for a in self.allocations if (a.instance_type, a.spot) == (itype, spot))
            out.append(Template(itype, spot, allocs[0].gpus_per_instance, allocs))
        return tuple(out)

    @property
    def instance_types(self) -> tuple[str, ...]:
        """Instance types in priority order: reserved ones first (so that on-demand capacity lands
        on the reservation), then other on-demand types, then spot-only types; cheaper first."""

        def rank(itype: str) -> tuple[int, Decimal, str]:
            mine = [a for a in self.allocations if a.instance_type == itype]
            kind = 0 if any(a.reserved for a in mine) else 1 if any(not a.spot for a in mine) else 2
            return kind, min(a.unit_hourly_usd for a in mine), itype

        return tuple(sorted({a.instance_type for a in self.allocations}, key=rank))

    @property
    def reserved(self) -> tuple[Allocation, ...]:
        return tuple(a for a in self.allocations if a.reserved)


@dataclass(frozen=True)
class PlanDoc:
    plan_id: str
    gpu: str
    policy: str
    timezone: str
    slot_origin: str
    horizon_hours: int
    windows: tuple[Window, ...]
    workloads: Mapping[str, WorkloadSpec]
    monthly_cost_usd: Decimal
    hourly_cost_usd: Decimal
    allocations: tuple[Allocation, ...]
    capacity_reservation: bool = False
    bootstrap: Bootstrap = field(default_factory=Bootstrap)  # the config's, for the templates' user data

    def user_data(self, cloud: str, workload: str, markets: Sequence[str]) -> str | None:
        """The config's bootstrap text for one template (None: none configured for the cloud). With
        ``bootstrap.kubelet`` the node labels need the template's market: a template several markets
        share (an AWS launch template in a mixed instances policy) gets none (see the README)."""
        kinds = {"spot" if m == "spot" else "on-demand" for m in markets}
        market = kinds.pop() if len(kinds) == 1 else None
        return self.bootstrap.user_data(cloud, workload, market, self.plan_id)

    @property
    def clouds(self) -> tuple[str, ...]:
        present = {a.cloud for a in self.allocations}
        return tuple(c for c in CLOUDS if c in present)

    @property
    def cycle_hours(self) -> int:
        return CYCLE_HOURS[self.slot_origin]

    def allocations_in(self, cloud: str) -> tuple[Allocation, ...]:
        return tuple(a for a in self.allocations if a.cloud == cloud)

    def reserved_in(self, cloud: str) -> tuple[Allocation, ...]:
        return tuple(a for a in self.allocations_in(cloud) if a.reserved)

    def monthly_cost_in(self, cloud: str) -> Decimal:
        """Expected monthly cost of one cloud's allocations: 730 × the mean hourly cost over slots."""
        total = sum((a.unit_hourly_usd * sum(a.instances_by_slot) for a in self.allocations_in(cloud)), Decimal(0))
        return (total / self.horizon_hours * HOURS_PER_MONTH).quantize(Decimal("0.01"))

    def is_gang(self, workload: str) -> bool:
        spec = self.workloads.get(workload)
        return spec is not None and spec.gang

    def groups(self, cloud: str) -> tuple[Group, ...]:
        return group_allocations(self, cloud)

    def schedule_windows(self) -> tuple[Window, ...]:
        """The windows that get a scheduled action: the plan's, or (when it names none) every
        slot where some allocation's count changes. A constant plan has none."""
        if self.horizon_hours == 1:
            return ()
        if self.windows:
            return self.windows
        n = self.horizon_hours
        starts = sorted(
            {t for a in self.allocations for t in range(n) if a.instances_by_slot[t] != a.instances_by_slot[t - 1]}
        )
        return tuple(
            Window(slot_name(t, self.slot_origin), t, starts[(i + 1) % len(starts)]) for i, t in enumerate(starts)
        )


def slot_name(slot: int, origin: str) -> str:
    if origin == "week":
        return f"{DAY_NAMES[slot // 24][:3].lower()}-{slot % 24:02d}h"
    return f"{slot:02d}h"


def group_allocations(plan: PlanDoc, cloud: str) -> tuple[Group, ...]:
    allocs = plan.allocations_in(cloud)
    flex: dict[tuple[str, str | None, str], list[Allocation]] = {}
    for a in allocs:
        if not a.reserved:
            flex.setdefault((a.region, a.zone, a.workload), []).append(a)
    for r in (a for a in allocs if a.reserved):
        key = _match_reserved(plan, r, flex)
        flex.setdefault(key or (r.region, r.zone, r.workload), []).append(r)
    groups = [
        Group(cloud, region, zone, workload, plan.is_gang(workload), tuple(members))
        for (region, zone, workload), members in flex.items()
    ]
    groups.sort(key=lambda g: (g.region, g.zone or "", g.workload))
    labels = [g.label for g in groups]
    if len(set(labels)) != len(labels):
        raise PlanFormatError(f"{cloud}: two scaling groups would share a name: {sorted(labels)}")
    return tuple(groups)


def _match_reserved(
    plan: PlanDoc, r: Allocation, groups: Mapping[tuple[str, str | None, str], Sequence[Allocation]]
) -> tuple[str, str | None, str] | None:
    candidates = []
    for key, members in groups.items():
        region, zone, workload = key
        if region != r.region or (r.zone and zone and zone != r.zone):
            continue
        same_type = any(m.instance_type == r.instance_type for m in members)
        spec = plan.workloads.get(workload)
        fits = spec is None or spec.node_gpus is None or spec.node_gpus == r.gpus_per_instance
        if same_type or fits:
            candidates.append((0 if same_type else 1, 0 if zone == r.zone else 1, workload, zone or "", key))
    return min(candidates)[-1] if candidates else None


# ---------------------------------------------------------------------------- reading


def read_plan(doc: PlanDocument, capacity_reservation: bool = False, bootstrap: Bootstrap | None = None) -> PlanDoc:
    """The renderers' view of a validated plan document."""
    if not isinstance(doc, PlanDocument):
        raise PlanFormatError("a plan document (gpuprov.plandoc.PlanDocument) is required")
    allocations = tuple(
        sorted(
            doc.placements(),
            key=lambda a: (a.cloud, a.region, a.zone or "", a.workload, a.instance_type, a.market, a.instances_by_slot),
        )
    )
    if not allocations:
        raise PlanFormatError("the plan has no allocations")
    windows = tuple(
        Window(w.name, w.start_slot % CYCLE_HOURS[doc.slot_origin], w.end_slot % CYCLE_HOURS[doc.slot_origin])
        for w in doc.windows
    )
    if len({w.ident for w in windows}) != len(windows):
        raise PlanFormatError("window names must stay distinct as Terraform names")
    return PlanDoc(
        plan_id=doc.plan_id,
        gpu=doc.gpu,
        policy=doc.policy or "",
        timezone=doc.timezone,
        slot_origin=doc.slot_origin,
        horizon_hours=doc.horizon_hours,
        windows=windows,
        workloads=doc.workloads,
        monthly_cost_usd=doc.costs.monthly_usd,
        hourly_cost_usd=doc.costs.hourly_usd,
        allocations=allocations,
        capacity_reservation=capacity_reservation,
        bootstrap=bootstrap or Bootstrap(),
    )
