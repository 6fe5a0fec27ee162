"""What the price rules leave out of a plan's request and what that costs: suspect quotes (out
by default), commitments with no on-demand price to compare with, and the as-of span of the
prices per cloud (README "Prices"). ``price_quality`` solves the request again with the suspect
quotes let in; ``quality_lines`` is its text for the table output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from gpuprov import plandoc as pd
from gpuprov.models import Offer, SnapshotInfo
from gpuprov.optimizer.solve import solve
from gpuprov.planning import Context, Solved, permitted, request_for, without_alternative
from pricing.quality import as_of_line, as_of_spans, is_suspect


@dataclass(frozen=True)
class Screened:
    """What the request's rules would let in but the price rules leave out."""

    suspect: tuple[Offer, ...]
    without_alternative: int


def screen(spec: pd.RequestSpec, offers: Sequence[Offer]) -> Screened:
    lone = set(without_alternative(offers))
    ok = [o for o in offers if permitted(spec, o)]
    suspect = tuple(o for o in ok if is_suspect(o)) if not spec.include_suspect else ()
    return Screened(suspect, sum(1 for o in ok if o.key in lone))


def as_of_ranges(offers: Sequence[Offer], snapshots: Sequence[SnapshotInfo]) -> tuple[pd.AsOfRange, ...]:
    """Per cloud, the oldest and newest as-of of these offers (pricing.quality.as_of_spans)."""
    spans = as_of_spans(offers, {s.cloud.value: s.fetched_at for s in snapshots})
    return tuple(pd.AsOfRange(c, lo, hi) for c, (lo, hi) in spans.items())  # type: ignore[arg-type]


def price_quality(
    spec: pd.RequestSpec,
    offers: Sequence[Offer],
    snapshots: Sequence[SnapshotInfo],
    context: Context,
    start: datetime,
    solved: Solved | None = None,
    deadline: float | None = None,
) -> pd.PriceQuality:
    """What the price rules left out of this request, and (solving it again with the suspect
    quotes let in, by ``deadline`` on the monotonic clock) what the plan would cost with them."""
    from collections import Counter

    found = screen(spec, offers)
    flags = Counter(f for o in found.suspect for f in o.flags if f.startswith("suspect-"))
    hourly, note = None, None
    if spec.include_suspect:
        note = "suspect quotes are included (--include-suspect or pricing.include_suspect)"
    elif not found.suspect:
        note = "no suspect quote among the offers this request allows"
    else:
        from gpuprov.errors import GpuprovError

        try:
            request = request_for(replace(spec, include_suspect=True), offers, context, start)
            other = solve(replace(request, deadline=deadline))
            hourly = (other.total_cost_usd / other.horizon_hours).quantize(Decimal("0.0001"))
            if solved is not None and hourly >= solved.plan.total_cost_usd / solved.plan.horizon_hours:
                note = "the suspect quotes would not make the plan cheaper"
            elif other.status != "Optimal":
                note = f"that plan is not proven optimal ({other.status}: the time limit stopped it)"
        except GpuprovError as exc:
            note = f"not solved with them: {exc.message}"
    return pd.PriceQuality(
        include_suspect=spec.include_suspect,
        suspect_left_out=len(found.suspect),
        suspect_flags=dict(sorted(flags.items())),
        with_suspect_hourly_usd=hourly,
        with_suspect_note=note,
        commitments_without_on_demand=found.without_alternative,
        as_of=as_of_ranges([o for o in offers if o.gpu in spec.gpu_names], snapshots),
    )


def quality_lines(doc: pd.PlanDocument) -> list[str]:
    """The plan's price-quality lines for the table output: what was left out, the cost with the
    suspect quotes, and the as-of span of the prices per cloud."""
    q = doc.price_quality
    if q is None:
        return []
    out = []
    if q.include_suspect:
        out.append("suspect quotes: included (--include-suspect)")
    else:
        kinds = ", ".join(f"{n} {flag}" for flag, n in q.suspect_flags.items())
        line = f"suspect quotes left out: {q.suspect_left_out}" + (f" ({kinds})" if kinds else "")
        if q.with_suspect_hourly_usd is not None:
            line += f"; with them the plan would cost ${q.with_suspect_hourly_usd:,.2f}/h"
        if q.with_suspect_note and q.suspect_left_out:
            line += f" ({q.with_suspect_note})"
        out.append(line + ("; --include-suspect lets them in" if q.suspect_left_out else ""))
    if q.commitments_without_on_demand:
        out.append(
            f"commitments not recommended: {q.commitments_without_on_demand} reserved offers whose "
            "instance type has no on-demand price in its region (nothing to compare their saving with)"
        )
    if q.as_of:
        out.append(as_of_line({r.cloud: (r.oldest, r.newest) for r in q.as_of}))
    return out
