"""AWS's public Spot Instance Advisor feed, live: one anonymous HTTPS GET.

``fetch()`` asks ``FEED_URL`` (no credentials; ``requests`` is imported on use) through the
network policy's session (``sdk/http.py``: urllib3's Retry retries a failed connection twice and
HTTP 429/500/502/503/504 with exponential backoff, honouring Retry-After; a hung server is not
asked again), with a connect and a read timeout cut to the command's deadline, and reads at most
``MAX_BYTES`` of body. The body must be JSON in the feed's documented shape
(``pricing.spot_risk.parse_feed``); it comes back cut to the GPU families. Anything else is one
``SourceError`` line ("cannot reach aws spot-bid-advisor.s3.amazonaws.com: ...") and nothing is
stored.
"""

from __future__ import annotations

import json
from typing import Any

from pricing.base import MalformedResponseError, SourceError, missing_extra
from pricing.spot_risk import FeedError, parse_feed

SOURCE = "aws-spot-advisor"
FEED_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
MAX_BYTES = 32 << 20  # the real feed is about 1 MiB
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
    timeout: tuple[float, float] | None = None,
    max_bytes: int = MAX_BYTES,
    backoff: float = 1.0,
    session: Any = None,
) -> dict[str, Any]:
    """The live feed, checked and cut to the GPU families (see ``pricing.spot_risk.parse_feed``)."""
    try:
        import requests
    except ImportError as exc:
        raise missing_extra("requests", "aws") from exc
    from sdk import http as sdk_http

    http = session or sdk_http.session(backoff=backoff)
    try:
        with http.get(url, timeout=sdk_http.timeout(*(timeout or (None, None))), stream=True) as resp:
            if resp.status_code != 200:
                raise SourceError(SOURCE, f"the feed answered HTTP {resp.status_code}")
            body = _body(resp, max_bytes)
    except requests.RequestException as exc:
        reason = sdk_http.unreachable(exc, "aws")
        raise SourceError(SOURCE, reason or f"the feed request failed: {type(exc).__name__}") from None
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedResponseError(SOURCE, f"the feed is not JSON: {str(exc)[:120]}") from None
    try:
        return parse_feed(data, "the feed")
    except FeedError as exc:
        raise MalformedResponseError(SOURCE, exc.message) from None
