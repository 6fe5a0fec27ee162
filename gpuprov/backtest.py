"""Replay real price history through the planner and the rebalancer (``gpuprov backtest``).

A simulated clock walks ``[start, end)`` in steps of ``every`` (at most an hour). At the start it
plans on the catalog as of then: the *static* plan. At every step:

1. the catalog moves to the prices as of the step (``pricing.history.Replay``, incremental);
2. each running spot instance is reclaimed with probability rate × step hours, the rate being its
   pool's (the policy's per-cloud rate, else the pool's own, else the cloud default), drawn from
   one ``random.Random(seed)`` in a fixed order (same seed, same run);
3. the real rebalancer runs one pass (``gpuprov.rebalance.run_pass``, the code path of
   ``rebalance --once --yes``: thresholds, hysteresis, disruption budget, migration costs)
   against in-memory fake clouds and a throw-away database;
4. the fleet as it stands is billed for the step at the prices as of the step (an offer that has
   gone is billed at its last price).

Three costs come out, in USD over the range:

``realized``  what the rebalanced fleet cost;
``static``    the day-one plan held: each step, its instances for that slot at the prices as of
              the step (an interrupted spot instance is assumed replaced in the same pool at once);
``hindsight`` each step, a proven lower bound on what holding that step's demand costs at that
              step's prices under the same rules (markets, spot ceilings, node sizes, gang, spread):
              the one-slot model solved to optimality on billed cost alone (no interruption
              overhead, which is not billed), over the offers the step bills, i.e. the current ones
              and those that have gone at their last price (a running instance of a pool the price
              list dropped keeps running and is billed so, in the realized and static costs too).
              No fleet that meets demand within the rules is billed less in any step.

A fleet below demand (the rebalancer's disruption budget counts instances, so a schedule turn
that changes instance sizes can leave GPUs unlaunched for a pass) is cheaper than one that meets
it: the GPU-hours short are counted (``unmet_gpu_hours``) and valued at the dearest $/GPU-h the
hour's hindsight holding pays, i.e. what the last GPUs of demand cost (``shortfall_usd``), so
that realized + shortfall compares with the other two.

Re-solves are memoised: the optimizer's answer depends on the offers, the request, the demand
profile of the current slot, what runs and what is reserved, so a pass that sees all of these
as an earlier one did reuses its solve (the plan document is written afresh).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpuprov import plandoc as pd
from gpuprov import planning
from gpuprov.errors import UsageError
from gpuprov.models import DEFAULT_INTERRUPTIONS_PER_HOUR, Cloud, InstanceHandle, Market, Offer, Site, SnapshotInfo
from gpuprov.optimizer.problem import profiles
from gpuprov.optimizer.solve import solve
from pricing.history import PriceChange, Replay

HOUR = timedelta(hours=1)
OWNER = "backtest"


@dataclass(frozen=True)
class Config:
    spec: pd.RequestSpec
    context: planning.Context
    gpus: int
    start: datetime
    end: datetime
    every: timedelta = HOUR
    seed: int = 0
    interruptions: bool = True
    min_saving_usd: Decimal = Decimal(5)
    min_saving_fraction: Decimal = Decimal("0.02")
    hysteresis: timedelta = timedelta(hours=2)
    disruption_share: Decimal = Decimal("0.25")
    lead: timedelta = timedelta(minutes=15)


@dataclass
class Step:
    """One step of the walk: what ran and what each of the three cost."""

    at: datetime
    hours: Decimal
    fleet: tuple[Site, ...]  # one entry per running instance
    realized_usd: Decimal
    static_usd: Decimal
    hindsight_usd: Decimal
    passed: bool
    decision: str
    interrupted: int
    gpus_short: int  # GPUs below the followed plan's demand for the slot
    shortfall_usd: Decimal  # those GPU-hours at the dearest $/GPU-h the hindsight holding pays


@dataclass
class Day:
    day: date
    realized_usd: Decimal = Decimal(0)
    static_usd: Decimal = Decimal(0)
    hindsight_usd: Decimal = Decimal(0)
    passes: int = 0
    migrations: int = 0
    interruptions: int = 0
    replaced_instances: int = 0


@dataclass
class Result:
    start: datetime
    end: datetime
    static_plan_id: str
    realized_usd: Decimal = Decimal(0)
    static_usd: Decimal = Decimal(0)
    hindsight_usd: Decimal = Decimal(0)
    passes: int = 0
    migrations: int = 0
    interruptions: int = 0
    replaced_instances: int = 0
    unmet_gpu_hours: Decimal = Decimal(0)
    shortfall_usd: Decimal = Decimal(0)
    catalogs: int = 1  # distinct catalogs the walk saw
    changes_applied: int = 0
    solves: int = 0
    solves_reused: int = 0
    seconds: float = 0.0
    days: list[Day] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    decisions: Counter[str] = field(default_factory=Counter)


class _Catalog:
    """The walk's catalog: the replay's offers of the request's GPUs, and a snapshot per version."""

    def __init__(self, replay: Replay, gpu_names: Sequence[str]) -> None:
        self.replay = replay
        self.names = set(gpu_names)
        self.version = 0
        self.offers: list[Offer] = []
        self.changed_at: datetime | None = None
        self.last_price: dict[Site, Decimal] = {}
        self.by_pool: dict[Site, Offer] = {}
        self.seen: dict[Site, Offer] = {}  # every offer seen so far, as last seen

    def advance(self, t: datetime) -> bool:
        moved = self.replay.advance(t)
        if moved or self.changed_at is None:
            self.version += 1
            self.changed_at = t
            self.offers = [o for o in self.replay.offers() if o.gpu in self.names]
            self.by_pool = {o.site: o for o in self.offers}
            for p, o in self.by_pool.items():
                self.last_price[p] = o.hourly_usd
                self.seen[p] = o
        return moved

    def billable(self) -> list[Offer]:
        """What a step bills: the current offers, and those that have gone at their last price."""
        return self.offers + [o for p, o in self.seen.items() if p not in self.by_pool]

    def snapshots(self) -> list[SnapshotInfo]:
        assert self.changed_at is not None
        return [SnapshotInfo(self.version, "backtest", Cloud.AWS, self.changed_at, len(self.offers), True)]

    def price(self, pool: Site, fallback: Decimal | None = None) -> Decimal:
        o = self.by_pool.get(pool)
        if o is not None:
            return o.hourly_usd
        if pool in self.last_price:
            return self.last_price[pool]
        if fallback is not None:
            return fallback
        raise KeyError(pool)


