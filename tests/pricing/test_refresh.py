"""Refresh orchestration: concurrent sources, one snapshot per cloud, failures keep the old one current."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import responses
from google.auth.credentials import AnonymousCredentials
from moto import mock_aws
from responses import matchers

from gpuprov.errors import PricingError
from gpuprov.models import Cloud, Market, Offer
from gpuprov.store.catalog import Catalog
from pricing import validate
from pricing.aws import AwsPriceSource
from pricing.azure import AzurePriceSource
from pricing.base import (
    EmptyResultError,
    FetchContext,
    FetchResult,
    PriceSource,
    ProgressEvent,
    SourceError,
    SourceTimeoutError,
)
from pricing.gcp import GcpPriceSource
from pricing.refresh import RefreshError, refresh
from tests.pricing import fakes

BEFORE = datetime(2026, 1, 1, tzinfo=UTC)


def offer(
    cloud: Cloud,
    gpu: str = "H100",
    market: Market = Market.ON_DEMAND,
    price: str = "10",
    zone: str | None = "z1",
    itype: str = "box.8x",
    currency: str = "USD",
) -> Offer:
    return Offer(
        cloud=cloud,
        region="r1",
        zone=zone,
        instance_type=itype,
        gpu=gpu,
        gpus_per_instance=8,
        gpu_memory_gib=80,
        vcpus=96,
        memory_gib=Decimal(1024),
        market=market,
        hourly_usd=Decimal(price),
        currency=currency,
    )


class FakeSource:
    """A source that returns given offers, raises, or blocks until released."""

    def __init__(
        self,
        cloud: Cloud,
        offers: list[Offer] | None = None,
        error: BaseException | None = None,
        block: threading.Event | None = None,
        skipped: dict[str, int] | None = None,
    ) -> None:
        self.cloud, self.name = cloud, f"fake:{cloud.value}"
        self.offers, self.error, self.block, self.skipped = offers or [], error, block, skipped or {}
        self.gpus: Collection[str] | None = None

    def fetch(self, gpus: Collection[str] | None = None, ctx: FetchContext | None = None) -> FetchResult:
        assert ctx is not None
        self.gpus = gpus
        ctx.expect(2)
        for _ in range(2):
            ctx.submit(ctx.request_done).result()
        if self.block is not None:
            self.block.wait(10)
            ctx.check()
        if self.error is not None:
            raise self.error
        kept = [o for o in self.offers if gpus is None or o.gpu in gpus]
        return FetchResult(kept, Counter(self.skipped), ctx.requests)


def previous(catalog: Catalog, *clouds: Cloud) -> dict[Cloud, int]:
    """Store an older snapshot per cloud; their ids."""
    return {
        c: catalog.add_snapshot("bundled:test", c, BEFORE, [offer(c, "A100-40GB", price="5"), offer(c)]).id
        for c in clouds
    }


def current(catalog: Catalog) -> dict[Cloud, int]:
    return {s.cloud: s.id for s in catalog.snapshots(current_only=True)}


@pytest.fixture
def catalog() -> Catalog:
    return Catalog()


@pytest.fixture
def local_fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[responses.RequestsMock]:
    """Every cloud's fake at once: moto + replay hooks for AWS, recorded HTTP for GCP and Azure."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("GPUPROV_AZURE_PRICES_URL", raising=False)
    with mock_aws(), responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        fakes.register_gcp(rsps)
        yield rsps


def live_sources() -> list[PriceSource]:
    return [
        AwsPriceSource(["us-east-1", "us-west-2"], fakes.aws_session()),
        GcpPriceSource(project=fakes.GCP_PROJECT, credentials=AnonymousCredentials(), retry_initial=0.01),
        AzurePriceSource(fakes.AZURE_SUBSCRIPTION, fakes.FakeCredential(), sleep=lambda _s: None),
    ]


