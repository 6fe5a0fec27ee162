"""The scheduled rebalancing job: re-price, re-plan, and migrate a running fleet when it pays.

One pass (``run_pass``):

1. take the fleet's lease (one actor at a time; a lost lease stops the pass before its
   next cloud call);
2. refresh prices when they are older than the plan allows;
3. describe the fleet; the slot is the plan's slot at ``now + lead`` (so a schedule turn is
   followed a little ahead);
4. solve the plan's request again with the running fleet as an option: keeping an instance
   costs its price, launching beyond what runs costs boot hours (plus lost work for
   training) at the new price; reservations held stay fixed;
5. adopt the new plan only if it saves, over the plan's horizon, more than both an absolute
   and a relative threshold, and the last adoption is older than the hysteresis window;
6. apply the followed plan's slot (scaling for the schedule and replacing interrupted spot
   instances is following the plan, not migrating), make before break, with at most a set
   share of each workload's running instances replaced in one pass;
7. record the pass: snapshots, decision and why, actions, hourly cost before and after,
   the expected saving.

Everything it talks to comes in through ``World``; time through ``Clock``, so tests drive it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Protocol

from gpuprov import fleet, planning
from gpuprov.errors import GpuprovError, ProvisioningError, StateError
from gpuprov.models import Cloud, Decision, Market, Offer, Site, SnapshotInfo, WorkloadSite
from gpuprov.plandoc import PlanDocument, WorkloadSpec
from gpuprov.store.lease import Leases
from gpuprov.store.plans import PlanStore
from gpuprov.store.state import FleetStore, PassRecord, StateStore
from provisioner import apply as engine
from provisioner.base import Driver, InstanceHandle, LaunchRequest
from sdk import net


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        import time

        time.sleep(seconds)


@dataclass(frozen=True)
class Settings:
    owner: str
    holder: str
    lease_ttl: timedelta = timedelta(minutes=10)
    min_saving_usd: Decimal = Decimal(5)  # over the plan's horizon
    min_saving_fraction: Decimal = Decimal("0.02")
    hysteresis: timedelta = timedelta(hours=2)  # no new plan sooner than this after the last
    disruption_share: Decimal = Decimal("0.25")  # of a workload's running instances, per pass
    boot_hours: Decimal = Decimal("0.25")
    training_lost_hours: Decimal = Decimal("0.5")
    lead: timedelta = timedelta(minutes=15)
    budget_per_hour: Decimal | None = None
    max_launch: int = 100
    dry_run: bool = False  # decide and report; change nothing


@dataclass
class World:
    drivers: Mapping[Cloud, Driver]
    offers: Callable[[Sequence[str]], list[Offer]]
    snapshots: Callable[[], list[SnapshotInfo]]
    refresh: Callable[[], None] | None
    plans: PlanStore
    state: StateStore
    fleets: FleetStore
    leases: Leases
    unavailable: Callable[[datetime], set[Site]] = field(default=lambda _now: set())
    replan: Callable[..., PlanDocument] | None = None  # None: planning.replan (a backtest memoises the solve)


def reprice(doc: PlanDocument, offers: Sequence[Offer]) -> Decimal:
    """What following this plan costs over its horizon at today's prices (old price where an
    offer has gone)."""
    by_zone = {(o.cloud.value, o.location, o.instance_type, o.market.value): o.hourly_usd for o in offers}
    by_region = {(o.cloud.value, o.region, o.instance_type, o.market.value): o.hourly_usd for o in offers}
    total = Decimal(0)

    def unit(cloud: str, zone: str | None, region: str, itype: str, market: str, old: Decimal) -> Decimal:
        price = by_zone.get((cloud, zone or region, itype, market)) or by_region.get((cloud, region, itype, market))
        return price if price is not None else old

    for a in doc.allocations:
        price = unit(a.cloud, a.zone, a.region, a.instance_type, a.market, a.unit_hourly_usd)
        total += price * sum(a.instances_by_slot)
    for r in doc.reservations:  # held in every slot, used or not
        total += (
            unit(r.cloud, r.zone, r.region, r.instance_type, r.market, r.unit_hourly_usd)
            * r.instances
            * doc.horizon_hours
        )
    return total


def migration_hours(settings: Settings, workloads: Sequence[WorkloadSpec]) -> dict[str, Decimal]:
    """Hours of price a launch beyond what runs costs: boot time, and for a gang (a training job
    that restarts from its checkpoint when its nodes change) the work lost."""
    return {w.name: settings.boot_hours + (settings.training_lost_hours if w.gang else Decimal(0)) for w in workloads}


def launch_cost(d: engine.Diff, hours: Mapping[str, Decimal]) -> Decimal:
    return sum(
        (d.prices.get(engine.pool_of(r), Decimal(0)) * hours.get(r.workload, Decimal(0)) for r in d.launch), Decimal(0)
    )


def limit_disruption(
    d: engine.Diff,
    actual: Sequence[InstanceHandle],
    share: Decimal,
    gangs: Collection[str] = (),
    gpus_of: Mapping[str, int] | None = None,
    spot_limit: Mapping[str, int] | None = None,
) -> engine.Diff:
    """At most ⌈share × running⌉ (at least one) of each workload's running instances replaced in
    one pass. A replacement is a launch matched with a termination in the same workload; a net
    scale-up or scale-down is the plan's schedule and is not limited. Deferred replacements
    keep the old instance running (and its cost) until a later pass: the dearest old instances
    end first, and the launches deferred are the plan's last.

    The spot ceiling holds while swaps wait (``spot_limit``: the spot GPUs a workload may hold in
    the slot, its ceiling × its demand): where the instances kept would put a workload above it
    (a turn of the schedule that shrinks a workload keeps its cheap spot instances and ends its
    dear on-demand ones), a kept spot instance and an on-demand one that was to end trade places,
    and a deferred on-demand launch goes ahead of a spot one; the number of swaps is unchanged.

    Capacity comes first: where the deferred launches carry more GPUs than the deferred
    terminations keep (small nodes swapped for big ones), launches are put back until the
    workload holds the GPUs the plan wants (``gpus_of``: GPUs per instance type; a type it does
    not name counts as none). Old instances then run beside the new ones until a later pass.

    A gang (training that must sit in one zone) moves whole or not at all: half a gang in each
    of two zones is no training cluster. Its moves are rate-limited by the hysteresis window."""
    sizes = gpus_of or {}
    ceilings = spot_limit or {}

    def gpus(items: Sequence[InstanceHandle] | Sequence[LaunchRequest]) -> int:
        return sum(sizes.get(i.instance_type, 0) for i in items)

    def spot(items: Sequence[InstanceHandle] | Sequence[LaunchRequest]) -> int:
        return sum(sizes.get(i.instance_type, 0) for i in items if i.market is Market.SPOT)

    running: dict[str, int] = defaultdict(int)
    for h in actual:
        running[h.workload] += 1
    launch = defaultdict(list)
    for r in d.launch:
        launch[r.workload].append(r)
    terminate = defaultdict(list)
    for h in sorted(d.terminate, key=lambda h: -d.prices.get(h.pool, Decimal(0))):  # dearest first
        terminate[h.workload].append(h)
    out = engine.Diff(plan_id=d.plan_id, slot=d.slot, keep=list(d.keep), prices=dict(d.prices))
    for w in sorted(set(launch) | set(terminate)):
        allowed = running[w] if w in gangs else max(1, math.ceil(share * running[w]))
        swaps = min(len(launch[w]), len(terminate[w]))
        cut = max(0, swaps - allowed)
        going = launch[w][: len(launch[w]) - cut]
        deferred = launch[w][len(launch[w]) - cut :]
        ending = terminate[w][: len(terminate[w]) - cut]
        kept_old = terminate[w][len(terminate[w]) - cut :]
        kept = [h for h in d.keep if h.workload == w]
        limit = ceilings.get(w)
        if limit is not None and cut:
            while spot(kept) + spot(kept_old) + spot(going) > limit:
                old_spot = next((h for h in kept_old if h.market is Market.SPOT), None)
                ends_od = next((h for h in ending if h.market is not Market.SPOT), None)
                if old_spot is not None and ends_od is not None:
                    kept_old.remove(old_spot)
                    ending.append(old_spot)
                    ending.remove(ends_od)
                    kept_old.append(ends_od)
                    continue
                new_spot = next((r for r in reversed(going) if r.market is Market.SPOT), None)
                waits_od = next((r for r in deferred if r.market is not Market.SPOT), None)
                if new_spot is None or waits_od is None:
                    break
                going.remove(new_spot)
                deferred.append(new_spot)
                deferred.remove(waits_od)
                going.append(waits_od)
        wanted = gpus(kept) + gpus(launch[w])
        while deferred and gpus(kept) + gpus(kept_old) + gpus(going) < wanted:
            going.append(deferred.pop(0))
        out.launch += going
        out.terminate += ending
        out.keep += kept_old
    return out


def spot_limits(doc: PlanDocument, slot: int) -> dict[str, int]:
    """Per workload, the spot GPUs it may hold in a slot: its ceiling × its demand there."""
    return {
        w.name: math.floor(w.max_spot_fraction * doc.demand[w.name][slot % len(doc.demand[w.name])])
        for w in doc.request.workloads
        if w.name in doc.demand
    }


def run_pass(world: World, settings: Settings, clock: Clock, initial_plan: str | None = None) -> PassRecord:
    started = clock.now()
    name = f"fleet:{settings.owner}"
    token = world.leases.acquire(name, settings.holder, settings.lease_ttl, started)
    if token is None:
        rec = PassRecord(
            settings.owner,
            started,
            clock.now(),
            settings.holder,
            -1,
            (),
            Decision.SKIPPED.value,
            "another rebalancer holds this fleet's lease",
        )
        world.fleets.record(rec)
        return rec
    try:
        return _pass(world, settings, clock, token, started, initial_plan)
    except GpuprovError as exc:
        rec = PassRecord(
            settings.owner, started, clock.now(), settings.holder, token, (), Decision.FAILED.value, exc.message
        )
        world.fleets.record(rec)
        raise
    finally:
        world.leases.release(name, settings.holder, token)


def _pass(
    world: World, settings: Settings, clock: Clock, token: int, started: datetime, initial_plan: str | None
) -> PassRecord:
    name = f"fleet:{settings.owner}"

    def guard() -> None:
        net.check("rebalancing")  # the pass's --deadline (sdk/net.py)
        world.leases.check(name, settings.holder, token, clock.now())

    active = world.fleets.active_plan(settings.owner)
    if active is None:
        if initial_plan is None:
            raise StateError(
                f"fleet {settings.owner} follows no plan yet", hint="start it with gpuprov rebalance --plan PLAN_ID"
            )
        doc = world.plans.get(initial_plan)
        if not settings.dry_run:
            world.fleets.adopt(settings.owner, doc.plan_id, started - settings.hysteresis)
        active = (doc.plan_id, started - settings.hysteresis)
    doc = world.plans.get(active[0])
    snapshots = world.snapshots()
    max_age = timedelta(hours=float(doc.max_price_age_hours))
    if world.refresh is not None and snapshots and min(s.fetched_at for s in snapshots) < started - max_age:
        guard()
        world.refresh()
        snapshots = world.snapshots()
    guard()
    actual, unasked = fleet.observe(world.drivers, world.state, settings.owner, clock.now(), doc)
    if unasked:
        raise ProvisioningError(
            "could not ask "
            + ", ".join(f"{c.value} ({why})" for c, why in sorted(unasked.items()))
            + " what the fleet runs; the pass changes nothing"
        )
    slot = planning.slot_at(doc, started + settings.lead)
    offers = world.offers(doc.request.gpu_names)
    incumbent: dict[WorkloadSite, int] = defaultdict(int)
    for h in actual:
        incumbent[h.pool.workload_site] += 1
    reserved = {r.site: r.instances for r in doc.reservations}
    hours = migration_hours(settings, doc.request.workloads)
    known = engine.unit_prices([doc])
    keep_diff = engine.diff(doc, slot, actual, settings.owner, known)
    # both sides net of held commitments (paid whatever the fleet does): the kept plan's usage
    # less what its held commitments cover, the candidate's marginal cost
    covered = sum((h.covered_horizon_usd for h in doc.commitments.held), Decimal(0))
    keep_cost = reprice(doc, offers) - covered + launch_cost(keep_diff, hours)
    candidate = (world.replan or planning.replan)(
        doc,
        offers,
        snapshots,
        world.unavailable(started),
        started,
        {"slot": slot, "incumbent": dict(incumbent), "migration_hours": hours, "reserved": reserved},
    )
    cand_diff = engine.diff(candidate, slot, actual, settings.owner, known)
    new_cost = candidate.costs.marginal_cost_usd + launch_cost(cand_diff, hours)
    saving = keep_cost - new_cost
    held_for = started - active[1]
    if candidate.plan_id == doc.plan_id:
        decision, reason, target, d = Decision.KEEP, "the plan is unchanged", doc, keep_diff
    elif saving < settings.min_saving_usd or saving < settings.min_saving_fraction * keep_cost:
        decision, target, d = Decision.KEEP, doc, keep_diff
        reason = (
            f"a new plan would save ${saving:.2f} over {doc.horizon_hours} h, under the thresholds "
            f"(${settings.min_saving_usd}, {settings.min_saving_fraction:.0%})"
        )
    elif held_for < settings.hysteresis:
        decision, target, d = Decision.KEEP, doc, keep_diff
        reason = (
            f"a new plan would save ${saving:.2f}, but the last change is {held_for} old "
            f"(hysteresis {settings.hysteresis})"
        )
    else:
        decision, target, d = Decision.ADOPT, candidate, cand_diff
        reason = f"saves ${saving:.2f} over {doc.horizon_hours} h ({saving / keep_cost:.1%}), migrations included"
        if not settings.dry_run:
            world.plans.save(candidate)
            world.fleets.adopt(settings.owner, candidate.plan_id, started)
    known.update(engine.unit_prices([target]))
    gangs = {w.name for w in target.request.workloads if w.gang}
    sizes = {a.instance_type: a.gpus_per_instance for plan in (doc, target) for a in plan.placements()}
    limited = limit_disruption(
        replace(d, prices={**known, **d.prices}),
        actual,
        settings.disruption_share,
        gangs,
        sizes,
        spot_limits(target, d.slot),
    )
    before = limited.hourly_before
    if settings.dry_run:
        return PassRecord(
            settings.owner,
            started,
            clock.now(),
            settings.holder,
            token,
            tuple(s.id for s in snapshots),
            f"dry-run: {decision.value}",
            reason,
            doc.plan_id,
            target.plan_id,
            len(limited.launch),
            len(limited.terminate),
            before.quantize(Decimal("0.0001")),
            limited.hourly(limited.keep, limited.launch).quantize(Decimal("0.0001")),
            saving.quantize(Decimal("0.01")),
        )
    fleet.execute(
        limited,
        world.drivers,
        world.state,
        settings.owner,
        clock.now,
        fleet.Guards(before_call=guard, budget_per_hour=settings.budget_per_hour, max_launch=settings.max_launch),
    )
    rec = PassRecord(
        settings.owner,
        started,
        clock.now(),
        settings.holder,
        token,
        tuple(s.id for s in snapshots),
        decision.value,
        reason,
        doc.plan_id,
        target.plan_id,
        len(limited.launch),
        len(limited.terminate),
        before.quantize(Decimal("0.0001")),
        limited.hourly(limited.keep, limited.launch).quantize(Decimal("0.0001")),
        saving.quantize(Decimal("0.01")) if decision is Decision.ADOPT else Decimal(0),
    )
    world.fleets.record(rec)
    return rec
