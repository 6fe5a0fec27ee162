"""Day/night windows to hourly demand slots, in the policy's local time zone.

A 24-slot plan: slot t is local hour t of any day. A 168-slot plan: slot t is hour t of
the week counted from Monday 00:00 local. A window from 20:00 to 08:00 wraps past
midnight; its ``days`` name the days on which it *opens*. Later windows win where two
overlap; hours no window covers take the policy's default demand.

Local slots meet UTC only here (``slot_at``): everything else stays timezone-aware UTC.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from policies.model import DAYS, Amount, Policy, Window


def _hours(window: Window, horizon: int) -> list[int]:
    length = (window.end_hour - window.start_hour) % 24 or 24
    if horizon == 24:
        return [(window.start_hour + h) % 24 for h in range(length)]
    out = []
    for day in window.days:
        start = DAYS.index(day) * 24 + window.start_hour
        out += [(start + h) % 168 for h in range(length)]
    return out


def split(row: dict[str, Amount], total: int) -> dict[str, int]:
    """GPUs per workload in one slot. Fractions of the total are rounded by largest remainder,
    so 70% + 30% of 64 is 45 + 19 = 64 (not 45 + 20); absolute amounts are taken as they are."""
    out = {w: a.gpus for w, a in row.items() if a.gpus is not None}
    out |= {w: a.work for w, a in row.items() if a.work is not None}  # work a second, taken as it is
    shares = {w: a.fraction * total for w, a in row.items() if a.fraction is not None}
    if shares:
        floors = {w: int(v) for w, v in shares.items()}
        target = int(sum(shares.values(), Decimal(0)).to_integral_value(rounding="ROUND_HALF_UP"))
        order = sorted(shares, key=lambda w: (-(shares[w] - floors[w]), w))
        for w in order[: max(0, target - sum(floors.values()))]:
            floors[w] += 1
        out.update(floors)
    return out


def demand_slots(policy: Policy, total: int) -> dict[str, tuple[int, ...]]:
    """GPUs each workload needs in each slot."""
    horizon = policy.horizon_hours
    table: list[dict[str, Amount]] = [dict(policy.default_demand) for _ in range(horizon)]
    for window in policy.windows:
        for slot in _hours(window, horizon):
            table[slot] = {**table[slot], **window.demand}
    rows = [split(row, total) for row in table]
    return {w: tuple(row.get(w, 0) for row in rows) for w in policy.workloads}


def window_starts(policy: Policy) -> list[tuple[str, int]]:
    """(window name, slot) for every opening of every window, in slot order."""
    out = []
    for window in policy.windows:
        if policy.horizon_hours == 24:
            out.append((window.name, window.start_hour))
        else:
            out += [(window.name, DAYS.index(d) * 24 + window.start_hour) for d in window.days]
    return sorted(out, key=lambda item: item[1])


def slot_at(policy: Policy, when: datetime) -> int:
    """The slot an aware UTC instant falls in, in the policy's time zone."""
    if when.tzinfo is None:
        raise ValueError("slot_at needs a timezone-aware time")
    local = when.astimezone(ZoneInfo(policy.timezone))
    if policy.horizon_hours == 24:
        return local.hour
    return local.weekday() * 24 + local.hour
