"""The fleet service: make the clouds run a plan's slot, the one cycle ``apply`` and the rebalancer
share.

``reconcile`` is describe → settle → diff → (shape) → execute → describe → mirror, with capacity
failover: a pool the cloud refuses for capacity or quota is marked unavailable for a while and
the plan is solved again without it (``replan``), up to ``max_failovers`` times. The cloud is the
source of truth: the journal is settled against what the clouds say before anything is decided,
and the database's mirror is written from a describe after the calls, never from the calls'
answers. ``guard`` runs before every cloud call (the lease holder's check: raising stops the
run before its next call).

Commands stay thin (parse, call this, render); the rebalancer passes its own diff (it decides
between plans on the same describe) through ``execute``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

from gpuprov.errors import CapacityError, GpuprovError, ProvisioningError
from gpuprov.models import Cloud, InstanceHandle, Site
from gpuprov.plandoc import PlanDocument
from provisioner import apply as engine
from provisioner.base import Driver


@dataclass(frozen=True)
class Guards:
    """What every run of calls is held to: the lease check, the budget, the launch cap."""

    before_call: Callable[[], None] | None = None
    budget_per_hour: Decimal | None = None
    max_launch: int = 100
    concurrency: int = engine.LAUNCH_CONCURRENCY
    fault: Callable[[str, int], None] | None = None  # tests only: crash after the n-th call
    progress: Callable[[str, Any], None] | None = None  # ("launched", handle) / ("terminated", batch)


@dataclass
class Outcome:
    """What a reconcile did: the plan it ended on (after failovers), the diff it executed, the
    calls' outcome, what the clouds run after, and the pools it gave up on."""

    plan: PlanDocument
    diff: engine.Diff
    calls: engine.Outcome | None
    after: list[InstanceHandle]
    failovers: list[str] = field(default_factory=list)
    unasked: dict[Cloud, str] = field(default_factory=dict)  # clouds that did not answer describe


class FleetState(engine.Journal, Protocol):
    """The journal, plus the database's mirror of what runs and the pools refused for capacity."""

    def settle(self, owner: str, live_tokens: set[str], when: datetime) -> int: ...

    def mirror(self, owner: str, handles: Sequence[InstanceHandle], when: datetime) -> None: ...

    def mark_unavailable(self, pool: Site, until: datetime, reason: str) -> None: ...


Replan = Callable[[PlanDocument, Sequence[str]], PlanDocument]
Shape = Callable[[engine.Diff, Sequence[InstanceHandle]], engine.Diff]


def describe(drivers: Mapping[Cloud, Driver], owner: str) -> tuple[list[InstanceHandle], dict[Cloud, str]]:
    """What every driver says the fleet runs, and the clouds that could not be asked (and why).
    The clouds are asked at once, each on its own: one that fails or does not answer within the
    network policy's limit (sdk/net.py ``ask_all``) is named, the others' answers are kept."""
    from sdk import net

    def question(driver: Driver) -> Callable[[], list[InstanceHandle]]:
        return lambda: driver.describe(owner)

    answers = net.ask_all({c: question(d) for c, d in sorted(drivers.items())}, lambda c: c.value)
    found: list[InstanceHandle] = []
    failed: dict[Cloud, str] = {}
    for cloud, answer in answers.items():
        if isinstance(answer, GpuprovError):
            failed[cloud] = answer.message
        elif isinstance(answer, BaseException):
            raise answer
        else:
            found += [h for h in answer if h.owner == owner]
    return found, failed


def must_answer(doc: PlanDocument, failed: Mapping[Cloud, str]) -> None:
    """Changing a fleet needs every cloud of its plan to answer first."""
    for a in doc.placements():
        cloud = Cloud(a.cloud)
        if cloud in failed:
            raise ProvisioningError(
                f"could not ask {cloud.value} what the fleet runs: {failed[cloud]}", hint="nothing was changed"
            )


def observe(
    drivers: Mapping[Cloud, Driver], state: FleetState, owner: str, now: datetime, doc: PlanDocument | None = None
) -> tuple[list[InstanceHandle], dict[Cloud, str]]:
    """Describe, then settle the journal against what runs and mirror it (when every cloud
    answered; with ``doc``, a cloud of the plan that does not answer stops the run)."""
    actual, failed = describe(drivers, owner)
    if doc is not None:
        must_answer(doc, failed)
    state.settle(owner, {h.token for h in actual}, now)
    if not failed:
        state.mirror(owner, actual, now)
    return actual, failed


def execute(
    d: engine.Diff,
    drivers: Mapping[Cloud, Driver],
    state: FleetState,
    owner: str,
    clock: Callable[[], datetime],
    guards: Guards,
) -> tuple[engine.Outcome, list[InstanceHandle]]:
    """Make a diff's calls, then describe and mirror what runs after."""
    calls = engine.execute(
        d,
        drivers,
        state,
        owner,
        clock,
        budget_per_hour=guards.budget_per_hour,
        max_launch=guards.max_launch,
        fault=guards.fault,
        progress=guards.progress,
        before_call=guards.before_call,
        concurrency=guards.concurrency,
    )
    after, failed = describe(drivers, owner)
    if not failed:
        state.mirror(owner, after, clock())
    return calls, after


def reconcile(
    doc: PlanDocument,
    slot: Callable[[PlanDocument], int],
    drivers: Mapping[Cloud, Driver],
    state: FleetState,
    owner: str,
    clock: Callable[[], datetime],
    guards: Guards,
    known_plans: Callable[[Sequence[InstanceHandle]], Sequence[PlanDocument]] = lambda _h: (),
    shape: Shape | None = None,
    replan: Replan | None = None,
    unavailable_for: timedelta = timedelta(minutes=3),
    max_failovers: int = 10,
    on_failover: Callable[[str], None] | None = None,
) -> Outcome:
    """Run ``doc``'s slot: see the module docstring. ``known_plans`` gives the saved plans the
    running instances came from (their prices value what is terminated); ``shape`` may limit the
    diff (the rebalancer's disruption budget); ``replan`` solves again without the pools marked
    unavailable (no ``replan``: a capacity error propagates)."""
    tried: list[str] = []
    for _attempt in range(max_failovers + 1):
        if guards.before_call is not None:
            guards.before_call()
        actual, failed = observe(drivers, state, owner, clock(), doc)
        d = engine.diff(doc, slot(doc), actual, owner, engine.unit_prices(list(known_plans(actual))))
        if shape is not None:
            d = shape(d, actual)
        try:
            calls, after = execute(d, drivers, state, owner, clock, guards)
        except CapacityError as exc:
            if replan is None:
                raise
            state.mark_unavailable(exc.pool, clock() + unavailable_for, exc.message)
            tried.append(f"{'/'.join(exc.pool)}: {exc.message}")
            if on_failover is not None:
                on_failover(exc.message)
            doc = replan(doc, tried)
            continue
        return Outcome(doc, d, calls, after, tried, failed)
    raise ProvisioningError(f"gave up after {max_failovers} capacity failovers: " + "; ".join(tried))
