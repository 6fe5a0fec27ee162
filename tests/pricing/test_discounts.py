"""Negotiated discounts: parsed from the config, applied to offers when read."""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml

from gpuprov.errors import ConfigError
from gpuprov.models import Cloud, Market, Offer
from pricing.discounts import Discounts, apply_discounts, load_discounts, scopes

CONFIG = """
discounts:
  aws: 0.9
  "aws:p4d": 0.8
  "aws:p5.48xlarge": 0.75
  "gcp:a3-megagpu": 0.7
  "gcp:a3": 0.85
  "azure:NCads_A100_v4": 0.88
"""


def offer(cloud: Cloud, itype: str, price: str = "10") -> Offer:
    return Offer(
        cloud=cloud,
        region="r",
        zone=None,
        instance_type=itype,
        gpu="H100",
        gpus_per_instance=8,
        gpu_memory_gib=80,
        vcpus=96,
        memory_gib=Decimal(1024),
        market=Market.ON_DEMAND,
        hourly_usd=Decimal(price),
    )


@pytest.fixture
def discounts() -> Discounts:
    return load_discounts(yaml.safe_load(CONFIG))


@pytest.mark.parametrize(
    ("cloud", "itype", "expected"),
    [
        (Cloud.AWS, "p4d.24xlarge", "8.0"),  # family beats cloud
        (Cloud.AWS, "p5.48xlarge", "7.50"),  # instance type beats family
        (Cloud.AWS, "g5.xlarge", "9.0"),  # cloud-wide
        (Cloud.GCP, "a3-highgpu-8g", "8.50"),
        (Cloud.GCP, "a3-megagpu-8g", "7.0"),  # two-part family beats one-part
        (Cloud.GCP, "a2-highgpu-1g", "10"),  # no discount
        (Cloud.AZURE, "Standard_NC24ads_A100_v4", "8.80"),
        (Cloud.AZURE, "Standard_ND96asr_v4", "10"),
    ],
)
def test_most_specific_factor_wins(discounts: Discounts, cloud: Cloud, itype: str, expected: str) -> None:
    [out] = apply_discounts([offer(cloud, itype)], discounts)
    assert out.hourly_usd == Decimal(expected)
    assert str(out.hourly_usd) == expected  # exact decimal arithmetic, no float detour


def test_inputs_are_left_untouched(discounts: Discounts) -> None:
    original = offer(Cloud.AWS, "p4d.24xlarge", "21.957642")
    [out] = apply_discounts([original], discounts)
    assert original.hourly_usd == Decimal("21.957642")
    assert out.hourly_usd == Decimal("17.5661136")
    assert out.market is original.market and out.instance_type == original.instance_type


def test_no_discounts_section_means_list_prices() -> None:
    empty = load_discounts({"other": 1})
    assert not empty
    assert load_discounts(None).factors == {}
    o = offer(Cloud.AWS, "p4d.24xlarge")
    assert apply_discounts([o], empty) == [o]


def test_scopes() -> None:
    assert scopes(Cloud.AWS, "p4d.24xlarge") == ("p4d.24xlarge", "p4d")
    assert scopes(Cloud.GCP, "a3-megagpu-8g") == ("a3-megagpu-8g", "a3-megagpu", "a3")
    assert scopes(Cloud.AZURE, "Standard_NC24ads_A100_v4") == ("standard_nc24ads_a100_v4", "ncads_a100_v4", "nc")
    assert scopes(Cloud.AZURE, "Standard_ND96asr_v4") == ("standard_nd96asr_v4", "ndasr_v4", "nd")


@pytest.mark.parametrize(
    ("section", "fragment"),
    [
        ({"aws": 0}, "above 0"),
        ({"aws": 1.2}, "at most 1"),
        ({"aws": True}, "not a number"),
        ({"aws": "ten percent"}, "must be a plain decimal number"),
        ({"oracle": 0.9}, "unknown cloud"),
        ({"aws:": 0.9}, "empty family"),
        ({"aws:P4D": 0.9, "aws:p4d": 0.8}, "given twice"),
        ([0.9], "must map"),
    ],
)
def test_bad_config_is_a_config_error(section: object, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_discounts({"discounts": section})
    assert fragment in err.value.message
