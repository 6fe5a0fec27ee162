"""What a live price source is, what it returns, and the errors it raises.

A source (``pricing/aws.py``, ``gcp.py``, ``azure.py``) turns one cloud's price APIs into
offers. It splits its work into many small independent requests (per region, per zone,
per SKU, per page chain) and runs them through the :class:`FetchContext` it is given: the
context owns the bounded thread pool, the deadline and the progress counter, so the
orchestrator (``pricing/refresh.py``) decides how much runs at once and for how long.

A leaf task submitted to the context must not submit tasks itself (the pool is bounded;
a task waiting for its own children could wait forever). Sources submit a first round,
gather it, then submit the next round from their own thread.

Errors::

    PricingError                      (gpuprov.errors)
    └── SourceError                   one source failed; ``source`` names it
        ├── SourceTimeoutError        it ran past the refresh deadline
        ├── MalformedResponseError    a page that is not what the API documents
        └── EmptyResultError          it returned no offers at all
    RefreshError(PricingError)        raised by RefreshResult.raise_for_failures()
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from gpuprov.errors import MissingExtraError, PricingError
from gpuprov.models import Cloud, Offer

R = TypeVar("R")
T = TypeVar("T")


class SourceError(PricingError):
    """A price source failed; the message names it, ``source`` holds its name."""

    def __init__(self, source: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"{source}: {message}", hint)
        self.source = source


class SourceTimeoutError(SourceError):
    pass


class MalformedResponseError(SourceError):
    pass


class EmptyResultError(SourceError):
    pass


def missing_extra(what: str, extra: str) -> MissingExtraError:
    return MissingExtraError(f"{what} is not installed", hint=f"pip install 'gpuprov[{extra}]'")


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """One step of one cloud's fetch. ``total`` is a lower bound that grows as page chains unfold."""

    cloud: Cloud
    done: int
    total: int
    state: str = "running"  # "running", "done" or "failed"
    note: str = ""


ProgressCallback = Callable[[ProgressEvent], None]


@dataclass
class FetchResult:
    """A source's answer: offers (not yet validated) and rows it skipped, counted by reason."""

    offers: list[Offer]
    skipped: Counter[str] = field(default_factory=Counter)
    requests: int = 0


class PriceSource(Protocol):
    cloud: Cloud
    name: str  # recorded as the snapshot's source, e.g. "live:aws-pricelist+ec2"

    def fetch(self, gpus: Collection[str] | None = None, ctx: FetchContext | None = None) -> FetchResult:
        """Offers of the given canonical GPU names (None: every GPU the cloud has)."""
        ...


class FetchContext:
    """One source's share of a refresh: the request pool, the deadline and progress.

    Without an executor every task runs inline, one request at a time.
    Progress callbacks may come from worker threads.
    """

    def __init__(
        self,
        cloud: Cloud,
        source: str = "",
        *,
        executor: Executor | None = None,
        progress: ProgressCallback | None = None,
        deadline: float | None = None,
    ) -> None:
        self.cloud = cloud
        self.source = source or cloud.value
        self._executor = executor
        self._progress = progress
        self._deadline = deadline  # a time.monotonic() value
        self._lock = threading.Lock()
        self._cancelled = False
        self.requests = 0
        self.planned = 0

    # -- deadline --------------------------------------------------------------------
    def cancel(self) -> None:
        self._cancelled = True

    def remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def check(self) -> None:
        """Raise SourceTimeoutError once the deadline has passed (sources call it before each request)."""
        if self._cancelled or (self._deadline is not None and time.monotonic() > self._deadline):
            raise SourceTimeoutError(
                self.source,
                "timed out before all its requests finished",
                hint="raise --timeout, or refresh fewer clouds or GPU types",
            )

    # -- progress --------------------------------------------------------------------
    def expect(self, requests: int) -> None:
        """Announce at least ``requests`` more requests (page chains may add more)."""
        with self._lock:
            self.planned += requests
            event = ProgressEvent(self.cloud, self.requests, max(self.planned, self.requests))
        self.emit(event)

    def request_done(self, note: str = "") -> None:
        with self._lock:
            self.requests += 1
            self.planned = max(self.planned, self.requests)
            event = ProgressEvent(self.cloud, self.requests, self.planned, note=note)
        self.emit(event)

    def emit(self, event: ProgressEvent) -> None:
        if self._progress is not None:
            self._progress(event)

    # -- the pool --------------------------------------------------------------------
    def submit(self, fn: Callable[..., R], *args: object) -> Future[R]:
        self.check()
        if self._executor is not None:
            return self._executor.submit(fn, *args)
        done: Future[R] = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # handed to gather(), which re-raises it
            done.set_exception(exc)
        return done

    def gather(self, futures: Sequence[Future[R]]) -> list[R]:
        """Results in order; on the first failure cancel what has not started and re-raise."""
        try:
            out = []
            for fut in futures:
                try:
                    out.append(fut.result(timeout=self.remaining()))
                except TimeoutError:
                    raise SourceTimeoutError(self.source, "timed out waiting for its requests") from None
            return out
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        return self.gather([self.submit(fn, item) for item in items])
