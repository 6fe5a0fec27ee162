"""GCP commitment discovery: recorded regionCommitments.aggregatedList pages (tests/fixtures/gcp/
commitments, see its PROVENANCE.md) replayed with ``responses`` through the real
google-cloud-compute REST client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import responses
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1
from google.protobuf import json_format
from responses import matchers

from commitments import gcp
from commitments.records import Kind
from gpuprov.errors import CredentialsError
from gpuprov.models import Cloud, Market, Offer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gcp" / "commitments"
PROJECT = "gpuprov-test"
URL = f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/aggregated/commitments"
PAGE2 = "CkQKQnJlZ2lvbnMvZXVyb3BlLXdlc3Q0"
NOW = datetime(2026, 11, 10, tzinfo=UTC)


def offer(itype: str, gpu: str, gpi: int, market: str, price: str, region: str = "us-central1") -> Offer:
    return Offer(
        Cloud.GCP, region, None, itype, gpu, gpi, 40, 12 * gpi, Decimal(85 * gpi), Market(market), Decimal(price)
    )


# The bundled catalog's A2 reserved prices in us-central1 (pricing/data), one A3 size only.
OFFERS = [
    offer("a2-highgpu-1g", "A100-40GB", 1, "reserved_1y", "2.3142070400"),
    offer("a2-highgpu-2g", "A100-40GB", 2, "reserved_1y", "4.6284140800"),
    offer("a2-highgpu-4g", "A100-40GB", 4, "reserved_1y", "9.2568281600"),
    offer("a2-highgpu-8g", "A100-40GB", 8, "reserved_1y", "18.5136563200"),
    offer("a2-megagpu-16g", "A100-40GB", 16, "reserved_1y", "35.1154726400"),
    offer("a2-highgpu-1g", "A100-40GB", 1, "reserved_3y", "1.2857083260"),
    offer("a2-highgpu-2g", "A100-40GB", 2, "reserved_3y", "2.5714166520"),
    offer("a2-highgpu-4g", "A100-40GB", 4, "reserved_3y", "5.1428333040"),
    offer("a2-highgpu-8g", "A100-40GB", 8, "reserved_3y", "10.2856666080"),
    offer("a2-highgpu-8g", "A100-40GB", 8, "on_demand", "29.38708"),  # not a reserved price: ignored
    offer("a3-highgpu-8g", "H100", 8, "reserved_1y", "55.0"),
    offer("a2-highgpu-1g", "A100-40GB", 1, "reserved_1y", "2.5", region="europe-west4"),
]


def page(name: str) -> object:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture
def replay() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as rsps:
        yield rsps


def serve_pages(rsps: responses.RequestsMock) -> None:
    rsps.get(
        URL,
        json=page("regionCommitments.aggregatedList.page1.json"),
        match=[matchers.query_param_matcher({})],
    )
    rsps.get(
        URL,
        json=page("regionCommitments.aggregatedList.page2.json"),
        match=[matchers.query_param_matcher({"pageToken": PAGE2})],
    )


def test_recordings_parse_strictly_as_the_sdk_message() -> None:
    for path in sorted(FIXTURES.glob("*.json")):
        json_format.Parse(path.read_text(), compute_v1.CommitmentAggregatedList.pb()(), ignore_unknown_fields=False)


def test_accelerator_commitments_map_to_machine_types(replay: responses.RequestsMock) -> None:
    serve_pages(replay)
    records, notes = gcp.discover(PROJECT, OFFERS, NOW, credentials=AnonymousCredentials())
    by_id = {r.id: r for r in records}
    assert sorted(by_id) == [
        "gcp:committed_use:us-central1/a100-cud-1y",
        "gcp:committed_use:us-central1/a100-cud-3y-12",
    ]

    one = by_id["gcp:committed_use:us-central1/a100-cud-1y"]
    # 8 A100s: the largest machine whose GPU count divides 8 is a2-highgpu-8g (16 does not divide 8)
    assert (one.kind, one.instance_type, one.region, one.zone, one.count, one.term) == (
        Kind.COMMITTED_USE,
        "a2-highgpu-8g",
        "us-central1",
        None,
        1,
        "1y",
    )
    assert one.hourly_usd == Decimal("18.5136563200")
    assert one.starts == datetime(2026, 6, 1, 7, tzinfo=UTC)  # 00:00 Pacific daylight time
    assert one.ends == datetime(2027, 6, 1, 7, tzinfo=UTC)
    assert one.source == "gcp"

    three = by_id["gcp:committed_use:us-central1/a100-cud-3y-12"]
    # 12 A100s: 8 and 16 do not divide 12, 4 does: three a2-highgpu-4g at the 3-year price
    assert (three.instance_type, three.count, three.term, three.hourly_usd) == (
        "a2-highgpu-4g",
        3,
        "3y",
        Decimal("5.1428333040"),
    )
    assert three.committed_hourly_usd == Decimal("15.4284999120")

    joined = "\n".join(notes)
    assert len(notes) == 5, joined
    assert "us-central1/n2-cpu-only: no accelerators" in joined
    assert "us-central1/h100-cud-4: 4 × nvidia-h100-80gb: no H100 machine type in us-central1 divides 4 GPUs" in joined
    assert "europe-west4/h100-cud-ew4: 8 × nvidia-h100-80gb: the catalog has no reserved_1y price" in joined
    assert "europe-west4/zz9-cud: unknown accelerator type 'nvidia-tesla-zz9'" in joined
    assert "europe-west4/a100 cud; bad: id must be 1-128" in joined
    assert "a100-cud-expired" not in joined  # EXPIRED: not held, nothing to say


def test_machine_for_prefers_the_largest_divisor() -> None:
    assert gcp.machine_for(OFFERS, "us-central1", "A100-40GB", 32, "reserved_1y") == (
        "a2-megagpu-16g",
        2,
        Decimal("35.1154726400"),
    )
    assert gcp.machine_for(OFFERS, "us-central1", "A100-40GB", 6, "reserved_3y") == (
        "a2-highgpu-2g",
        3,
        Decimal("2.5714166520"),
    )


def test_a_refusal_is_one_credentials_line(replay: responses.RequestsMock) -> None:
    replay.get(
        URL,
        status=403,
        json={"error": {"code": 403, "message": "Required 'compute.commitments.list' permission", "errors": []}},
    )
    with pytest.raises(CredentialsError, match=r"GCP refused regionCommitments.aggregatedList: HTTP 403"):
        gcp.discover(PROJECT, OFFERS, NOW, credentials=AnonymousCredentials())
