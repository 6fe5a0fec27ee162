"""The Azure SDK for every part of gpuprov that talks to Azure: azure-identity's credential chain,
azure-mgmt-compute and requests loaded on first use, one missing-extra error, typed access, and
the network policy (``sdk/net.py``) in azure-core's own terms:

* ``pipeline()``: the keyword arguments every client and credential takes: azure-core's
  ``RetryPolicy`` (``retry_total`` for throttling and 5xx, ``retry_connect`` = the policy's
  connection retries, ``retry_read=0``: a hung server is not asked again, ``timeout``: the
  command's deadline) and the transport's ``connection_timeout`` and ``read_timeout``;
* ``arm(endpoint)``: those plus ``base_url`` for a configured ARM endpoint (``azure.endpoint``:
  a sovereign cloud, a proxy, a test server);
* ``unreachable(exc)`` names a network failure ("cannot reach azure login.microsoftonline.com:
  the proxy refused or failed", also when it comes wrapped in the credential chain's
  ``ClientAuthenticationError``); ``translated(exc, what)`` is every caller's last resort.
"""

from __future__ import annotations

import re
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

HINT = "pip install 'gpuprov[azure]'"
LOOPBACK = re.compile(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)")


@dataclass(frozen=True)
class Azure:
    credential: Any  # azure.identity.DefaultAzureCredential (the class)
    compute_client: Any  # azure.mgmt.compute.ComputeManagementClient
    models: Any  # azure.mgmt.compute.models
    errors: Any  # azure.core.exceptions
    requests: Any


def load(what: str = "this") -> Azure:
    """The Azure SDK, or one line naming the extra."""
    try:
        import requests
        from azure.core import exceptions
        from azure.identity import DefaultAzureCredential
        from azure.mgmt.compute import ComputeManagementClient, models
    except ImportError:
        raise MissingExtraError(f"{what} needs azure-mgmt-compute, azure-identity and requests", hint=HINT) from None
    import logging

    # the credential chain logs every source it tried at WARNING (a dozen lines on stderr); gpuprov
    # reports a failure itself, in one line
    for name in ("azure.identity", "azure.core.pipeline.policies.http_logging_policy"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return Azure(DefaultAzureCredential, ComputeManagementClient, models, exceptions, requests)


def pipeline() -> dict[str, Any]:
    """azure-core settings for a client or credential made now (see the module docstring)."""
    connect, read = net.timeouts()
    return {
        "retry_total": net.THROTTLE_ATTEMPTS - 1,
        "retry_connect": net.policy().connect_retries,
        "retry_read": 0,
        "retry_backoff_factor": 0.8,
        "timeout": net.remaining(3600.0),
        "connection_timeout": connect,
        "read_timeout": read,
    }


def arm(endpoint: str | None) -> dict[str, Any]:
    """Client settings for ARM at ``endpoint`` (None: Azure's public cloud)."""
    return {**pipeline(), **({"base_url": endpoint} if endpoint else {})}


def call_options(endpoint: str | None) -> dict[str, Any]:
    """Per-call options: a bearer token goes over plain HTTP only to a loopback test endpoint."""
    return {"enforce_https": False} if endpoint and LOOPBACK.match(endpoint) else {}


def credential() -> Any:
    """DefaultAzureCredential with the network policy (its token requests are network calls too)."""
    return load("Azure").credential(**pipeline())


_HOST = re.compile(r"host='([^']{1,100})', port=(\d{1,5})")


def unreachable(exc: BaseException) -> str | None:
    """Why an Azure call could not reach its endpoint, or None when ``exc`` is not a network failure."""
    from azure.core import exceptions as aexc

    text = str(getattr(exc, "message", "") or exc)
    m = _HOST.search(text)
    where = f"{m.group(1)}:{m.group(2)}" if m else "its endpoint"
    lowered = text.lower()
    if isinstance(exc, aexc.ClientAuthenticationError):
        if not any(w in lowered for w in ("connect", "timed out", "ssl", "resolve", "proxy", "refused")):
            return None  # a real refusal of the credentials
    elif not isinstance(exc, aexc.ServiceRequestError | aexc.ServiceResponseError):
        return None
    if "proxy" in lowered:
        return f"cannot reach azure {where}: the proxy refused or failed"
    if "read timed out" in lowered or "read timeout" in lowered:
        return f"azure {where} did not answer {net.waited()}"
    if "ssl" in lowered or "certificate" in lowered:
        return f"cannot reach azure {where}: TLS failed"
    if "resolve" in lowered or "not known" in lowered or "getaddrinfo" in lowered:
        return f"cannot reach azure {where}: no DNS answer"
    if "refused" in lowered:
        return f"cannot reach azure {where}: connection refused"
    if "timed out" in lowered:
        return f"cannot reach azure {where}: no connection within {net.policy().connect_timeout:g} s"
    if isinstance(exc, aexc.ServiceResponseError):
        return f"cannot reach azure {where}: the answer broke off or is not HTTP"
    return f"cannot reach azure {where}: the connection failed ({type(exc).__name__})"


def translated(exc: BaseException, what: str) -> GpuprovError:
    """Any exception of an Azure call as one line of gpuprov's tree (callers classify capacity,
    quota and the like first)."""
    if isinstance(exc, GpuprovError):
        return exc
    from azure.core import exceptions as aexc

    reason = unreachable(exc)
    if reason is not None:
        return UnreachableError(f"{what}: {reason}")
    if isinstance(exc, aexc.ClientAuthenticationError):
        return CredentialsError(
            f"{what}: Azure refused or could not get credentials ({type(exc).__name__})",
            hint="az login, or set AZURE_CLIENT_ID / AZURE_TENANT_ID and a secret or certificate",
        )
    if isinstance(exc, aexc.HttpResponseError) and not isinstance(exc, aexc.DecodeError):
        status = getattr(exc, "status_code", None)
        if status in (408, 429, 500, 502, 503, 504):
            return TransientError(f"{what}: Azure is throttling or unavailable (HTTP {status})")
        return ProvisioningError(f"{what}: Azure error HTTP {status}")
    return ProvisioningError(
        f"{what}: an answer gpuprov does not understand from Azure ({type(exc).__name__})",
        hint="the endpoint may not be Azure's (azure.endpoint, a proxy), or this API changed",
    )
