"""Row validation: every unusable price is counted by reason and never passed on."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuprov.models import Cloud, Market, Offer
from pricing import validate


def offer(
    price: str,
    market: Market = Market.ON_DEMAND,
    zone: str | None = "use1-az1",
    currency: str = "USD",
    itype: str = "p4d.24xlarge",
) -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region="us-east-1",
        zone=zone,
        instance_type=itype,
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=Decimal(1152),
        market=market,
        hourly_usd=Decimal(price),
        currency=currency,
    )


def test_to_price_keeps_decimal_text_exact_and_refuses_floats() -> None:
    assert validate.to_price("21.9576420000") == Decimal("21.957642")
    assert str(validate.to_price("0.1")) == "0.1"
    assert validate.to_price(None) is None
    assert validate.to_price("  ") is None
    nan = validate.to_price("n/a")
    assert nan is not None and nan.is_nan()
    with pytest.raises(TypeError):
        validate.to_price(0.1)


@pytest.mark.parametrize(
    ("price", "currency", "reason"),
    [
        ("NaN", "USD", validate.NOT_FINITE),
        ("Infinity", "USD", validate.NOT_FINITE),
        ("-0.5", "USD", validate.NEGATIVE),
        ("0", "USD", validate.ZERO),
        ("0.0000000000", "USD", validate.ZERO),
        ("1.5", "EUR", validate.CURRENCY),
    ],
)
def test_each_bad_price_is_skipped_by_reason(price: str, currency: str, reason: str) -> None:
    good = offer("21.957642")
    kept, skipped = validate.check_offers([good, offer(price, currency=currency)])
    assert kept == [good]
    assert skipped == {reason: 1}


def test_missing_price_reason() -> None:
    assert validate.price_problem(None) == validate.MISSING
    assert validate.price_problem(Decimal("0.01")) is None


def test_spot_above_on_demand_by_more_than_the_factor_is_skipped() -> None:
    od = offer("10")
    at_limit = offer("15", Market.SPOT)
    above = offer("15.0001", Market.SPOT, zone="use1-az1", itype="p4d.24xlarge")
    other_zone = offer("40", Market.SPOT, zone="use1-az2")  # no on-demand reference there: kept
    kept, skipped = validate.check_offers([od, at_limit, above, other_zone])
    assert kept == [od, at_limit, other_zone]
    assert skipped == {validate.SPOT_ABOVE_ON_DEMAND: 1}


def test_spot_factor_is_configurable() -> None:
    od, spot = offer("10"), offer("12", Market.SPOT)
    assert validate.check_offers([od, spot], Decimal("1.1"))[1] == {validate.SPOT_ABOVE_ON_DEMAND: 1}
    assert validate.check_offers([od, spot], Decimal("1.5"))[1] == {}


def test_spot_compares_with_the_regional_on_demand_price_when_its_zone_has_none() -> None:
    regional_od = offer("10", zone=None)
    spot = offer("16", Market.SPOT, zone="use1-az3")
    kept, skipped = validate.check_offers([regional_od, spot])
    assert kept == [regional_od]
    assert skipped[validate.SPOT_ABOVE_ON_DEMAND] == 1


def test_an_invalid_on_demand_price_is_no_reference_for_spot() -> None:
    kept, skipped = validate.check_offers([offer("0"), offer("3", Market.SPOT)])
    assert [o.market for o in kept] == [Market.SPOT]
    assert skipped == {validate.ZERO: 1}
