"""The Azure SDK for every part of gpuprov that talks to Azure: azure-identity's credential chain,
azure-mgmt-compute and requests loaded on first use, one missing-extra error, typed access."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprov.errors import MissingExtraError

HINT = "pip install 'gpuprov[azure]'"


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