class _Solver:
    """planning.replan with the optimizer's answer memoised (see the module docstring)."""

    def __init__(self, catalog: _Catalog) -> None:
        self.catalog = catalog
        self.cache: dict[tuple[Any, ...], planning.Solved] = {}
        self.hindsight: dict[tuple[Any, ...], tuple[Decimal, Decimal]] = {}
        self.solves = 0
        self.reused = 0
        self._spec_ids: dict[int, str] = {}

    def _spec_id(self, spec: pd.RequestSpec) -> str:
        return json.dumps(pd.plain(asdict(spec)), sort_keys=True, default=str)

    def replan(
        self,
        doc: pd.PlanDocument,
        offers: Sequence[Offer],
        snapshots: Sequence[SnapshotInfo],
        unavailable: Collection[Site],
        created: datetime,
        rebalance: Mapping[str, Any] | None = None,
    ) -> pd.PlanDocument:
        again = planning.replanning(doc, offers, unavailable, created, rebalance)
        spec, context, request, extra = again.spec, again.context, again.request, again.extra
        key: tuple[Any, ...] = (
            self.catalog.version,
            self._spec_id(spec),
            tuple(sorted(unavailable)),
            tuple(h.active for h in request.held),  # held commitments are dated against the pass's hour
        )
        if rebalance is not None:
            profile = next(p.slots for p in profiles(request) if rebalance["slot"] in p.slots)
            key += (profile, json.dumps({k: v for k, v in extra.items() if k != "slot"}, sort_keys=True))
        solved = self.cache.get(key)
        if solved is None:
            # the rebalancer decides on the plan's cost: the baselines (three more solves) are left out
            solved = planning.Solved(request, solve(request), ())
            self.cache[key] = solved
            self.solves += 1
        else:
            self.reused += 1
        pid = planning.plan_id(spec, snapshots, context, unavailable, extra)
        return planning.document(pid, solved, snapshots, doc.gpus, spec, context, created, unavailable)

    def hindsight_hour(self, spec: pd.RequestSpec, slot: int) -> tuple[Decimal, Decimal]:
        """A proven lower bound on holding one slot's demand for an hour at the step's billed prices
        (see the module docstring); and the dearest $/GPU-h the optimal holding pays (what the last
        GPUs of demand cost)."""
        demand: dict[str, tuple[int, ...]] = {w: (v[slot],) for w, v in spec.demand.items()}
        key = (self.catalog.version, self._spec_id(spec), tuple(sorted((w, v[0]) for w, v in demand.items())))
        if key not in self.hindsight:
            # billed cost only: interruption overhead is a planning penalty, never on a bill
            one = replace(spec, demand=demand, gap=0.0, interruptions_per_hour={c.value: Decimal(0) for c in Cloud})
            plan = solve(planning.request_from_spec(one, self.catalog.billable()))
            dearest = max(
                (a.offer.usd_per_gpu_hour for a in plan.allocations if any(a.instances_by_slot)), default=Decimal(0)
            )
            self.hindsight[key] = (min(plan.lower_bound_usd, plan.total_cost_usd), dearest)
            self.solves += 1
        return self.hindsight[key]


