"""One actor at a time: the lease on SQLite and (when CI provides one) PostgreSQL."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from gpuprov.errors import StateError
from gpuprov.store.lease import Leases

T = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture
def url(db_url: str) -> str:
    return db_url


def test_lease_is_exclusive_and_expires(url: str) -> None:
    a, b = Leases(url), Leases(url)
    ttl = timedelta(seconds=30)
    first = a.acquire("fleet:x", "a", ttl, T)
    assert first is not None
    assert b.acquire("fleet:x", "b", ttl, T + timedelta(seconds=10)) is None
    assert a.acquire("fleet:x", "a", ttl, T + timedelta(seconds=20)) == first  # renewal keeps the token
    taken = b.acquire("fleet:x", "b", ttl, T + timedelta(seconds=51))  # a's lease ran out
    assert taken is not None and taken > first
    assert not a.holds("fleet:x", "a", first, T + timedelta(seconds=52))
    with pytest.raises(StateError, match="lost the lease"):
        a.check("fleet:x", "a", first, T + timedelta(seconds=52))
    b.release("fleet:x", "b", taken)
    again = a.acquire("fleet:x", "a", ttl, T + timedelta(seconds=53))
    assert again is not None and again > taken
    assert Leases(url).acquire("fleet:other", "b", ttl, T) is not None  # leases are per fleet


def test_two_rebalancers_for_100_rounds_never_act_together(url: str) -> None:
    acting: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def rebalancer(name: str) -> None:
        leases = Leases(url)
        try:
            for _ in range(100):
                now = datetime.now(UTC)
                token = leases.acquire("fleet:race", name, timedelta(seconds=5), now)
                if token is None:
                    time.sleep(0.001)
                    continue
                start = time.monotonic()
                leases.check("fleet:race", name, token, datetime.now(UTC))  # before "a cloud call"
                time.sleep(0.002)
                leases.check("fleet:race", name, token, datetime.now(UTC))
                end = time.monotonic()
                with lock:
                    acting.append((name, start, end))
                leases.release("fleet:race", name, token)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rebalancer, args=(n,)) for n in ("r1", "r2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {n for n, _s, _e in acting} == {"r1", "r2"}  # both got to act
    spans = sorted(acting, key=lambda x: x[1])
    for (n1, _s1, e1), (n2, s2, _e2) in itertools.pairwise(spans):
        assert s2 >= e1, f"{n1} and {n2} acted at once"
