"""The cloud SDK adaptors (sdk/): one missing-extra error per cloud, and AWS errors classified once
for the drivers, the price and rate adapters and discovery."""

from __future__ import annotations

import sys

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from gpuprov.errors import MissingExtraError
from sdk import aws, azure, gcp


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("InsufficientInstanceCapacity", 500, aws.ErrorKind.CAPACITY),  # capacity wins over the 5xx status
        ("VcpuLimitExceeded", 400, aws.ErrorKind.QUOTA),
        ("UnauthorizedOperation", 403, aws.ErrorKind.AUTH),
        ("AccessDeniedException", 400, aws.ErrorKind.AUTH),
        ("RequestLimitExceeded", 503, aws.ErrorKind.TRANSIENT),
        ("SomethingNew", 502, aws.ErrorKind.TRANSIENT),
        ("OptInRequired", 401, aws.ErrorKind.OTHER),  # a region not enabled: the request's own failure
        ("InvalidParameterValue", 400, aws.ErrorKind.OTHER),
    ],
)
def test_aws_errors_are_classified_once(code: str, status: int, kind: aws.ErrorKind) -> None:
    assert aws.kind(client_error(code, status)) is kind
    assert aws.code_of(client_error(code, status)) == code


def test_aws_transport_and_credential_failures() -> None:
    assert aws.kind(NoCredentialsError()) is aws.ErrorKind.AUTH
    assert aws.kind(EndpointConnectionError(endpoint_url="https://x")) is aws.ErrorKind.TRANSIENT
    assert aws.kind(ValueError("x")) is aws.ErrorKind.OTHER
    assert aws.code_of(client_error("x" * 500)) == "x" * 80  # bounded: it reaches error lines


def test_one_client_configuration() -> None:
    cfg = aws.config(max_pool_connections=7)
    assert cfg.retries == {"mode": "standard", "total_max_attempts": aws.MAX_ATTEMPTS}
    assert (cfg.connect_timeout, cfg.read_timeout, cfg.max_pool_connections) == (5, 20, 7)  # sdk/net.py
    assert "gpuprov" in cfg.user_agent_extra
    assert aws.config(total_max_attempts=1).retries == {"mode": "standard", "total_max_attempts": 1}


@pytest.mark.parametrize(
    ("module", "load", "blocked", "extra"),
    [
        (aws, lambda: aws.load("the AWS driver"), "boto3", "aws"),
        (gcp, lambda: gcp.load("GCP discovery"), "google.auth", "gcp"),  # (an attribute once imported)
        (azure, lambda: azure.load("the Azure driver"), "azure.identity", "azure"),
    ],
)
def test_a_missing_sdk_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: object, load: object, blocked: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)  # import of it raises ImportError
    with pytest.raises(MissingExtraError) as err:
        load()  # type: ignore[operator]
    assert "\n" not in err.value.message and f"gpuprov[{extra}]" in (err.value.hint or "")
