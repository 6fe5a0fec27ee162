"""``gpuprov bill report``: the service. Reads the bills, the fleet's history, its plans and its
journal from the store, reconciles them (``reconcile``) and sums the lines into a ``Report``.

Also: commitment utilization per commitment from the bill (``CommitmentDiscountStatus`` Used and
Unused rows, by EffectiveCost), the fleet's tagged instances the fleet's journal never launched
(orphans, or another database's fleet), and the instances the journal launched that ran in hours
the bill covers but have no charge there (tags lost, or an export that is not complete).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from gpuprov.billing import reconcile as rc
from gpuprov.billing.charges import Charge
from gpuprov.billing.timeline import Span, plan_at, spans
from gpuprov.errors import UsageError
from gpuprov.plandoc import PlanDocument

BY = ("day", "plan", "workload", "market")
ZERO = Decimal(0)
MAX_HOURS = 24 * 400  # a report covers at most this many hours


@dataclass
class Amounts:
    planned: Decimal = ZERO
    billed: Decimal = ZERO
    effective: Decimal = ZERO
    list_cost: Decimal = ZERO
    causes: dict[str, Decimal] = field(default_factory=dict)

    def add(self, line: rc.Line) -> None:
        self.planned += line.planned
        self.billed += line.billed
        self.effective += line.effective
        self.list_cost += line.list_cost
        self.causes[line.cause] = self.causes.get(line.cause, ZERO) + line.difference

    @property
    def difference(self) -> Decimal:
        return self.effective - self.planned


@dataclass(frozen=True)
class CommitmentUse:
    id: str  # CommitmentDiscountId
    held_as: str | None  # the gpuprov commitment id it matches
    type: str | None
    used_usd: Decimal
    unused_usd: Decimal
    first: datetime
    last: datetime

    @property
    def utilization(self) -> Decimal | None:
        whole = self.used_usd + self.unused_usd
        return (self.used_usd / whole) if whole else None


@dataclass(frozen=True)
class Stray:
    """An instance on one side only: billed but unknown to the fleet, or the fleet's but unbilled."""

    resource_id: str
    cloud: str | None
    instance_type: str | None
    plan_id: str | None
    hours: Decimal = ZERO
    effective_usd: Decimal = ZERO
    launched_at: datetime | None = None


@dataclass
class Report:
    owner: str
    plan_id: str | None
    start: datetime
    end: datetime
    by: str
    hours: int
    totals: Amounts
    groups: dict[str, Amounts]
    commitments: list[CommitmentUse]
    unknown_to_fleet: list[Stray]
    missing_from_bill: list[Stray]
    coverage: dict[str, list[tuple[datetime, datetime]]]
    notes: list[str]


def last_part(identifier: str) -> str:
    """What two spellings of one id share: its last path component (``region/i-0ab`` and an
    ARN or ``i-0ab`` alike), case folded."""
    text = identifier.strip().rstrip("/")
    for sep in ("/", ":"):
        text = text.rsplit(sep, 1)[-1]
    return text.lower()


def _held_part(gpuprov_id: str) -> str:
    """A gpuprov commitment id without its ``cloud:kind:`` prefix, as its last component."""
    parts = gpuprov_id.split(":", 2)
    rest = parts[2] if len(parts) == 3 and parts[0] in ("aws", "gcp", "azure") else gpuprov_id
    return last_part(rest)


def _coverage(imports: Iterable[Any]) -> dict[str, list[tuple[datetime, datetime]]]:
    out: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for imp in imports:
        for _provider, cloud, a, b in imp.coverage:
            if cloud:
                out[cloud].append((a, b))
    return {c: _merge(v) for c, v in out.items()}


