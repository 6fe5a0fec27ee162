"""The Google Cloud SDK for every part of gpuprov that talks to GCP: google-cloud-compute (and
google-cloud-billing for prices) loaded on first use, one missing-extra error, typed access
(no string look-ups)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprov.errors import MissingExtraError

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
