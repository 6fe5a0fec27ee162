"""What the bills say about a plan's commitments: where imported bills show a held commitment
used less than the plan counts on, or commitments like one the plan recommends used below its
break-even, one warning line each (``gpuprov plan`` prints them).

The plan assumes a held commitment is used as its own demand says, and that a new one will be;
the bill knows how the ones already held were used (``report.held_usage``: Used and Unused rows
over the bills' last 30 days), so where it knows, it is said next to the assumption.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from gpuprov.billing.report import CommitmentUse, held_usage
from gpuprov.plandoc import PlanDocument

MARGIN = Decimal("0.05")  # a billed utilization this far under the plan's is worth a line


def warnings(doc: PlanDocument, held: Sequence[Any], bills: Any) -> list[str]:
    """``held``: the commitment inventory (records with id, cloud, instance_type)."""
    if not held or not (doc.commitments.held or doc.commitments.recommended):
        return []
    usage = held_usage([c.id for c in held], bills)
    if not usage:
        return []
    out = []
    for h in doc.commitments.held:
        u = usage.get(h.id)
        if u is not None and u.utilization is not None and u.utilization + MARGIN < h.utilization:
            out.append(
                f"held commitment {h.id}: the bill shows it {u.utilization:.0%} used from {u.first:%Y-%m-%d} to "
                f"{u.last:%Y-%m-%d}; this plan counts on {h.utilization:.0%}"
            )
    for r in doc.commitments.recommended:
        if r.break_even_utilization is None or r.count is None:
            continue
        itype = r.scope.split(" in ", 1)[0]
        alike = [usage[c.id] for c in held if c.id in usage and c.cloud == r.cloud and c.instance_type == itype]
        used = _pooled(alike)
        if used is not None and used < r.break_even_utilization:
            out.append(
                f"recommended {r.kind} {r.scope}: the held {itype} commitments were {used:.0%} used by the bill, "
                f"under the {r.break_even_utilization:.0%} this one needs to beat on demand"
            )
    return out


def _pooled(uses: Sequence[CommitmentUse]) -> Decimal | None:
    used = sum((u.used_usd for u in uses), Decimal(0))
    whole = used + sum((u.unused_usd for u in uses), Decimal(0))
    return used / whole if whole else None