def interruption_rates(spec: pd.RequestSpec, offers: Sequence[Offer]) -> Callable[[Site], Decimal]:
    """Expected interruptions per instance-hour of a spot pool: the policy's rate for its cloud,
    else the pool's own (AWS Spot Advisor), else the cloud's default."""
    own = {o.site: o.interruptions_per_hour for o in offers if o.market is Market.SPOT}

    def rate(pool: Site) -> Decimal:
        if pool.cloud in spec.interruptions_per_hour:
            return Decimal(spec.interruptions_per_hour[pool.cloud])
        found = own.get(pool)
        return found if found is not None else DEFAULT_INTERRUPTIONS_PER_HOUR.get(pool.cloud, Decimal(0))

    return rate


def run(
    cfg: Config,
    base: Sequence[Offer],
    base_as_of: Mapping[Cloud, datetime],
    changes: Sequence[PriceChange],
    on_step: Callable[[Step], None] | None = None,
) -> Result:
    """Walk the range; see the module docstring."""
    if cfg.end <= cfg.start:
        raise UsageError("the backtest range is empty: --from must be before --to")
    if cfg.every <= timedelta(0):
        raise UsageError("--every must be positive")
    began = time.perf_counter()
    # only the offers the request may use: a change elsewhere is no new catalog for this walk
    usable = [o for o in base if planning.allowed(cfg.spec, o)]
    catalog = _Catalog(Replay(usable, base_as_of, changes), cfg.spec.gpu_names)
    catalog.advance(cfg.start)
    shm = Path("/dev/shm")  # the throw-away database in memory where the system offers it
    with tempfile.TemporaryDirectory(prefix="gpuprov-backtest-", dir=shm if shm.is_dir() else None) as tmp:
        result = _walk(cfg, catalog, f"sqlite:///{Path(tmp) / 'backtest.db'}", on_step)
    result.changes_applied = catalog.replay.applied
    result.catalogs = catalog.version
    result.seconds = time.perf_counter() - began
    return result


