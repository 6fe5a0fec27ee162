"""AWS's public Spot Instance Advisor feed, live: one anonymous HTTPS GET.

``fetch()`` asks ``FEED_URL`` (no credentials; ``requests`` is imported on use) with a connect
and a read timeout, reads at most ``MAX_BYTES`` of body, and retries what the Azure Retail
Prices adapter retries (connection errors, timeouts, a cut body, HTTP 429/500/502/503/504,
honouring Retry-After) with exponential backoff, ``max_attempts`` in all. The body must be JSON
in the feed's documented shape (``pricing.spot_risk.parse_feed``); it comes back cut to the GPU
families. Anything else is one ``SourceError`` line and nothing is stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from pricing.base import MalformedResponseError, SourceError, missing_extra
from pricing.spot_risk import FeedError, parse_feed

SOURCE = "aws-spot-advisor"
FEED_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
MAX_BYTES = 32 << 20  # the real feed is about 1 MiB
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
CHUNK = 1 << 16


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _body(resp: Any, max_bytes: int) -> bytes:
    declared = resp.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise SourceError(SOURCE, f"the feed is {int(declared):,} bytes, over the {max_bytes:,}-byte limit")
    out = bytearray()
    for chunk in resp.iter_content(CHUNK):
        out += chunk
        if len(out) > max_bytes:
            raise SourceError(SOURCE, f"the feed is over the {max_bytes:,}-byte limit")
    return bytes(out)


def fetch(
    url: str = FEED_URL,
    *,
    timeout: tuple[float, float] = (10.0, 60.0),
    max_attempts: int = 5,
    backoff: float = 1.0,
    max_bytes: int = MAX_BYTES,
    sleep: Callable[[float], None] = time.sleep,
    session: Any = None,
) -> dict[str, Any]:
    """The live feed, checked and cut to the GPU families (see ``pricing.spot_risk.parse_feed``)."""
    try:
        import requests
    except ImportError as exc:
        raise missing_extra("requests", "aws") from exc
    from pricing.azure import retry_after

    http = session or requests.Session()
    for attempt in range(1, max_attempts + 1):
        delay = backoff * 2 ** (attempt - 1)
        try:
            with http.get(url, timeout=timeout, stream=True) as resp:
                if resp.status_code in RETRY_STATUS and attempt < max_attempts:
                    sleep(retry_after(resp.headers.get("Retry-After"), delay))
                    continue
                if resp.status_code != 200:
                    raise SourceError(SOURCE, f"the feed answered HTTP {resp.status_code}")
                body = _body(resp, max_bytes)
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
            if attempt == max_attempts:
                raise SourceError(SOURCE, f"the feed is unreachable: {type(exc).__name__}") from None
            sleep(delay)
            continue
        except requests.RequestException as exc:
            raise SourceError(SOURCE, f"the feed request failed: {type(exc).__name__}") from None
        try:
            data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise MalformedResponseError(SOURCE, f"the feed is not JSON: {str(exc)[:120]}") from None
        try:
            return parse_feed(data, "the feed")
        except FeedError as exc:
            raise MalformedResponseError(SOURCE, exc.message) from None
    raise AssertionError("unreachable")
