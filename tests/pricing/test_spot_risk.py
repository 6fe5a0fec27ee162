"""Spot interruption rates: AWS pools from the bundled Spot Instance Advisor file, defaults elsewhere.

The expectations are read from the JSON file here, independently of pricing.spot_risk.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from gpuprov.models import DEFAULT_INTERRUPTIONS_PER_HOUR
from pricing.spot_risk import DEFAULTS, aws_interruptions_per_hour
from tests.conftest import ROOT

# The documented mapping: a bucket's midpoint share of a 730-hour month.
MIDPOINT = {"<5%": "0.025", "5-10%": "0.075", "10-15%": "0.125", "15-20%": "0.175", ">20%": "0.25"}


def _file() -> dict[str, Any]:
    with open(ROOT / "pricing" / "data" / "spot-advisor.json", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _label(data: dict[str, Any], bucket: int) -> str:
    [label] = [r["label"] for r in data["ranges"] if r["index"] == bucket]
    return str(label)


def _linux_pools(data: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [
        (region, itype, pool["r"])
        for region, by_os in data["spot_advisor"].items()
        for itype, pool in by_os.get("Linux", {}).items()
    ]


@pytest.mark.parametrize(
    ("region", "itype"),
    [
        ("us-east-1", "g5.xlarge"),  # >20%
        ("us-east-1", "p4d.24xlarge"),  # 10-15%
        ("ca-central-1", "p5.48xlarge"),  # <5% (and a negative saving: the rate does not care)
        ("me-central-1", "g5.2xlarge"),  # Linux >20% where Windows is <5%: Linux is read
    ],
)
def test_a_pool_gets_its_buckets_midpoint_rate_and_label(region: str, itype: str) -> None:
    data = _file()
    bucket = data["spot_advisor"][region]["Linux"][itype]["r"]
    label = _label(data, bucket)
    got = aws_interruptions_per_hour(region, itype)
    assert got == (Decimal(MIDPOINT[label]) / 730, f"aws-spot-advisor:{label} bundled 2025-06-28")


def test_the_linux_pool_is_read_not_windows() -> None:
    data = _file()
    pool = data["spot_advisor"]["me-central-1"]
    assert pool["Linux"]["g5.2xlarge"]["r"] != pool["Windows"]["g5.2xlarge"]["r"]
    assert aws_interruptions_per_hour("me-central-1", "g5.2xlarge") == (
        Decimal("0.25") / 730,
        "aws-spot-advisor:>20% bundled 2025-06-28",
    )


def test_pools_the_advisor_does_not_list_have_no_rate() -> None:
    assert aws_interruptions_per_hour("us-east-1", "m5.large") is None
    assert aws_interruptions_per_hour("xx-nowhere-1", "g5.xlarge") is None


def test_the_distribution_matches_the_file() -> None:
    data = _file()
    pools = _linux_pools(data)
    assert len(pools) > 500
    expected = Counter(_label(data, r) for _, _, r in pools)
    got: Counter[str] = Counter()
    for region, itype, _ in pools:
        answer = aws_interruptions_per_hour(region, itype)
        assert answer is not None
        rate, source = answer
        label = source.removeprefix("aws-spot-advisor:").removesuffix(" bundled 2025-06-28")
        assert rate == Decimal(MIDPOINT[label]) / 730
        got[label] += 1
    assert got == expected
    # the share of GPU pools under 5 % a month, as the file has it
    under_5 = sum(1 for _, _, r in pools if r == 0) / len(pools)
    assert got["<5%"] / len(pools) == pytest.approx(under_5)
    assert 0.2 < under_5 < 0.3  # 179 of 682 pools in the bundled file


def test_defaults_for_gcp_and_azure_are_the_models() -> None:
    assert dict(DEFAULTS) == {c: DEFAULT_INTERRUPTIONS_PER_HOUR[c] for c in ("gcp", "azure")}


def test_the_file_is_read_lazily_and_once() -> None:
    code = (
        "import pricing.spot_risk as s\n"
        "before = s._advisor.cache_info().currsize\n"
        "s.aws_interruptions_per_hour('us-east-1', 'g5.xlarge')\n"
        "s.aws_interruptions_per_hour('us-west-2', 'g6.xlarge')\n"
        "info = s._advisor.cache_info()\n"
        "print(before, info.currsize, info.misses)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert run.stdout.split() == ["0", "1", "1"]
