"""boto3, for every part of gpuprov that talks to AWS.

``load(what)`` imports boto3 and botocore on first use (``gpuprov plan`` never pays for them) and
raises one ``MissingExtraError`` when the ``aws`` extra is not installed. ``client(session,
service, region)`` makes every AWS client gpuprov uses, with the one network policy
(``sdk/net.py``): botocore's standard retry mode (jittered backoff on throttling and 5xx, at most
``THROTTLE_ATTEMPTS`` attempts), the policy's connect and read timeouts cut to the command's
deadline, and a ``needs-retry`` hook that stops botocore retrying a failed connection after
``connect_retries`` retries, a read timeout at once (a hung server) and anything once the
deadline has passed. ``kind(exc)`` classifies an AWS error once, for the drivers, the price and
rate adapters and discovery alike; ``unreachable(exc, client)`` names a network failure
("cannot reach aws ec2.us-east-1.amazonaws.com: connection refused") and ``translated(exc,
what, client)`` turns any exception of a call into one line of gpuprov's error tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuprov.errors import (
    ConfigError,
    CredentialsError,
    GpuprovError,
    MissingExtraError,
    ProvisioningError,
    TransientError,
    UnreachableError,
)
from sdk import net

MAX_ATTEMPTS = net.THROTTLE_ATTEMPTS

CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "InsufficientCapacityOnOutpost",
        "Unsupported",
        "SpotMaxPriceTooLow",
        "InsufficientReservedInstanceCapacity",
    }
)
QUOTA_CODES = frozenset(
    {
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "SpotInstanceRequestLimitExceeded",
    }
)
AUTH_CODES = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "AccessDenied",
        "AccessDeniedException",
        "UnrecognizedClientException",
    }
)
# OptInRequired (a region the account has not enabled) is not a credentials problem: it is the
# request's own failure (discovery notes the region and goes on)
THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ServiceUnavailable",
        "InternalError",
        "Unavailable",
    }
)


class ErrorKind(StrEnum):
    CAPACITY = "capacity"  # no capacity in this pool now
    QUOTA = "quota"  # an account limit
    AUTH = "auth"  # credentials missing, refused or expired
    TRANSIENT = "transient"  # throttled or the service failed: retried already, try again later
    OTHER = "other"  # the request itself was refused


@dataclass(frozen=True)
class Aws:
    boto3: Any
    botocore: Any  # the package, with config, exceptions, session and utils imported
    exceptions: Any  # botocore.exceptions
    Config: Any  # botocore.config.Config


def load(what: str = "this") -> Aws:
    """boto3 and botocore, or one line saying which extra to install."""
    try:
        import boto3
        import botocore.config
        import botocore.exceptions
        import botocore.session
        import botocore.utils
    except ImportError:
        raise MissingExtraError(f"{what} needs boto3", hint="pip install 'gpuprov[aws]'") from None
    return Aws(boto3, botocore, botocore.exceptions, botocore.config.Config)


CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_ENDPOINT_URL",
)


def configured(section: dict[str, Any] | None = None) -> bool:
    """Whether this machine has AWS to ask, without a network call: the config's ``aws`` section,
    the SDK's environment variables, or its credentials and config files."""
    import os
    from pathlib import Path

    home = Path.home()
    return bool(
        section
        or any(os.environ.get(k) for k in CREDENTIAL_ENV)
        or (home / ".aws" / "credentials").exists()
        or (home / ".aws" / "config").exists()
    )


def config(
    max_attempts: int = MAX_ATTEMPTS,
    total_max_attempts: int | None = None,
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    max_pool_connections: int | None = None,
) -> Any:
    """The client configuration every AWS client of gpuprov uses: botocore's standard retry mode
    (jittered backoff on throttling), the network policy's timeouts (cut to the deadline),
    gpuprov's user agent."""
    sdk = load()
    retries: dict[str, Any] = {"mode": "standard"}
    if total_max_attempts is not None:
        retries["total_max_attempts"] = total_max_attempts
    else:
        retries["total_max_attempts"] = max_attempts
    connect, read = net.timeouts()
    extra: dict[str, Any] = {} if max_pool_connections is None else {"max_pool_connections": max_pool_connections}
    return sdk.Config(
        retries=retries,
        connect_timeout=min(connect, connect_timeout) if connect_timeout is not None else connect,
        read_timeout=min(read, read_timeout) if read_timeout is not None else read,
        user_agent_extra="gpuprov",
        **extra,
    )


def client(session: Any, service: str, region: str, config_: Any = None, **settings: Any) -> Any:
    """An AWS client with the network policy (see the module docstring); an endpoint URL that is
    not one (``AWS_ENDPOINT_URL``) is a ConfigError, not a traceback."""
    sdk = load()
    try:
        made = session.client(service, region_name=region, config=config_ or config(**settings))
    except ValueError:
        raise ConfigError(
            f"the AWS endpoint for {service} in {region[:40]} is not a valid URL",
            hint="check AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_<SERVICE> and the profile's endpoint_url",
        ) from None
    except sdk.exceptions.BotoCoreError as exc:
        raise ConfigError(f"cannot make an AWS {service} client: {type(exc).__name__}") from None
    made.meta.events.register_first(f"needs-retry.{made.meta.service_model.service_id.hyphenize()}", _needs_retry)
    return made