def _walk(cfg: Config, catalog: _Catalog, url: str, on_step: Callable[[Step], None] | None) -> Result:
    from gpuprov import rebalance
    from gpuprov.store.lease import Leases
    from gpuprov.store.plans import PlanStore
    from gpuprov.store.state import FleetStore, StateStore
    from provisioner.drivers.fake import FakeDriver

    solver = _Solver(catalog)
    solved = planning.run(planning.request_from_spec(cfg.spec, catalog.offers))
    snaps = catalog.snapshots()
    static = planning.document(
        planning.plan_id(cfg.spec, snaps, cfg.context), solved, snaps, cfg.gpus, cfg.spec, cfg.context, cfg.start
    )
    solver.solves += 1
    plans = PlanStore(url)
    plans.save(static)
    drivers = {c: FakeDriver(c) for c in Cloud}

    class Clock:
        at = cfg.start

        def now(self) -> datetime:
            return self.at

        def sleep(self, seconds: float) -> None:
            self.at += timedelta(seconds=seconds)

    clock = Clock()
    world = rebalance.World(
        drivers=drivers,
        offers=lambda names: [o for o in catalog.offers if o.gpu in names],
        snapshots=catalog.snapshots,
        refresh=None,
        plans=plans,
        state=StateStore(url),
        fleets=FleetStore(url),
        leases=Leases(url),
        replan=solver.replan,
    )
    settings = rebalance.Settings(
        owner=OWNER,
        holder="backtest",
        min_saving_usd=cfg.min_saving_usd,
        min_saving_fraction=cfg.min_saving_fraction,
        hysteresis=cfg.hysteresis,
        disruption_share=cfg.disruption_share,
        lead=cfg.lead,
        max_launch=10_000,
    )
    rng = random.Random(cfg.seed)
    step = min(cfg.every, HOUR)
    result = Result(start=cfg.start, end=cfg.end, static_plan_id=static.plan_id)
    days: dict[date, Day] = {}
    static_price = {a.site: a.unit_hourly_usd for a in static.allocations}
    followed = static
    t = cfg.start
    while t < cfg.end:
        hours = Decimal(int((min(t + step, cfg.end) - t).total_seconds())) / 3600
        clock.at = t
        catalog.advance(t)
        day = days.setdefault(t.date(), Day(t.date()))
        rate = interruption_rates(cfg.spec, catalog.offers)
        interrupted = 0
        if cfg.interruptions:
            for cloud in Cloud:
                for h in drivers[cloud].describe(OWNER):
                    if h.market is not Market.SPOT:
                        continue
                    p = rate(h.site) * hours
                    if rng.random() < float(p):
                        drivers[cloud].interrupt(h.instance_id)
                        interrupted += 1
        due = (t - cfg.start) % cfg.every == timedelta(0)
        decision = ""
        before = {h.instance_id: h for d in drivers.values() for h in d.describe(OWNER)}
        if due:
            rec = rebalance.run_pass(world, settings, clock, initial_plan=static.plan_id)
            decision = rec.decision
            result.decisions[decision] += 1
            day.passes += 1
            if decision == "adopt":
                day.migrations += 1
                if rec.plan_after:
                    followed = plans.get(rec.plan_after)
        fleet = [h for d in drivers.values() for h in d.describe(OWNER)]
        if due:
            started = Counter(h.workload for h in fleet if h.instance_id not in before)
            ids = {h.instance_id for h in fleet}
            ended = Counter(h.workload for i, h in before.items() if i not in ids)
            day.replaced_instances += sum(min(started[w], ended[w]) for w in started)
        pools = tuple(sorted(h.site for h in fleet))
        realized = sum((catalog.price(p) for p in pools), Decimal(0)) * hours
        slot = static.slot_at(t)
        static_cost = Decimal(0)
        for a in static.allocations:
            n = a.instances_by_slot[slot]
            if n:
                pool = a.site
                static_cost += catalog.price(pool, static_price[pool]) * n
        static_cost *= hours
        best, dearest = solver.hindsight_hour(cfg.spec, slot)
        hindsight = best * hours
        fslot = followed.slot_at(t)
        held: dict[str, int] = defaultdict(int)
        for h in fleet:
            held[h.workload] += catalog.by_pool.get(h.site, _any_offer(followed, h)).gpus_per_instance
        short = sum(max(0, v[fslot] - held[w]) for w, v in followed.demand.items())
        shortfall = dearest * short * hours
        s = Step(t, hours, pools, realized, static_cost, hindsight, due, decision, interrupted, short, shortfall)
        result.shortfall_usd += shortfall
        result.steps.append(s)
        day.realized_usd += realized
        day.static_usd += static_cost
        day.hindsight_usd += hindsight
        day.interruptions += interrupted
        result.unmet_gpu_hours += short * hours
        if on_step is not None:
            on_step(s)
        t += step
    result.days = [days[d] for d in sorted(days)]
    for d in result.days:
        result.realized_usd += d.realized_usd
        result.static_usd += d.static_usd
        result.hindsight_usd += d.hindsight_usd
        result.passes += d.passes
        result.migrations += d.migrations
        result.interruptions += d.interruptions
        result.replaced_instances += d.replaced_instances
    result.solves, result.solves_reused = solver.solves, solver.reused
    return result


class _Size:
    def __init__(self, gpus: int) -> None:
        self.gpus_per_instance = gpus


def _any_offer(doc: pd.PlanDocument, h: InstanceHandle) -> _Size:
    """The GPUs of an instance whose offer has left the catalog: from the plan that launched it."""
    for a in doc.allocations:
        if (a.cloud, a.location, a.instance_type) == (h.cloud.value, h.zone or h.region, h.instance_type):
            return _Size(a.gpus_per_instance)
    return _Size(0)
