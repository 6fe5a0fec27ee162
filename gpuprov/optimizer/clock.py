"""The time limit of a whole plan, and where the time went.

``gpuprov plan --time-limit S`` bounds the whole command: the catalog read, the reductions, model
builds, LP and MILP solves and the baselines all draw on one deadline (``time.monotonic()``
seconds), set when the command starts. Each phase's seconds are recorded (``plan --output json``
carries them in ``solve.phases``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

MIN_SOLVE_S = 0.5  # a solver is never given less than this (CBC needs it to return its start)


@dataclass
class Clock:
    deadline: float
    phases: dict[str, float] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)  # the longest of each repeated step so far

    @classmethod
    def after(cls, seconds: float, start: float | None = None) -> Clock:
        return cls((time.monotonic() if start is None else start) + seconds)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def solver_time(self, share: float = 1.0) -> float:
        """Seconds a solver may take now: ``share`` of what is left, at least MIN_SOLVE_S."""
        return max(MIN_SOLVE_S, self.left() * share)

    def note(self, step: str, seconds: float) -> None:
        """Remember how long a repeated step took (the longest), to decide whether another fits."""
        self.seen[step] = max(self.seen.get(step, 0.0), seconds)

    def estimate(self, step: str) -> float:
        return self.seen.get(step, 0.0)

    @property
    def expired(self) -> bool:
        return self.left() <= 0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        from gpuprov.optimizer.cbc import progress

        report = progress.get()
        if report is not None:
            report(name, None, None)
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.monotonic() - start
