"""boto3, for every part of gpuprov that talks to AWS.

``load(what)`` imports boto3 and botocore on first use (``gpuprov plan`` never pays for them) and
raises one ``MissingExtraError`` when the ``aws`` extra is not installed. ``config()`` is the one
client configuration (botocore's standard retry mode with jittered backoff on throttling, a
connect and a read timeout, gpuprov's user agent). ``kind(exc)`` classifies an AWS error once,
for the drivers, the price and rate adapters and discovery alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuprov.errors import MissingExtraError

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
MAX_ATTEMPTS = 5

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


def config(
    max_attempts: int = MAX_ATTEMPTS,
    total_max_attempts: int | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    read_timeout: float = READ_TIMEOUT_S,
    max_pool_connections: int | None = None,
) -> Any:
    """The client configuration every AWS client of gpuprov uses: botocore's standard retry mode
    (jittered backoff on throttling), timeouts, gpuprov's user agent."""
    sdk = load()
    retries: dict[str, Any] = {"mode": "standard"}
    if total_max_attempts is not None:
        retries["total_max_attempts"] = total_max_attempts
    else:
        retries["max_attempts"] = max_attempts
    extra: dict[str, Any] = {} if max_pool_connections is None else {"max_pool_connections": max_pool_connections}
    return sdk.Config(
        retries=retries,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        user_agent_extra="gpuprov",
        **extra,
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
