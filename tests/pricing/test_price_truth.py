"""Price truth over the whole bundled catalog (rules in tests/pricing/truth.py, written apart from
the build script and the reader):

* every GCP a2/a3/a4/g2 offer equals its machine type's price in the GCP list (Cyclenerd's
  per-region composition of Billing Catalog SKUs: cores + RAM + GPUs + bundled Local SSD), or the
  list price of the type GCP bills it as, to the cent; or it is excepted with its reason;
* the list's A3 High prices are the raw Billing SKUs (A3 core, A3 RAM, H100 GPU) plus one Local SSD
  rate per region and term, the same for every size;
* sanity rules over every offer as plans read it; failures only where data/sources/PRICE-EXCEPTIONS.csv
  (reviewed, each row naming its source) says why.
"""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from gpuprov.models import Cloud, Market, Offer
from pricing.quality import annotate_all
from pricing.snapshot import load_bundled
from tests.pricing import truth


@pytest.fixture(scope="module")
def raw() -> list[Offer]:
    return [o for s in load_bundled() for o in s.offers]


@pytest.fixture(scope="module")
def read(raw: list[Offer]) -> list[Offer]:
    return annotate_all(raw).offers


def _unexcepted(failures: list[truth.Failure]) -> list[truth.Failure]:
    rules = truth.exceptions()
    return [f for f in failures if not any(e.covers(f) for e in rules)]


def test_every_gcp_accelerator_optimized_offer_equals_its_composition_or_is_excepted(raw: list[Offer]) -> None:
    gcp = [o for o in raw if o.cloud is Cloud.GCP and truth.GCP_FAMILIES.match(o.instance_type)]
    assert len(gcp) > 1500
    failures = truth.gcp_composition(gcp)
    assert not _unexcepted(failures), "\n".join(map(str, _unexcepted(failures)[:20]))
    # what is excepted is only what no composition prices: a4, a3-ultragpu, a3-megagpu off the list
    assert {f.instance_type for f in failures} <= {
        "a4-highgpu-8g",
        "a3-ultragpu-8g",
        "a3-ultragpu-8g-nolssd",
        "a3-megagpu-8g",
    }
    composed = len(gcp) - len(failures)
    assert composed > 0.95 * len(gcp)
    # the issue's case: a3-edgegpu-8g in us-central1 is the H100 SKUs' price, not anycloud's $43.07
    edge = [
        o for o in raw if (o.instance_type, o.region, o.market) == ("a3-edgegpu-8g", "us-central1", Market.ON_DEMAND)
    ]
    assert edge and {o.hourly_usd.quantize(D("0.01")) for o in edge} == {D("88.49")}


def test_sizes_gcp_sells_only_as_spot_carry_spot_only(raw: list[Offer]) -> None:
    small = [o for o in raw if o.instance_type in ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g")]
    assert small and {o.market for o in small} == {Market.SPOT}
    eight = {o.market for o in raw if o.instance_type == "a3-highgpu-8g"}
    assert eight == set(Market)


def test_a3_high_list_prices_are_the_billing_skus_plus_one_local_ssd_rate(raw: list[Offer]) -> None:
    """List − (vCPUs x A3 core SKU + GB x A3 RAM SKU + GPUs x H100 SKU) per GiB-month of bundled
    Local SSD: one value per region and term across every A3 High size and zone (and A3 Edge).
    The values are GCP's Local SSD rates: $0.080 (Iowa, Oregon, S. Carolina) and $0.088 (Virginia,
    Netherlands) per GiB-month on demand, 63% of that for 1 year and 45% for 3 years. Spot is not
    checked: the SKU extract is of 2024-09-16 and spot prices moved since."""
    residuals = truth.a3_sku_residuals(o for o in raw if o.market is not Market.SPOT)
    assert len(residuals) >= 12
    on_demand = {"us-central1": D("0.080"), "us-west1": D("0.080"), "us-east4": D("0.088"), "europe-west4": D("0.088")}
    share = {"on_demand": D(1), "reserved_1y": D("0.63"), "reserved_3y": D("0.45")}
    for (region, market), values in residuals.items():
        assert len(values) == 1, (region, market, values)
        base = on_demand.get(region, D("0.080"))
        assert abs(values.pop() - base * share[market]) <= D("0.0001"), (region, market)


def test_sanity_rules_pass_over_the_bundle_with_reviewed_exceptions(read: list[Offer]) -> None:
    failures = truth.sanity(read)
    assert not _unexcepted(failures), "\n".join(map(str, _unexcepted(failures)[:20]))


def test_every_exception_names_a_source_and_still_excuses_something(raw: list[Offer], read: list[Offer]) -> None:
    failures = truth.gcp_composition(raw) + truth.sanity(read)
    for e in truth.exceptions():
        assert e.reason.strip() and e.source.strip(), e
        assert any(e.covers(f) for f in failures), f"stale exception: {e}"


def test_the_reader_drops_exactly_the_no_quote_rows(raw: list[Offer]) -> None:
    """Raw spot rows at or above their location's on-demand price are what annotate drops, no more."""
    raw_failures = {
        (f.cloud, f.region, f.zone, f.instance_type) for f in truth.sanity(raw) if f.rule == "spot-below-on-demand"
    }
    dropped = annotate_all(raw).no_quote
    assert raw_failures and {(o.cloud.value, o.region, o.zone or "", o.instance_type) for o in dropped} == raw_failures
    azure_h200 = [o for o in dropped if o.instance_type == "Standard_ND96isr_H200_v5"]
    assert len(azure_h200) == 28  # spot equal to on demand in all 28 regions: no quote


def _o(itype: str, market: Market, price: str, vcpus: int = 96, gpus: int = 8, region: str = "r") -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region=region,
        zone=None,
        instance_type=itype,
        gpu="A100-40GB",
        gpus_per_instance=gpus,
        gpu_memory_gib=40,
        vcpus=vcpus,
        memory_gib=D(vcpus * 12),
        market=market,
        hourly_usd=D(price),
    )


def test_each_sanity_rule_fails_on_a_row_that_breaks_it() -> None:
    od = _o("p4d.24xlarge", Market.ON_DEMAND, "20")
    cases = {
        "spot-below-on-demand": [od, _o("p4d.24xlarge", Market.SPOT, "20")],
        "commitment-below-on-demand": [od, _o("p4d.24xlarge", Market.RESERVED_1Y, "21")],
        "commitment-ratio": [od, _o("p4d.24xlarge", Market.RESERVED_1Y, "19")],  # 95%: no real discount
        "3y-below-1y": [
            od,
            _o("p4d.24xlarge", Market.RESERVED_1Y, "11.5"),
            _o("p4d.24xlarge", Market.RESERVED_3Y, "11.9"),
        ],
        "per-gpu-linear": [od, _o("p4d.12xlarge", Market.ON_DEMAND, "13", vcpus=48, gpus=4)],  # 6.5 vs 2.5 per GPU
    }
    for rule, offers in cases.items():
        assert rule in {f.rule for f in truth.sanity(offers)}, rule
    fine = [
        od,
        _o("p4d.24xlarge", Market.RESERVED_1Y, "13"),
        _o("p4d.24xlarge", Market.RESERVED_3Y, "8"),
        _o("p4d.24xlarge", Market.SPOT, "8"),
        _o("p4d.12xlarge", Market.ON_DEMAND, "10", vcpus=48, gpus=4),
    ]
    assert truth.sanity(fine) == []