def _needs_retry(attempts: int = 1, caught_exception: Any = None, **_kwargs: Any) -> None:
    """botocore's retry, bounded by the network policy: raising here ends the call with that
    error; returning None leaves the decision to botocore's standard retry handler."""
    if caught_exception is None:
        return
    sdk = load()
    exc = sdk.exceptions
    deadline = net.deadline()
    if deadline is not None and deadline.expired():
        raise caught_exception
    if isinstance(caught_exception, exc.ReadTimeoutError):
        raise caught_exception  # the server took the request and said nothing: hung, do not ask again
    if isinstance(caught_exception, exc.ConnectionError | exc.ConnectionClosedError) and (
        attempts > net.policy().connect_retries
    ):
        raise caught_exception


def endpoint_of(client_: Any) -> str:
    """The host a client talks to, for error lines."""
    url = str(getattr(getattr(client_, "meta", None), "endpoint_url", "") or "")
    return host_of(url) or "its endpoint"


def host_of(url: str) -> str:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return ""
    return f"{host}{port}"[:120]


def unreachable(exc: BaseException, client_: Any = None) -> str | None:
    """Why an AWS call could not reach its endpoint (a message for ``UnreachableError``), or None
    when ``exc`` is not a network failure."""
    sdk = load()
    e = sdk.exceptions
    kwargs = getattr(exc, "kwargs", {}) or {}
    where = host_of(str(kwargs.get("endpoint_url") or "")) or endpoint_of(client_)
    if isinstance(exc, e.ProxyConnectionError):
        proxy = host_of(str(kwargs.get("proxy_url") or "")) or "the proxy"
        return f"cannot reach aws {where}: the proxy {proxy} refused or failed"
    if isinstance(exc, e.SSLError):
        return f"cannot reach aws {where}: TLS failed"
    if isinstance(exc, e.ConnectTimeoutError):
        return f"cannot reach aws {where}: no connection within {net.policy().connect_timeout:g} s"
    if isinstance(exc, e.ReadTimeoutError):
        return f"aws {where} did not answer {net.waited()}"
    if isinstance(exc, e.EndpointConnectionError):
        text = str(kwargs.get("error", "")).lower()
        why = "no DNS answer" if ("name" in text and "resol" in text) or "not known" in text else "connection refused"
        return f"cannot reach aws {where}: {why}"
    if isinstance(exc, e.ConnectionClosedError):
        return f"cannot reach aws {where}: the connection closed before an answer"
    if isinstance(exc, e.ConnectionError | e.HTTPClientError):
        return f"cannot reach aws {where}: {type(exc).__name__}"
    return None


def translated(exc: BaseException, what: str, client_: Any = None) -> GpuprovError:
    """Any exception of an AWS call as one line of gpuprov's tree (the drivers' last resort:
    what they classify themselves comes first)."""
    if isinstance(exc, GpuprovError):
        return exc
    sdk = load()
    reason = unreachable(exc, client_)
    if reason is not None:
        return UnreachableError(f"{what}: {reason}")
    if isinstance(exc, sdk.exceptions.NoCredentialsError | sdk.exceptions.PartialCredentialsError):
        return CredentialsError(
            "no AWS credentials found", hint="configure a profile, environment variables or an instance role"
        )
    if isinstance(exc, sdk.exceptions.ClientError):
        found = kind(exc)
        if found is ErrorKind.AUTH:
            return CredentialsError(f"AWS refused the credentials for {what}: {code_of(exc)}")
        if found is ErrorKind.TRANSIENT:
            return TransientError(f"AWS {what} kept failing after retries: {code_of(exc)}")
        return ProvisioningError(f"AWS {what} failed: {code_of(exc)}")
    where = endpoint_of(client_)
    return ProvisioningError(
        f"AWS {what}: an answer gpuprov does not understand from {where} ({type(exc).__name__})",
        hint="the endpoint may not be AWS (AWS_ENDPOINT_URL, a proxy), or this API changed",
    )


def code_of(exc: Any) -> str:
    """The AWS error code of a ClientError, bounded (it reaches error lines)."""
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))[:80]


def status_of(exc: Any) -> int:
    response = getattr(exc, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status if isinstance(status, int) else 0


def kind(exc: Any) -> ErrorKind:
    """What an AWS error means for gpuprov: one classification for every caller."""
    sdk = load()
    if isinstance(exc, sdk.exceptions.NoCredentialsError):
        return ErrorKind.AUTH
    if isinstance(exc, sdk.exceptions.ClientError):
        code = code_of(exc)
        if code in QUOTA_CODES:
            return ErrorKind.QUOTA
        if code in CAPACITY_CODES:
            return ErrorKind.CAPACITY
        if code in AUTH_CODES:
            return ErrorKind.AUTH
        if code in THROTTLE_CODES or status_of(exc) >= 500:
            return ErrorKind.TRANSIENT
        return ErrorKind.OTHER
    if isinstance(exc, sdk.exceptions.BotoCoreError):
        return ErrorKind.TRANSIENT
    return ErrorKind.OTHER
