"""``requests`` for the anonymous price feeds (AWS Spot Instance Advisor, Azure Retail Prices),
with the network policy (``sdk/net.py``) in urllib3's own terms.

``session()`` mounts an ``HTTPAdapter`` whose ``urllib3.util.Retry`` retries a failed connection
(refused, DNS, proxy, TLS) ``connect_retries`` times, a read timeout never (a hung server),
and, with ``statuses``, HTTP 429/500/502/503/504 up to ``THROTTLE_ATTEMPTS`` attempts with
exponential backoff, honouring ``Retry-After`` up to ``MAX_RETRY_AFTER_S`` (and never past the
command's deadline). ``timeout()`` is the (connect, read) pair every request passes.
``unreachable(exc)`` names a ``requests`` network failure ("cannot reach aws
spot-bid-advisor.s3.amazonaws.com: connection refused"), or None.
"""

from __future__ import annotations

import re
from typing import Any

from gpuprov.errors import MissingExtraError
from sdk import net

RETRY_STATUS = (429, 500, 502, 503, 504)
MAX_RETRY_AFTER_S = 60.0
_HOST = re.compile(r"host='([^']{1,100})', port=(\d{1,5})")


def _requests() -> Any:
    try:
        import requests
    except ImportError:
        raise MissingExtraError("the price feeds need requests", hint="pip install 'gpuprov[aws]'") from None
    return requests


def retry(statuses: bool = True, backoff: float = 1.0) -> Any:
    """The urllib3 Retry of the network policy (see the module docstring)."""
    from urllib3.util.retry import Retry

    class Bounded(Retry):
        """Retry-After honoured up to a minute and the deadline; nothing retried past the deadline."""

        def get_retry_after(self, response: Any) -> float | None:
            found = super().get_retry_after(response)
            return None if found is None else min(found, MAX_RETRY_AFTER_S, net.remaining(MAX_RETRY_AFTER_S))

        def is_exhausted(self) -> bool:
            d = net.deadline()
            return bool(super().is_exhausted()) or (d is not None and d.expired())

    attempts = net.THROTTLE_ATTEMPTS - 1 if statuses else 0
    return Bounded(
        total=max(attempts, net.policy().connect_retries),
        connect=net.policy().connect_retries,
        read=0,
        status=attempts,
        other=0,
        backoff_factor=backoff,
        backoff_max=20.0,
        status_forcelist=RETRY_STATUS if statuses else (),
        allowed_methods=frozenset({"GET"}),
        respect_retry_after_header=True,
        raise_on_status=False,
    )


def session(statuses: bool = True, pool: int = 10, backoff: float = 1.0) -> Any:
    """A ``requests.Session`` with the policy's Retry on http:// and https://."""
    requests = _requests()
    http = requests.Session()
    adapter = requests.adapters.HTTPAdapter(max_retries=retry(statuses, backoff), pool_maxsize=pool)
    http.mount("https://", adapter)
    http.mount("http://", adapter)
    return http


def timeout(connect: float | None = None, read: float | None = None) -> tuple[float, float]:
    """(connect, read) seconds for a request made now: the policy's (or those given, if shorter),
    cut to the deadline."""
    c, r = net.timeouts()
    return (min(c, connect) if connect else c, min(r, read) if read else r)


def unreachable(exc: BaseException, cloud: str) -> str | None:
    """Why a request could not reach its endpoint, or None when ``exc`` is not a network failure."""
    requests = _requests()
    e = requests.exceptions
    text = str(exc)
    m = _HOST.search(text)
    where = f"{m.group(1)}:{m.group(2)}" if m else "its endpoint"
    if isinstance(exc, e.ReadTimeout):
        return f"{cloud} {where} did not answer {net.waited()}"
    if isinstance(exc, e.ProxyError):
        return f"cannot reach {cloud} {where}: the proxy refused or failed"
    if isinstance(exc, e.SSLError):
        return f"cannot reach {cloud} {where}: TLS failed"
    if isinstance(exc, e.ConnectTimeout):
        return f"cannot reach {cloud} {where}: no connection within {timeout()[0]:g} s"
    if isinstance(exc, e.ConnectionError | e.ChunkedEncodingError):
        if "NameResolution" in text or "not known" in text or "getaddrinfo" in text:
            return f"cannot reach {cloud} {where}: no DNS answer"
        if "refused" in text.lower():
            return f"cannot reach {cloud} {where}: connection refused"
        return f"cannot reach {cloud} {where}: the connection failed before an answer"
    return None
