"""The Google Cloud SDK for every part of gpuprov that talks to GCP: google-cloud-compute (and
google-cloud-billing for prices) loaded on first use, one missing-extra error, typed access
(no string look-ups), and the network policy (``sdk/net.py``) in google-api-core's own terms:

* ``retry(throttled)``: a ``google.api_core.retry.Retry`` that retries what ``throttled`` says
  (429, 5xx, rate-limit reasons) until its deadline, a failed connection (refused, DNS, proxy,
  TLS) ``connect_retries`` times, a read timeout (a hung server) never, and nothing once the
  command's deadline has passed;
* ``timeout()``: the per-request timeout every call passes (the read timeout, cut to the
  deadline; google-auth's token refresh uses the same);
* ``endpoint``: ``client_options`` for a configured API endpoint (``gcp.endpoint``: Private
  Service Connect, a proxy, a test server);
* ``unreachable(exc)`` names a network failure ("cannot reach gcp oauth2.googleapis.com: the
  proxy refused or failed"); ``translated(exc, what)`` is the last resort of every caller: any
  exception as one line of gpuprov's error tree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuprov.errors import (
    CredentialsError,
    GpuprovError,
    MissingExtraError,
    ProvisioningError,
    TransientError,
    UnreachableError,
)
from sdk import net

HINT = "pip install 'gpuprov[gcp]'"


@dataclass(frozen=True)
class Gcp:
    compute: Any  # google.cloud.compute_v1
    auth: Any  # google.auth
    errors: Any  # google.api_core.exceptions
    retry: Any  # google.api_core.retry
    options: Any  # google.api_core.client_options
    json_format: Any  # google.protobuf.json_format
    billing: Any = None  # google.cloud.billing_v1, when asked for


def load(what: str = "this", billing: bool = False) -> Gcp:
    """google-cloud-compute (and -billing with ``billing``), or one line naming the extra."""
    try:
        import google.auth
        from google.api_core import client_options, retry
        from google.api_core import exceptions as api_exceptions
        from google.cloud import compute_v1
        from google.protobuf import json_format

        billing_v1: Any = None
        if billing:
            from google.cloud import billing_v1 as loaded

            billing_v1 = loaded
    except ImportError:
        needs = "google-cloud-compute and google-cloud-billing" if billing else "google-cloud-compute"
        raise MissingExtraError(f"{what} needs {needs}", hint=HINT) from None
    return Gcp(compute_v1, google.auth, api_exceptions, retry, client_options, json_format, billing_v1)


def timeout() -> float:
    """Seconds one request may take to connect and to answer (cut to the deadline)."""
    connect, read = net.timeouts()
    return max(connect, read)


def options(endpoint: str | None) -> Any:
    """``client_options`` for an API endpoint other than Google's (None: the default)."""
    if not endpoint:
        return None
    from google.api_core.client_options import ClientOptions

    return ClientOptions(api_endpoint=endpoint)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what it wraps (causes, contexts, google-auth's args, RetryError's cause)."""
    seen: list[BaseException] = []
    stack = [exc]
    while stack and len(seen) < 20:
        e = stack.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        stack += [x for x in (e.__cause__, e.__context__, getattr(e, "cause", None)) if isinstance(x, BaseException)]
        stack += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
    return seen


def _kind(exc: BaseException) -> str | None:
    """'hung', 'connect' (refused, DNS, proxy, TLS, connect timeout) or None."""
    import requests

    for e in _chain(exc):
        if isinstance(e, requests.exceptions.ReadTimeout):
            return "hung"
        if isinstance(e, requests.exceptions.ConnectionError):
            return "connect"
    return None


_HOST = re.compile(r"host='([^']{1,100})', port=(\d{1,5})")


def unreachable(exc: BaseException) -> str | None:
    """Why a GCP call could not reach its endpoint, or None when ``exc`` is not a network failure."""
    import requests

    kind = _kind(exc)
    if kind is None:
        return None
    chain = _chain(exc)
    text = " ".join(str(e) for e in chain)
    m = _HOST.search(text)
    where = f"{m.group(1)}:{m.group(2)}" if m else "its endpoint"
    if kind == "hung":
        return f"gcp {where} did not answer {net.waited()}"
    if any(isinstance(e, requests.exceptions.ProxyError) for e in chain):
        return f"cannot reach gcp {where}: the proxy refused or failed"
    if any(isinstance(e, requests.exceptions.SSLError) for e in chain):
        return f"cannot reach gcp {where}: TLS failed"
    if any(isinstance(e, requests.exceptions.ConnectTimeout) for e in chain):
        return f"cannot reach gcp {where}: no connection within {timeout():g} s"
    if "NameResolution" in text or "not known" in text or "getaddrinfo" in text:
        return f"cannot reach gcp {where}: no DNS answer"
    if "refused" in text.lower():
        return f"cannot reach gcp {where}: connection refused"
    return f"cannot reach gcp {where}: the connection failed before an answer"


def retry(throttled: Callable[[BaseException], bool], deadline_s: float = 120.0, initial: float = 1.0) -> Any:
    """A Retry for one call (see the module docstring); its count of failed connections is its own."""
    from google.api_core import retry as gretry

    failed = [0]

    def predicate(exc: BaseException) -> bool:
        d = net.deadline()
        if d is not None and d.expired():
            return False
        kind = _kind(exc)
        if kind == "hung":
            return False
        if kind == "connect":
            failed[0] += 1
            return failed[0] <= net.policy().connect_retries
        return throttled(exc)

    return gretry.Retry(
        predicate=predicate,
        initial=initial,
        maximum=max(initial, 20.0),
        multiplier=2.0,
        timeout=net.remaining(deadline_s),
    )


def translated(exc: BaseException, what: str) -> GpuprovError:
    """Any exception of a GCP call as one line of gpuprov's tree (callers classify what they
    know first: capacity, quota, ...)."""
    if isinstance(exc, GpuprovError):
        return exc
    reason = unreachable(exc)
    if reason is not None:
        return UnreachableError(f"{what}: {reason}")
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    if isinstance(exc, gexc.RetryError):
        return TransientError(f"{what}: GCP kept failing until the retry deadline")
    if isinstance(exc, aexc.DefaultCredentialsError):
        return CredentialsError(
            f"{what}: no GCP credentials found",
            hint="run 'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS",
        )
    if isinstance(exc, aexc.RefreshError):
        return CredentialsError(f"{what}: GCP refused or did not answer the credentials refresh ({type(exc).__name__})")
    if isinstance(exc, gexc.GoogleAPICallError):
        status = getattr(exc, "code", None)
        if status in (429, 500, 502, 503, 504):
            return TransientError(f"{what}: GCP is throttling or unavailable (HTTP {status})")
        if status in (401, 403):
            return CredentialsError(f"{what}: GCP refused the credentials (HTTP {status})")
        return ProvisioningError(f"{what}: GCP error HTTP {status}")
    return ProvisioningError(
        f"{what}: an answer gpuprov does not understand from GCP ({type(exc).__name__})",
        hint="the endpoint may not be Google's (gcp.endpoint, a proxy), or this API changed",
    )