def test_full_refresh_of_all_three_clouds(catalog: Catalog, local_fakes: responses.RequestsMock) -> None:
    fakes.register_azure(local_fakes)
    old = previous(catalog, *Cloud)
    events: list[ProgressEvent] = []
    result = refresh(live_sources(), catalog, progress=events.append, max_workers=8)
    assert result.ok, result.failures
    now = current(catalog)
    assert set(now) == set(Cloud) and all(now[c] != old[c] for c in Cloud)
    reserved = catalog.offers(["A100-40GB", "A100-80GB", "H100", "L4", "T4", "A10G"], markets=[Market.RESERVED_1Y])
    by_cloud = {c: [o for o in reserved if o.cloud is c] for c in Cloud}
    assert all(by_cloud.values()), {c: len(v) for c, v in by_cloud.items()}
    aws = {(o.region, o.instance_type): o.hourly_usd for o in by_cloud[Cloud.AWS]}
    assert aws[("us-east-1", "p4d.24xlarge")] == Decimal("13.921094")
    gcp = {(o.region, o.instance_type): o.hourly_usd for o in by_cloud[Cloud.GCP]}
    assert gcp[("us-east4", "a3-highgpu-8g")] == 208 * Decimal("0.01773248") + 1872 * Decimal(
        "0.001544126"
    ) + 8 * Decimal("6.798809")
    azure = {(o.region, o.instance_type): o.hourly_usd for o in by_cloud[Cloud.AZURE]}
    one_year_total = Decimal(508058)  # the recorded "1 Year" row's retailPrice
    assert azure[("eastus", "Standard_ND96isr_H100_v5")] == (one_year_total / 8760).quantize(Decimal("1e-10"))
    assert all(o.zone is None for o in reserved)
    # the previous snapshots' offers are gone from the current view; skips are reported
    assert not any(o.instance_type == "box.8x" for o in catalog.offers(["H100", "A100-40GB"]))
    outcome = {o.cloud: o for o in result.outcomes}
    assert outcome[Cloud.AWS].skipped[validate.SPOT_ABOVE_ON_DEMAND] == 1  # the g4dn 0.90 spot quote
    assert outcome[Cloud.AZURE].skipped["Windows"] == 55
    assert {e.cloud for e in events if e.state == "done"} == set(Cloud)
    assert result.requests == sum(o.requests for o in result.outcomes) == 10 + 8 + 14


def test_a_source_down_mid_refresh_keeps_its_previous_snapshot(
    catalog: Catalog, local_fakes: responses.RequestsMock
) -> None:
    old = previous(catalog, *Cloud)
    # Azure: Resource SKUs and most chains answer, then one chain keeps failing
    fakes.register_azure(local_fakes, skip={("Standard_ND96isr_H100_v5", "Reservation")})
    query = {"$filter": fakes.retail_filter("Standard_ND96isr_H100_v5", "Reservation")}
    local_fakes.get(fakes.PRICES_URL, status=500, match=[matchers.query_param_matcher(query)])
    sources = live_sources()
    sources[2] = AzurePriceSource(
        fakes.AZURE_SUBSCRIPTION, fakes.FakeCredential(), sleep=lambda _s: None, max_attempts=2
    )
    result = refresh(sources, catalog)
    assert [o.cloud for o in result.failures] == [Cloud.AZURE]
    now = current(catalog)
    assert now[Cloud.AZURE] == old[Cloud.AZURE]
    assert now[Cloud.AWS] != old[Cloud.AWS] and now[Cloud.GCP] != old[Cloud.GCP]
    failure = result.failures[0]
    assert isinstance(failure.error, SourceError) and failure.snapshot is None
    assert "live:azure-retail-prices" in failure.error.message and "HTTP 500" in failure.error.message
    with pytest.raises(RefreshError) as err:
        result.raise_for_failures()
    assert isinstance(err.value, PricingError) and err.value.exit_code == 4
    assert "azure" in err.value.message and "previous snapshot" in (err.value.hint or "")
    # the old Azure prices are still what the catalog serves
    assert {o.hourly_usd for o in catalog.offers(["H100"], clouds=[Cloud.AZURE])} == {Decimal(10)}


def test_an_empty_result_is_a_failure(catalog: Catalog) -> None:
    old = previous(catalog, Cloud.GCP)
    result = refresh([FakeSource(Cloud.GCP, [])], catalog)
    assert isinstance(result.failures[0].error, EmptyResultError)
    assert current(catalog) == old


def test_only_invalid_rows_is_an_empty_result(catalog: Catalog) -> None:
    result = refresh([FakeSource(Cloud.GCP, [offer(Cloud.GCP, price="0")])], catalog)
    error = result.failures[0].error
    assert isinstance(error, EmptyResultError) and "zero price" in error.message
    assert catalog.snapshots() == []


def test_a_timed_out_source_keeps_its_snapshot_and_others_land(catalog: Catalog) -> None:
    old = previous(catalog, Cloud.AWS, Cloud.GCP)
    gate = threading.Event()
    started = time.monotonic()
    try:
        result = refresh(
            [
                FakeSource(Cloud.AWS, [offer(Cloud.AWS)], block=gate),
                FakeSource(Cloud.GCP, [offer(Cloud.GCP, price="9")]),
            ],
            catalog,
            timeout=1.0,
        )
    finally:
        gate.set()
    assert time.monotonic() - started < 5
    [failure] = result.failures
    assert failure.cloud is Cloud.AWS and isinstance(failure.error, SourceTimeoutError)
    now = current(catalog)
    assert now[Cloud.AWS] == old[Cloud.AWS] and now[Cloud.GCP] != old[Cloud.GCP]


