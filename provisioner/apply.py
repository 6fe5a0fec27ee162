"""Reconcile a plan's current slot with what the clouds run: the diff, then the calls.

``diff`` is pure: from the plan document, the slot and the described instances it works
out which to keep, launch and terminate. ``execute`` makes the calls, each written to the
journal before and completed after, so a run killed at any point is reconciled by the
next: the cloud's tags say what exists, and the tokens make every launch idempotent.

Pools are (cloud, region, zone, instance type, market, workload): instances in one pool
are interchangeable. The k-th instance a plan wants in a pool has the token
``launch_token(plan, pool, k, owner)``; instances of the pool from older plans count too, and are
kept in preference to launching.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from gpuprov.errors import GuardError, ProvisioningError, TransientError
from gpuprov.models import Cloud, Market, WorkloadPool
from gpuprov.plandoc import PlanDocument
from provisioner.base import Driver, InstanceHandle, LaunchRequest, launch_token

Pool = WorkloadPool
LAUNCH_CONCURRENCY = 16  # launches in flight per (cloud, region)
THROTTLE_PATIENCE_S = 600.0  # how long one launch keeps backing off while the API throttles


class Journal(Protocol):
    def begin(
        self,
        owner: str,
        plan_id: str,
        op: str,
        token: str,
        pool: Sequence[str],
        when: datetime,
        instance_id: str | None = None,
    ) -> int: ...

    def finish(
        self, entry_id: int, when: datetime, instance_id: str | None = None, error: str | None = None
    ) -> None: ...


@dataclass(frozen=True)
class Want:
    pool: Pool
    count: int
    unit_hourly_usd: Decimal
    gang: bool
    gpu: str | None = None
    gpus: int = 0


@dataclass
class Diff:
    plan_id: str
    slot: int
    keep: list[InstanceHandle] = field(default_factory=list)
    launch: list[LaunchRequest] = field(default_factory=list)
    terminate: list[InstanceHandle] = field(default_factory=list)
    prices: dict[Pool, Decimal] = field(default_factory=dict)

    def hourly(self, handles: Sequence[InstanceHandle], requests: Sequence[LaunchRequest] = ()) -> Decimal:
        total = sum((self.prices.get(h.pool, Decimal(0)) for h in handles), Decimal(0))
        return total + sum((self.prices.get(pool_of(r), Decimal(0)) for r in requests), Decimal(0))

    @property
    def hourly_before(self) -> Decimal:
        return self.hourly([*self.keep, *self.terminate])

    @property
    def hourly_after(self) -> Decimal:
        return self.hourly(self.keep, self.launch)

    @property
    def empty(self) -> bool:
        return not self.launch and not self.terminate


def pool_of(r: LaunchRequest) -> Pool:
    return WorkloadPool(r.cloud.value, r.region, r.zone or "", r.instance_type, r.market.value, r.workload)


def wanted(doc: PlanDocument, slot: int) -> dict[Pool, Want]:
    """Instances the plan wants in each pool in this slot: on-demand and spot allocations, and
    the reserved instances each workload uses (``PlanDocument.placements``)."""
    out: dict[Pool, Want] = {}
    for a in doc.placements():
        n = a.instances_by_slot[slot % len(a.instances_by_slot)]
        pool: Pool = a.pool
        prev = out.get(pool)
        out[pool] = Want(
            pool,
            n + (prev.count if prev else 0),
            a.unit_hourly_usd,
            doc.is_gang(a.workload),
            a.gpu,
            a.gpus_per_instance,
        )
    return out


def unit_prices(docs: Sequence[PlanDocument]) -> dict[Pool, Decimal]:
    """Per-instance prices by pool, as the plans that launched them priced them."""
    out: dict[Pool, Decimal] = {}
    for d in docs:
        for a in d.placements():
            out[a.pool] = a.unit_hourly_usd
    return out


def diff(
    doc: PlanDocument,
    slot: int,
    actual: Sequence[InstanceHandle],
    owner: str,
    known_prices: Mapping[Pool, Decimal] | None = None,
) -> Diff:
    """``known_prices`` prices the running instances of pools this plan does not name (from the
    plans that launched them), so the budget guard sees what they cost while they still run."""
    plan_id = doc.plan_id
    want = wanted(doc, slot)
    prices = dict(known_prices or {})
    prices.update({p: w.unit_hourly_usd for p, w in want.items()})
    result = Diff(plan_id=plan_id, slot=slot, prices=prices)
    have: dict[Pool, list[InstanceHandle]] = defaultdict(list)
    for h in actual:
        have[h.pool].append(h)
    for pool in sorted(set(want) | set(have)):
        w = want.get(pool)
        count = w.count if w else 0
        tokens = [launch_token(plan_id, pool, k, owner) for k in range(count)]
        rank = {t: k for k, t in enumerate(tokens)}
        # keep this plan's own instances first (lowest index first), then the oldest others
        mine = sorted(
            have.get(pool, []),
            key=lambda h: (h.token not in rank, rank.get(h.token, 0), h.launched_at or datetime.max, h.instance_id),
        )
        result.keep += mine[:count]
        result.terminate += mine[count:]
        used = {h.token for h in mine[:count]}
        missing = count - len(mine[:count])
        free = [t for t in tokens if t not in used][:missing]
        cloud, region, zone, itype, market, workload = pool
        for token in free:
            result.launch.append(
                LaunchRequest(
                    cloud=Cloud(cloud),
                    region=region,
                    zone=zone or None,
                    instance_type=itype,
                    market=Market(market),
                    token=token,
                    owner=owner,
                    plan_id=plan_id,
                    workload=workload,
                    placement_group=f"gpuprov-{owner}-{workload}-{zone or region}" if w and w.gang else None,
                    gpu=w.gpu if w else None,
                    gpus=w.gpus if w else 0,
                )
            )
    return result


@dataclass
class Outcome:
    launched: list[InstanceHandle] = field(default_factory=list)
    terminated: list[InstanceHandle] = field(default_factory=list)


def check_guards(d: Diff, budget_per_hour: Decimal | None, max_launch: int) -> bool:
    """Refuse a diff that breaks a guard; say whether it must break before it makes
    (terminate first) to stay under the budget while both old and new run."""
    if len(d.launch) > max_launch:
        raise GuardError(
            f"the plan would launch {len(d.launch)} instances, more than the "
            f"circuit breaker allows in one run ({max_launch})",
            hint="raise --max-launch if that is intended",
        )
    if budget_per_hour is None:
        return False
    if d.hourly_after > budget_per_hour:
        raise GuardError(f"the fleet would cost ${d.hourly_after:.2f}/h, over the ${budget_per_hour}/h budget")
    transient = d.hourly([*d.keep, *d.terminate], d.launch)
    return transient > budget_per_hour


def execute(
    d: Diff,
    drivers: Mapping[Cloud, Driver],
    journal: Journal,
    owner: str,
    clock: Callable[[], datetime],
    budget_per_hour: Decimal | None = None,
    max_launch: int = 100,
    fault: Callable[[str, int], None] | None = None,
    progress: Callable[[str, Any], None] | None = None,
    before_call: Callable[[], None] | None = None,
    concurrency: int = LAUNCH_CONCURRENCY,
) -> Outcome:
    """Make the calls of a diff: launch, then terminate (make before break) unless the budget
    needs the old instances gone first. CapacityError and friends propagate after their
    journal row is closed, with everything done so far kept. ``before_call`` runs before
    every cloud call (the rebalancer checks its lease there; raising stops the run)."""
    break_first = check_guards(d, budget_per_hour, max_launch)
    out = Outcome()

    def launch() -> None:
        _launch_all(d, drivers, journal, owner, clock, out, fault, progress, before_call, concurrency)

    def terminate() -> None:
        _terminate_all(d, drivers, journal, owner, clock, out, fault, progress, before_call)

    for step in [terminate, launch] if break_first else [launch, terminate]:
        step()
    return out


class Pacer:
    """Client-side rate control shared by the launches of one (cloud, region), in the manner of
    botocore's adaptive retry mode: unlimited until the API throttles; then calls start no faster
    than an estimated rate, first set to 90% of the calls that got through in the last second,
    cut by 10% at every further throttle and raised by 0.1 call/s at every success (AIMD). The launches
    settle just under the API's rate instead of colliding with it."""

    def __init__(self, sleep: Callable[[float], None]) -> None:
        self._lock = threading.Lock()
        self._sleep = sleep
        self.rate: float | None = None
        self.next_at = 0.0
        self._recent: list[float] = []

    def wait(self) -> float:
        """Wait for this call's turn; return when it starts (for ``ok``)."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self.next_at)
            if self.rate is not None:
                self.next_at = start + 1.0 / self.rate
            self._recent = [t for t in self._recent if now - t < 2.0] + [start]
        if start > now:
            self._sleep(start - now)
        return start

    def throttled(self, started: float) -> None:
        with self._lock:
            now = time.monotonic()
            if started in self._recent:
                self._recent.remove(started)
            got_through = len([t for t in self._recent if now - 1.0 <= t])
            self.rate = max(0.5, 0.9 * got_through if self.rate is None else 0.9 * self.rate)
            self.next_at = max(self.next_at, now + (0.5 + random.random()) / self.rate)

    def ok(self) -> None:
        """A call got through."""
        with self._lock:
            if self.rate is not None:
                self.rate += 0.1


def _launch_all(
    d: Diff,
    drivers: Mapping[Cloud, Driver],
    journal: Journal,
    owner: str,
    clock: Callable[[], datetime],
    out: Outcome,
    fault: Callable[[str, int], None] | None,
    progress: Callable[[str, Any], None] | None,
    before_call: Callable[[], None] | None,
    concurrency: int = LAUNCH_CONCURRENCY,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Launch concurrently, at most ``concurrency`` in flight per (cloud, region). Each launch
    is journalled before its call and closed after it, exactly as one at a time: a run killed
    at any point leaves rows the next run settles, and the tokens keep every launch idempotent,
    so a retried or repeated launch never makes a second instance. Throttling is retried with
    jittered backoff; the first other error stops new launches, lets those in flight finish,
    and is raised."""
    if not d.launch:
        return
    lock = threading.Lock()
    started = [0]
    slots: dict[tuple[Cloud, str], threading.Semaphore] = {}
    pacers: dict[tuple[Cloud, str], Pacer] = {}
    for req in d.launch:
        slots.setdefault((req.cloud, req.region), threading.Semaphore(max(1, concurrency)))
        pacers.setdefault((req.cloud, req.region), Pacer(sleep))
    failed: list[BaseException] = []

    def one(req: LaunchRequest) -> None:
        driver = _driver(drivers, req.cloud)
        with slots[(req.cloud, req.region)]:
            if failed:
                return
            if before_call:
                before_call()
            with lock:
                started[0] += 1
                n = started[0]
            if fault:
                fault("before-launch", n)
            entry = journal.begin(owner, d.plan_id, "launch", req.token, pool_of(req), clock())
            pacer = pacers[(req.cloud, req.region)]
            give_up = time.monotonic() + THROTTLE_PATIENCE_S
            while True:
                began = pacer.wait()
                try:
                    handle = driver.launch(req)
                    pacer.ok()
                    break
                except TransientError as exc:
                    if time.monotonic() > give_up:
                        journal.finish(entry, clock(), error=exc.message)
                        raise
                    pacer.throttled(began)
                except ProvisioningError as exc:
                    journal.finish(entry, clock(), error=exc.message)
                    raise
            with lock:
                out.launched.append(handle)
                done = len(out.launched)
            if fault:
                fault("after-launch", done)
            journal.finish(entry, clock(), instance_id=handle.instance_id)
            if progress:
                progress("launched", handle)

    workers = min(len(d.launch), max(1, concurrency) * len(slots), 256)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuprov-launch") as pool:
        futures = [pool.submit(one, req) for req in d.launch]
        for f in as_completed(futures):
            exc = f.exception()
            if exc is not None and not failed:
                failed.append(exc)
    if failed:
        raise failed[0]


