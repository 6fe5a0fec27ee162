"""Which plan a fleet followed when: from the rebalancer's history, or a plan named for a range.

Every pass the rebalancer records (``gpuprov rebalance history``) names the plan the fleet
followed before it and after it; a plan is in force from the pass that adopted it (or, for the
first plan, from the first pass) until the pass that replaced it. Dry runs, skipped and failed
passes changed nothing and are passed over. A fleet without history (applied with ``gpuprov
apply`` alone) follows the plan ``--plan`` names over the whole range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuprov.store.state import PassRecord


@dataclass(frozen=True)
class Span:
    plan_id: str
    start: datetime
    end: datetime | None  # None: still in force

    def covers(self, hour: datetime) -> bool:
        return self.start <= hour and (self.end is None or hour < self.end)


def spans(history: Sequence[PassRecord]) -> list[Span]:
    """The plans in force, in time order, from a fleet's passes (any order)."""
    passes = sorted(
        (p for p in history if p.decision in ("keep", "adopt") and p.plan_after),
        key=lambda p: p.started_at,
    )
    out: list[Span] = []
    current: str | None = None
    since: datetime | None = None
    for p in passes:
        follows = p.plan_after
        if current is None:
            current, since = p.plan_before or follows, p.started_at
        if follows != current:
            assert current is not None and since is not None
            out.append(Span(current, since, p.started_at))
            current, since = follows, p.started_at
    if current is not None and since is not None:
        out.append(Span(current, since, None))
    return out


def plan_at(timeline: Sequence[Span], hour: datetime) -> str | None:
    """The plan in force for the whole of the hour that starts at ``hour`` (the one adopted in
    it, if the fleet changed plans during the hour: the rebalancer adopts at a pass's start)."""
    found = None
    until = hour + timedelta(hours=1)
    for s in timeline:
        if s.start < until and (s.end is None or hour < s.end):
            found = s.plan_id
    return found
