"""Refresh the catalog from the live price sources, concurrently and atomically per cloud.

``refresh(sources, catalog, gpus)`` runs every source at once (one thread each) and all
their requests through one bounded pool of ``max_workers`` threads (``max_workers=1``:
everything one at a time, in order). Each source's offers are validated
(``pricing.validate``) and written with ``Catalog.add_snapshot`` — one transaction per cloud,
made current only once all its rows are in.

A source that raises, runs past ``timeout``, returns a malformed page or returns no usable
offers writes nothing: the cloud's previous snapshot stays current. ``refresh`` itself does
not raise for that: it returns a :class:`RefreshResult` with one :class:`CloudOutcome` per
source, after every source has finished; ``RefreshResult.raise_for_failures()`` then raises
:class:`RefreshError` (a PricingError, exit code 4) naming each failed source.

With a GPU filter (``gpus``) the new snapshot holds the fresh offers of those GPUs plus the
previous current snapshot's offers of every other GPU, carried over unchanged (its note
says so), so refreshing one GPU type does not drop the others.

Progress: ``progress`` gets a :class:`pricing.base.ProgressEvent` per request, and one with
state "done" or "failed" per cloud; it is called from worker threads.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from gpuprov.errors import GpuprovError, PricingError
from gpuprov.models import Cloud, Offer, SnapshotInfo
from pricing.base import (
    EmptyResultError,
    FetchContext,
    FetchResult,
    PriceSource,
    ProgressCallback,
    ProgressEvent,
    SourceError,
    SourceTimeoutError,
)
from pricing.gpus import GPUS
from pricing.validate import DEFAULT_SPOT_FACTOR, check_offers

if TYPE_CHECKING:
    from gpuprov.models import Market


class CatalogSink(Protocol):
    """Where a refresh reads the markets it keeps and writes a cloud's new snapshot (the store's
    ``Catalog`` is one): refresh depends on these two calls, not on the store."""

    def offers(
        self,
        gpus: Collection[str],
        clouds: Collection[Cloud] | None = None,
        markets: Collection[Market] | None = None,
    ) -> list[Offer]: ...

    def add_snapshot(
        self, source: str, cloud: Cloud, fetched_at: datetime, offers: Sequence[Offer], note: str = ""
    ) -> SnapshotInfo: ...  # one transaction; the snapshot becomes the cloud's current one


DEFAULT_WORKERS = 16
DEFAULT_TIMEOUT = 600.0


@dataclass(frozen=True)
class CloudOutcome:
    """What one source did: its snapshot, or the error that kept the old one current."""

    cloud: Cloud
    source: str
    snapshot: SnapshotInfo | None
    fetched: int = 0  # offers the source returned
    stored: int = 0  # offers validated and written (carried-over ones not counted)
    carried_over: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    seconds: float = 0.0
    error: GpuprovError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class RefreshError(PricingError):
    def __init__(self, failures: Sequence[CloudOutcome]) -> None:
        detail = "; ".join(_describe(o) for o in failures)
        super().__init__(
            f"price refresh failed for {len(failures)} source(s): {detail}",
            hint="the previous snapshot of each failed cloud is still current",
        )
        self.failures = tuple(failures)


def _describe(outcome: CloudOutcome) -> str:
    message = outcome.error.message if outcome.error else "unknown error"
    named = message if message.startswith(outcome.source) else f"{outcome.source}: {message}"
    return f"{outcome.cloud.value} ({named})"


@dataclass(frozen=True)
class RefreshResult:
    outcomes: tuple[CloudOutcome, ...]
    seconds: float = 0.0

    @property
    def failures(self) -> tuple[CloudOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.ok)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def requests(self) -> int:
        return sum(o.requests for o in self.outcomes)

    def raise_for_failures(self) -> None:
        if self.failures:
            raise RefreshError(self.failures)


def default_sources(clouds: Collection[Cloud] | None = None) -> list[PriceSource]:
    """One source per cloud, configured from the environment (no SDK is imported here)."""
    from pricing.aws import AwsPriceSource
    from pricing.azure import AzurePriceSource
    from pricing.gcp import GcpPriceSource

    every: list[PriceSource] = [AwsPriceSource(), GcpPriceSource(), AzurePriceSource()]
    return [s for s in every if clouds is None or s.cloud in clouds]


def _as_error(source: str, exc: BaseException) -> GpuprovError:
    if isinstance(exc, GpuprovError):
        return exc
    return SourceError(source, f"failed unexpectedly ({type(exc).__name__})")  # its text may quote an answer


class _Run:
    def __init__(
        self, catalog: CatalogSink, gpus: Collection[str] | None, spot_factor: Decimal, now: Callable[[], datetime]
    ) -> None:
        self.catalog, self.gpus, self.spot_factor, self.now = catalog, gpus, spot_factor, now

    def fetch(self, src: PriceSource, ctx: FetchContext) -> tuple[FetchResult, datetime, float]:
        started, fetched_at = time.monotonic(), self.now()
        result = src.fetch(self.gpus, ctx)
        return result, fetched_at, time.monotonic() - started

    def done(
        self,
        src: PriceSource,
        ctx: FetchContext,
        fut: Future[tuple[FetchResult, datetime, float]] | None,
        error: BaseException | None = None,
    ) -> CloudOutcome:
        if fut is not None:
            try:
                result, fetched_at, seconds = fut.result()
                return self._emit(ctx, self.store(src, result, fetched_at, seconds))
            except Exception as exc:  # every failure becomes the outcome's error
                error = exc
        err = _as_error(src.name, error or RuntimeError("no result"))
        return self._emit(ctx, CloudOutcome(src.cloud, src.name, None, requests=ctx.requests, error=err))

    def _emit(self, ctx: FetchContext, outcome: CloudOutcome) -> CloudOutcome:
        ctx.emit(
            ProgressEvent(
                outcome.cloud,
                ctx.requests,
                ctx.requests,
                "done" if outcome.ok else "failed",
                outcome.error.message if outcome.error else f"{outcome.stored} offers",
            )
        )
        return outcome

    def store(self, src: PriceSource, result: FetchResult, fetched_at: datetime, seconds: float) -> CloudOutcome:
        stray = {o.cloud for o in result.offers} - {src.cloud}
        if stray:
            raise SourceError(src.name, f"returned offers of another cloud: {sorted(c.value for c in stray)}")
        offers, invalid = check_offers(result.offers, self.spot_factor)
        skipped: Counter[str] = Counter(result.skipped)
        skipped.update(invalid)
        if not offers:
            reasons = ", ".join(f"{n} {r}" for r, n in skipped.most_common(3)) or "no rows at all"
            raise EmptyResultError(src.name, f"returned no usable offers ({reasons})")
        carried: list[Offer] = []
        note = f"live refresh: {len(offers)} offers from {result.requests} requests"
        if self.gpus is not None:
            others = [g.name for g in GPUS if g.name not in set(self.gpus)]
            carried = self.catalog.offers(others, clouds=[src.cloud])
            note += f"; {', '.join(sorted(self.gpus))} fresh, {len(carried)} offers of other GPUs carried over"
        if skipped:
            note += "; skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(skipped.items()))
        snapshot = self.catalog.add_snapshot(src.name, src.cloud, fetched_at, [*offers, *carried], note=note)
        return CloudOutcome(
            src.cloud,
            src.name,
            snapshot,
            fetched=len(result.offers),
            stored=len(offers),
            carried_over=len(carried),
            skipped=dict(skipped),
            requests=result.requests,
            seconds=seconds,
        )


def refresh(
    sources: Sequence[PriceSource],
    catalog: CatalogSink,
    gpus: Collection[str] | None = None,
    *,
    max_workers: int = DEFAULT_WORKERS,
    timeout: float = DEFAULT_TIMEOUT,
    progress: ProgressCallback | None = None,
    spot_factor: Decimal = DEFAULT_SPOT_FACTOR,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> RefreshResult:
    """Fetch every source and store one snapshot per cloud; failures are in the result, not raised."""
    if len({src.cloud for src in sources}) != len(sources):
        raise ValueError("refresh() takes at most one source per cloud")
    started = time.monotonic()
    deadline = started + timeout
    run = _Run(catalog, gpus, spot_factor, now)
    outcomes: dict[int, CloudOutcome] = {}
    if max_workers <= 1:
        for i, src in enumerate(sources):
            ctx = FetchContext(src.cloud, src.name, progress=progress, deadline=deadline)
            fut: Future[tuple[FetchResult, datetime, float]] = Future()
            try:
                fut.set_result(run.fetch(src, ctx))
            except Exception as exc:  # becomes the outcome's error
                fut.set_exception(exc)
            outcomes[i] = run.done(src, ctx, fut)
        return RefreshResult(tuple(outcomes.values()), time.monotonic() - started)
    requests = ThreadPoolExecutor(max_workers, thread_name_prefix="gpuprov-request")
    per_source = ThreadPoolExecutor(max(1, len(sources)), thread_name_prefix="gpuprov-source")
    try:
        ctxs = [
            FetchContext(src.cloud, src.name, executor=requests, progress=progress, deadline=deadline)
            for src in sources
        ]
        pending = {per_source.submit(run.fetch, src, ctxs[i]): i for i, src in enumerate(sources)}
        while pending:
            finished, _ = wait(pending, timeout=max(0.0, deadline - time.monotonic()), return_when=FIRST_COMPLETED)
            if not finished:
                from sdk import net

                net.abandon()  # their threads may still wait on the network: the process must not
                for i in pending.values():
                    ctxs[i].cancel()
                    error = SourceTimeoutError(sources[i].name, f"did not finish within {timeout:g} s")
                    outcomes[i] = run.done(sources[i], ctxs[i], None, error)
                break
            for fut in finished:
                i = pending.pop(fut)
                outcomes[i] = run.done(sources[i], ctxs[i], fut)
    finally:
        per_source.shutdown(wait=False, cancel_futures=True)
        requests.shutdown(wait=False, cancel_futures=True)
    return RefreshResult(tuple(outcomes[i] for i in sorted(outcomes)), time.monotonic() - started)