def _merge(spans_: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    out: list[tuple[datetime, datetime]] = []
    for a, b in sorted(spans_):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def group_key(line: rc.Line, by: str) -> str:
    if by == "day":
        return f"{line.hour:%Y-%m-%d}"
    if by == "plan":
        return line.plan_id or "(no plan)"
    if by == "workload":
        return line.workload
    return line.market


def build(
    owner: str,
    plan_id: str | None,
    start: datetime | None,
    end: datetime | None,
    by: str,
    bills: Any,
    fleets: Any,
    plans: Any,
    state: Any,
    held_ids: Sequence[str] = (),
) -> Report:
    """The report for one fleet (and one plan of it, when given) over [start, end)."""
    if by not in BY:
        raise UsageError(f"--by {by!r}: choose from {', '.join(BY)}")
    coverage = _coverage(bills.imports())
    if not coverage:
        raise UsageError("no bill imported yet", hint="gpuprov bill import EXPORT.csv")
    first = min(a for v in coverage.values() for a, _b in v)
    last = max(b for v in coverage.values() for _a, b in v)
    start = rc.hour_of(start or first)
    end = end or last
    end = rc.hour_of(end) + (timedelta(hours=1) if end != rc.hour_of(end) else timedelta(0))
    if end <= start:
        raise UsageError("the report range is empty: --from must be before --to")
    if (end - start) > timedelta(hours=MAX_HOURS):
        raise UsageError(f"a report covers at most {MAX_HOURS // 24} days; narrow --from/--to")
    notes: list[str] = []
    timeline = spans(fleets.history(owner, limit=1_000_000))
    if plan_id is not None:
        doc = plans.get(plan_id)
        plan_id = doc.plan_id
        mine = [s for s in timeline if s.plan_id == plan_id]
        if not timeline:
            mine = [Span(plan_id, start, None)]
            notes.append(f"fleet {owner} has no rebalancer history: plan {plan_id} is taken as in force throughout")
        elif not mine:
            notes.append(f"plan {plan_id} was never in force for fleet {owner} (gpuprov rebalance history)")
        timeline = mine
    elif not timeline:
        notes.append(
            f"fleet {owner} has no rebalancer history: every charge is off plan; name the plan it followed with --plan"
        )
    docs: dict[str, PlanDocument] = {}
    for s in timeline:
        if s.plan_id not in docs:
            docs[s.plan_id] = plans.get(s.plan_id)
    hours = []
    h = start
    while h < end:
        if plan_id is None or plan_at(timeline, h) == plan_id:
            hours.append(h)
        h += timedelta(hours=1)

    def covered(cloud: str, hour: datetime) -> bool:
        return any(a <= hour and hour + timedelta(hours=1) <= b for a, b in coverage.get(cloud, ()))

    # every charge of the fleet in the hours reported: an instance a new plan kept still carries
    # the tag of the plan that launched it, so the hours a plan was in force decide, not the tag
    fleet = list(bills.charges(start, end, kinds=("instance", "tagged"), owner=owner))
    committed = bills.commitment_rows(start, end)
    held = {_held_part(i): i for i in held_ids}
    for doc in docs.values():
        held.update({_held_part(h.id): h.id for h in doc.commitments.held})
    scope = {c.commitment_id for c in fleet if c.commitment_id}
    scope |= {c.commitment_id for c in committed if c.commitment_id and last_part(c.commitment_id) in held}
    scope |= {c.commitment_id for c in committed if c.owner == owner and c.commitment_id}
    idle = [
        c
        for c in committed
        if c.commitment_id in scope
        and c.kind in ("commitment", "capacity")
        and (c.commitment_status == "Unused" or c.charge_category == "Purchase")
    ]
    lines = rc.reconcile(rc.Inputs(hours, timeline, docs, fleet, idle, covered))
    totals = Amounts()
    groups: dict[str, Amounts] = {}
    for line in lines:
        totals.add(line)
        groups.setdefault(group_key(line, by), Amounts()).add(line)
    skipped = sum(1 for h in hours for s in [plan_at(timeline, h)] if s and not _all_covered(docs[s], h, covered))
    if skipped:
        notes.append(f"{skipped} hours of a plan on a cloud the imported bills do not cover are left out")
    return Report(
        owner=owner,
        plan_id=plan_id,
        start=start,
        end=end,
        by=by,
        hours=len(hours),
        totals=totals,
        groups=dict(sorted(groups.items())),
        commitments=_utilization(committed, held),
        unknown_to_fleet=_unknown(fleet, state.journal(owner), plan_id),
        missing_from_bill=_missing(fleet, state.journal(owner), plan_id, covered, start, end),
        coverage=coverage,
        notes=notes,
    )


def _all_covered(doc: PlanDocument, hour: datetime, covered: Any) -> bool:
    return all(covered(c, hour) for c in doc.clouds)


def _utilization(rows: Sequence[Charge], held: dict[str, str]) -> list[CommitmentUse]:
    acc: dict[str, list[Any]] = {}
    for c in rows:
        if not c.commitment_id or c.commitment_status not in ("Used", "Unused"):
            continue
        a = acc.setdefault(c.commitment_id, [c.commitment_type, ZERO, ZERO, c.start, c.end])
        a[1 if c.commitment_status == "Used" else 2] += c.effective
        a[3], a[4] = min(a[3], c.start), max(a[4], c.end)
    return [
        CommitmentUse(cid, held.get(last_part(cid)), t, used, unused, a, b)
        for cid, (t, used, unused, a, b) in sorted(acc.items())
    ]


def _unknown(fleet: Sequence[Charge], journal: Sequence[Any], plan_id: str | None) -> list[Stray]:
    launched = {last_part(e.instance_id) for e in journal if e.op == "launch" and e.instance_id}
    out: dict[str, Stray] = {}
    for c in fleet:
        if c.kind != "instance" or not c.resource_id or last_part(c.resource_id) in launched:
            continue
        s = out.get(c.resource_id)
        hours = c.consumed_quantity or Decimal(int((c.end - c.start).total_seconds())) / 3600
        out[c.resource_id] = Stray(
            c.resource_id,
            c.cloud,
            c.instance_type,
            c.plan_id,
            (s.hours if s else ZERO) + hours,
            (s.effective_usd if s else ZERO) + c.effective,
        )
    return sorted(out.values(), key=lambda s: (-s.effective_usd, s.resource_id))


def _missing(
    fleet: Sequence[Charge],
    journal: Sequence[Any],
    plan_id: str | None,
    covered: Any,
    start: datetime,
    end: datetime,
) -> list[Stray]:
    billed = {last_part(c.resource_id) for c in fleet if c.resource_id}
    ended = {last_part(e.instance_id): e.started_at for e in journal if e.op == "terminate" and e.instance_id}
    out = []
    for e in journal:
        if e.op != "launch" or not e.instance_id or e.state != "done":
            continue
        if plan_id is not None and e.plan_id != plan_id:
            continue
        rid = last_part(e.instance_id)
        stop = min(ended.get(rid, end), end)
        begin = max(rc.hour_of(e.started_at) + timedelta(hours=1), start)  # a whole hour the bill covers
        cloud = e.pool.cloud
        hours = [begin + timedelta(hours=k) for k in range(int((stop - begin).total_seconds() // 3600))]
        if rid in billed or not any(covered(cloud, h) for h in hours):
            continue
        out.append(Stray(e.instance_id, cloud, e.pool.instance_type, e.plan_id, launched_at=e.started_at))
    return out


def held_usage(held_ids: Sequence[str], bills: Any, days: int = 30) -> dict[str, CommitmentUse]:
    """Each held commitment's use by the bill over the last ``days`` days the imported bills
    cover (Used and Unused rows of the CommitmentDiscountId it matches), by gpuprov id; the
    commitments the bills do not show are absent."""
    coverage = _coverage(bills.imports())
    if not coverage or not held_ids:
        return {}
    last = max(b for v in coverage.values() for _a, b in v)
    held = {_held_part(i): i for i in held_ids}
    out: dict[str, CommitmentUse] = {}
    for u in _utilization(bills.commitment_rows(last - timedelta(days=days), last), held):
        gid = u.held_as
        if gid is None:
            continue
        seen = out.get(gid)
        if seen is not None:
            u = CommitmentUse(
                seen.id,
                gid,
                seen.type,
                seen.used_usd + u.used_usd,
                seen.unused_usd + u.unused_usd,
                min(seen.first, u.first),
                max(seen.last, u.last),
            )
        out[gid] = u
    return out
