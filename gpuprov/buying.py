"""What a fleet bills an hour around an apply: now, after the calls while the plan's reservations
are not bought, and once they are (``gpuprov apply``'s dry run and ``status``).

An instance of a reserved pool bills at the reservation's effective rate only for the part of
the reservation that is held (bought and in the inventory); beyond that it is an ordinary
on-demand instance and bills at the on-demand price of its type there. A reservation held is
paid every hour of its term, used or not, so the held part counts whole.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from commitments.purchase import ToBuy
from gpuprov.models import Market, Site
from gpuprov.plandoc import PlanDocument, Reservation
from provisioner.apply import Diff, pool_of
from provisioner.base import InstanceHandle, LaunchRequest


@dataclass(frozen=True)
class Bill:
    now_usd: Decimal  # what runs before the calls, an hour
    until_bought_usd: Decimal  # after the calls, while the reservations to buy are not bought
    once_bought_usd: Decimal  # after the calls and the purchases (every reservation paid whole)
    unknown: tuple[str, ...] = ()  # reservations whose on-demand price is not known (billed at their rate)


def _reserved(m: str) -> bool:
    return Market(m).is_reserved


def _sites(doc: PlanDocument) -> dict[Site, Reservation]:
    return {r.site: r for r in doc.reservations}


def _hourly(
    d: Diff,
    doc: PlanDocument,
    items: Sequence[InstanceHandle | LaunchRequest],
    missing: dict[Site, int],
    bought: bool,
) -> tuple[Decimal, set[str]]:
    reservations = _sites(doc)
    total = Decimal(0)
    on_site: dict[Site, int] = defaultdict(int)
    unknown: set[str] = set()
    for i in items:
        pool = i.pool if isinstance(i, InstanceHandle) else pool_of(i)
        if _reserved(pool.market) and pool.site in reservations:
            on_site[pool.site] += 1
            continue
        total += d.prices.get(pool, Decimal(0))
    for site, r in reservations.items():
        held = r.instances - (0 if bought else missing.get(site, 0))
        total += r.unit_hourly_usd * held  # paid every hour, used or not
        extra = max(0, on_site.get(site, 0) - held)
        if extra:
            if r.on_demand_unit_hourly_usd is None:
                unknown.add(f"{r.instance_type} in {r.location}")
                total += r.unit_hourly_usd * extra
            else:
                total += r.on_demand_unit_hourly_usd * extra
    return total, unknown


def bill(doc: PlanDocument, d: Diff, buys: Sequence[ToBuy]) -> Bill:
    missing = {b.reservation.site: b.missing for b in buys}
    before = [*d.keep, *d.terminate]
    after: list[InstanceHandle | LaunchRequest] = [*d.keep, *d.launch]
    now, u1 = _hourly(d, doc, before, missing, bought=False)
    until, u2 = _hourly(d, doc, after, missing, bought=False)
    once, _u3 = _hourly(d, doc, after, missing, bought=True)
    return Bill(now, until, once, tuple(sorted(u1 | u2)))
