"""Cloud SDKs load only when a source fetches; a missing one is a MissingExtraError naming the extra."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuprov.errors import MissingExtraError
from gpuprov.models import Cloud
from pricing.aws import AwsPriceSource
from pricing.azure import AzurePriceSource
from pricing.gcp import GcpPriceSource
from pricing.refresh import default_sources

SDK_ROOTS = ("boto3", "botocore", "azure", "moto", "requests")


def test_importing_the_pricing_modules_loads_no_cloud_sdk() -> None:
    code = (
        "import json, sys\n"
        "import pricing.aws, pricing.gcp, pricing.azure, pricing.refresh, pricing.discounts, pricing.validate\n"
        "from pricing.refresh import default_sources\n"
        "sources = default_sources()\n"
        "print(json.dumps([sorted(sys.modules), [s.cloud.value for s in sources]]))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules, clouds = json.loads(run.stdout.strip().splitlines()[-1])
    loaded = [
        m
        for m in modules
        if m.split(".")[0] in SDK_ROOTS or m.startswith(("google.cloud", "google.api_core", "google.auth"))
    ]
    assert loaded == []
    assert clouds == ["aws", "gcp", "azure"]
    assert "pricing.aws" in modules and "pricing.gcp" in modules  # the probe really imported them


def test_default_sources_by_cloud() -> None:
    assert [s.cloud for s in default_sources([Cloud.AZURE])] == [Cloud.AZURE]


@pytest.mark.parametrize(
    ("blocked", "source", "extra"),
    [
        ("boto3", AwsPriceSource(["us-east-1"]), "aws"),
        ("google.cloud.billing_v1", GcpPriceSource(project="p"), "gcp"),
        ("azure.mgmt.compute", AzurePriceSource("sub"), "azure"),
    ],
)
def test_a_missing_sdk_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, blocked: str, source: object, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)  # "import blocked" now raises ImportError
    parent, _, child = blocked.rpartition(".")
    if parent in sys.modules:  # and "from parent import child" too
        monkeypatch.delattr(sys.modules[parent], child, raising=False)
    with pytest.raises(MissingExtraError) as err:
        source.fetch()  # type: ignore[attr-defined]
    assert err.value.hint == f"pip install 'gpuprov[{extra}]'"
    assert err.value.exit_code == 2