def test_validation_skips_are_counted_and_never_stored(catalog: Catalog) -> None:
    rows = [
        offer(Cloud.AZURE, price="3"),  # kept
        offer(Cloud.AZURE, price="0", itype="a"),
        offer(Cloud.AZURE, price="-1", itype="b"),
        offer(Cloud.AZURE, price="NaN", itype="c"),
        offer(Cloud.AZURE, price="2", itype="d", currency="EUR"),
        offer(Cloud.AZURE, market=Market.SPOT, price="4.6"),  # > 1.5 x 3
        offer(Cloud.AZURE, market=Market.SPOT, price="1.2"),
    ]  # kept
    result = refresh([FakeSource(Cloud.AZURE, rows, skipped={"Windows": 4})], catalog)
    [outcome] = result.outcomes
    assert outcome.ok and outcome.stored == 2 and outcome.fetched == 7
    assert outcome.skipped == {
        validate.ZERO: 1,
        validate.NEGATIVE: 1,
        validate.NOT_FINITE: 1,
        validate.CURRENCY: 1,
        validate.SPOT_ABOVE_ON_DEMAND: 1,
        "Windows": 4,
    }
    stored = catalog.offers(["H100"])
    assert sorted(o.hourly_usd for o in stored) == [Decimal("1.2"), Decimal(3)]
    note = catalog.snapshots(current_only=True)[0]
    assert note.row_count == 2


def test_a_gpu_filter_carries_the_other_gpus_over(catalog: Catalog) -> None:
    previous(catalog, Cloud.AWS)  # A100-40GB at 5 and H100 at 10
    source = FakeSource(Cloud.AWS, [offer(Cloud.AWS, "H100", price="8"), offer(Cloud.AWS, "L4", price="1")])
    result = refresh([source], catalog, gpus={"H100"})
    assert source.gpus == {"H100"}
    [outcome] = result.outcomes
    assert outcome.stored == 1 and outcome.carried_over == 1
    prices = {o.gpu: o.hourly_usd for o in catalog.offers(["H100", "A100-40GB", "L4"])}
    assert prices == {"H100": Decimal(8), "A100-40GB": Decimal(5)}


def test_unexpected_exceptions_and_stray_clouds_become_source_errors(catalog: Catalog) -> None:
    result = refresh(
        [FakeSource(Cloud.AWS, error=KeyError("Regions")), FakeSource(Cloud.GCP, [offer(Cloud.AZURE)])], catalog
    )
    errors = [o.error for o in result.outcomes]
    assert all(isinstance(e, SourceError) for e in errors)
    assert "KeyError" in errors[0].message and "fake:aws" in errors[0].message  # type: ignore[union-attr]
    assert "another cloud" in errors[1].message  # type: ignore[union-attr]


def test_progress_reports_requests_and_the_end_of_each_cloud(catalog: Catalog) -> None:
    events: list[ProgressEvent] = []
    lock = threading.Lock()

    def record(event: ProgressEvent) -> None:
        with lock:
            events.append(event)

    refresh(
        [FakeSource(Cloud.AWS, [offer(Cloud.AWS)]), FakeSource(Cloud.GCP, error=EmptyResultError("x", "y"))],
        catalog,
        progress=record,
    )
    for cloud, state in ((Cloud.AWS, "done"), (Cloud.GCP, "failed")):
        mine = [e for e in events if e.cloud is cloud]
        assert mine[-1].state == state and mine[-1].done == 2
        assert max(e.done for e in mine if e.state == "running") == 2
        assert all(e.done <= e.total for e in mine)


def test_one_at_a_time_and_concurrent_runs_agree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPUPROV_AZURE_PRICES_URL", raising=False)
    stored = []
    for workers in (1, 8):
        cat = Catalog(f"sqlite:///{tmp_path / f'workers-{workers}.db'}")
        with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
            fakes.register_gcp(rsps)
            fakes.register_azure(rsps)
            result = refresh(live_sources()[1:], cat, max_workers=workers)
        assert result.ok
        stored.append(sorted((o.key, o.gpu, o.hourly_usd) for o in cat.offers(["H100", "A100-80GB", "T4", "L4"])))
    assert stored[0] == stored[1] and stored[0]


def test_one_source_per_cloud(catalog: Catalog) -> None:
    with pytest.raises(ValueError):
        refresh([FakeSource(Cloud.AWS, [offer(Cloud.AWS)]), FakeSource(Cloud.AWS, [offer(Cloud.AWS)])], catalog)
