"""What plans leave out of the catalog: suspect quotes (unless let in), commitments with no
on-demand price to compare with, "no quote" spot rows; and the as-of span per cloud. On hand-made
offers, against the rules computed by hand."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal as D

from gpuprov import planning, price_quality
from gpuprov.models import Cloud, Market, Offer, SnapshotInfo
from pricing.quality import annotate_all, robust_median


def off(itype: str, market: Market, price: str, region: str = "r1", zone: str | None = "r1-a", **kw: object) -> Offer:
    return Offer(
        cloud=Cloud.AWS,
        region=region,
        zone=None if market.value.startswith("reserved") else zone,
        instance_type=itype,
        gpu="A100-40GB",
        gpus_per_instance=8,
        gpu_memory_gib=40,
        vcpus=96,
        memory_gib=D(1152),
        market=market,
        hourly_usd=D(price),
        **kw,  # type: ignore[arg-type]
    )


def spec(include_suspect: bool = False, gpus: int = 16):  # type: ignore[no-untyped-def]
    s = planning.flags_spec(
        ["A100-40GB"], gpus, planning.flags_workload(8, D("0.5")), None, None, None, "cbc", 0.001, 60
    )
    from dataclasses import replace

    return replace(s, include_suspect=include_suspect)


def test_a_commitment_without_an_on_demand_price_is_kept_but_not_planned() -> None:
    offers = [
        off("p4d.24xlarge", Market.ON_DEMAND, "20"),
        off("p4d.24xlarge", Market.RESERVED_1Y, "13"),
        off("p4de.24xlarge", Market.RESERVED_1Y, "5"),  # far cheaper, but no on-demand p4de in r1
    ]
    request = planning.request_from_spec(spec(), offers)
    assert {(o.instance_type, o.market) for o in request.offers} == {
        ("p4d.24xlarge", Market.ON_DEMAND),
        ("p4d.24xlarge", Market.RESERVED_1Y),
    }
    assert price_quality.screen(spec(), offers).without_alternative == 1
    plan = planning.run(request).plan
    assert {r.offer.instance_type for r in plan.reservations} <= {"p4d.24xlarge"}
    # with an on-demand price in its region it is an alternative again, and the cheapest
    offers.append(off("p4de.24xlarge", Market.ON_DEMAND, "25"))
    plan = planning.run(planning.request_from_spec(spec(), offers)).plan
    assert {r.offer.instance_type for r in plan.reservations} == {"p4de.24xlarge"}


def test_suspect_quotes_are_out_by_default_and_counted() -> None:
    offers = annotate_all(
        [
            off("p4d.24xlarge", Market.ON_DEMAND, "20"),
            off("p4d.24xlarge", Market.SPOT, "2"),  # 10% of on demand: suspect-spot
            off("p4d.24xlarge", Market.SPOT, "9", zone="r1-b"),
        ]
    ).offers
    found = price_quality.screen(spec(), offers)
    assert [o.hourly_usd for o in found.suspect] == [D(2)]
    assert all(o.hourly_usd != D(2) for o in planning.request_from_spec(spec(), offers).offers)
    assert any(o.hourly_usd == D(2) for o in planning.request_from_spec(spec(True), offers).offers)
    assert price_quality.screen(spec(True), offers).suspect == ()


def test_price_quality_solves_again_with_the_suspect_quotes() -> None:
    offers = annotate_all([off("p4d.24xlarge", Market.ON_DEMAND, "20"), off("p4d.24xlarge", Market.SPOT, "2")]).offers
    ctx = planning.flags_context()
    when = datetime(2026, 6, 1, tzinfo=UTC)
    solved = planning.run(planning.request_for(spec(), offers, ctx, when))
    q = price_quality.price_quality(spec(), offers, [], ctx, when, solved)
    assert q.suspect_left_out == 1 and q.suspect_flags == {"suspect-spot": 1}
    # by hand: 16 GPUs, half on spot at most: 1 spot node at $2 + 1 on-demand node at $20
    assert solved.plan.total_cost_usd == D(40)
    assert q.with_suspect_hourly_usd == D(22)


def test_spot_at_or_above_on_demand_is_no_quote() -> None:
    found = annotate_all(
        [
            off("p4d.24xlarge", Market.ON_DEMAND, "20"),
            off("p4d.24xlarge", Market.SPOT, "20"),  # SkyPilot's stand-in: the on-demand price
            off("p4d.24xlarge", Market.SPOT, "21", zone="r1-b", region="r1"),  # above the region's
            off("p4d.24xlarge", Market.SPOT, "19.99", zone="r1-c"),
        ]
    )
    assert sorted(o.hourly_usd for o in found.no_quote) == [D(20), D(21)]
    assert [o.hourly_usd for o in found.offers if o.market is Market.SPOT] == [D("19.99")]


def test_robust_median_trims_what_lies_far_out() -> None:
    assert robust_median([D(1), D(2)]) is None  # too few points
    # plain median of [10, 10, 11, 12, 30, 31, 90] is 12; MAD 2; 30, 31 and 90 are more than 3 MADs out
    assert robust_median([D(x) for x in (10, 10, 11, 12, 30, 31, 90)]) == D("10.5")
    # one type listed in many zones counts once per region: the cheap region does not become the median
    offers = [
        off("p4d.24xlarge", Market.ON_DEMAND, "10", region=f"r{i}", zone=f"z{i}{z}")
        for i in range(3)
        for z in "abcdefgh"
    ]
    offers += [off("p4d.24xlarge", Market.ON_DEMAND, "5", region="cheap", zone="cheap-a")]
    flagged = [o for o in annotate_all(offers).offers if o.flags]
    assert [o.region for o in flagged] == ["cheap"] and flagged[0].flags == ("suspect-on-demand",)


def test_as_of_spans_date_each_offer_by_its_source_row() -> None:
    a, b = datetime(2025, 12, 1, tzinfo=UTC), datetime(2026, 1, 21, tzinfo=UTC)
    offers = [
        off("p4d.24xlarge", Market.ON_DEMAND, "20", as_of=a),
        off("p4d.24xlarge", Market.RESERVED_1Y, "13", as_of=b),
    ]
    snap = SnapshotInfo(1, "x", Cloud.AWS, datetime(2024, 1, 1, tzinfo=UTC), 2, True)
    (r,) = price_quality.as_of_ranges(offers, [snap])
    assert (r.cloud, r.oldest, r.newest) == ("aws", a, b)
    undated = [off("p4d.24xlarge", Market.ON_DEMAND, "20")]
    (r,) = price_quality.as_of_ranges(undated, [snap])
    assert r.oldest == r.newest == snap.fetched_at


def test_export_writes_fractional_sizes_as_their_share_and_reads_them_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from gpuprov.cli import app
    from pricing.gpuprov_csv import read_offers

    out = tmp_path / "all.csv"
    r = CliRunner().invoke(app, ["pricing", "export", "--cloud", "azure", "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    with open(out, encoding="utf-8") as fh:
        rows = list(read_offers(fh, "all.csv"))
    nv4 = [o for o in rows if o.instance_type == "Standard_NV4as_v4"]
    assert nv4 and {(o.gpus_per_instance, o.gpu_fraction, o.gpu_memory_gib) for o in nv4} == {(0, D("0.125"), 16)}
    nc8 = {(o.gpus_per_instance, o.gpu_fraction) for o in rows if o.instance_type == "Standard_NC8ads_A10_v4"}
    assert nc8 == {(0, D("0.5"))}
    assert all(o.as_of == datetime(2026, 5, 20, tzinfo=UTC) for o in rows)
    text = out.read_text(encoding="utf-8").splitlines()
    assert text[0].endswith(",gpu_fraction,as_of")
    assert any(
        line.startswith("azure,") and ",Standard_NV4as_v4,MI25,0,16," in line and ",0.125," in line for line in text
    )