def _terminate_all(
    d: Diff,
    drivers: Mapping[Cloud, Driver],
    journal: Journal,
    owner: str,
    clock: Callable[[], datetime],
    out: Outcome,
    fault: Callable[[str, int], None] | None,
    progress: Callable[[str, Any], None] | None,
    before_call: Callable[[], None] | None,
) -> None:
    by_cloud: dict[Cloud, list[InstanceHandle]] = defaultdict(list)
    for h in d.terminate:
        by_cloud[h.cloud].append(h)
    for cloud, handles in sorted(by_cloud.items()):
        driver = _driver(drivers, cloud)
        for start in range(0, len(handles), 200):
            batch = handles[start : start + 200]
            if before_call:
                before_call()
            rows = [(owner, d.plan_id, "terminate", h.token, h.pool, clock(), h.instance_id) for h in batch]
            many = getattr(journal, "begin_many", None)  # one commit for the batch where the journal can
            entries = many(rows) if many else [journal.begin(*row) for row in rows]
            try:
                driver.terminate([h.instance_id for h in batch])
            except ProvisioningError as exc:
                _close(journal, [(e, clock(), None, exc.message) for e in entries])
                raise
            _close(journal, [(e, clock(), None, None) for e in entries])
            out.terminated += batch
            if fault:
                fault("after-terminate", len(out.terminated))
            if progress:
                progress("terminated", batch)


def _close(journal: Journal, rows: list[tuple[int, datetime, str | None, str | None]]) -> None:
    many = getattr(journal, "finish_many", None)
    if many:
        many(rows)
        return
    for entry, when, instance_id, error in rows:
        journal.finish(entry, when, instance_id=instance_id, error=error)


def _driver(drivers: Mapping[Cloud, Driver], cloud: Cloud) -> Driver:
    if cloud not in drivers:
        raise ProvisioningError(f"no {cloud} driver is configured for this run")
    return drivers[cloud]
