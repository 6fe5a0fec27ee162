"""``gpuprov commitments discover``: the dispatch across clouds, notes, storing, --dry-run.

Each cloud module is replaced by a stand-in here (their own tests replay the clouds' answers);
what is checked is what the command does with answers, failures and unconfigured clouds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commitments import aws, discover, gcp
from commitments.records import Commitment, Kind
from gpuprov.cli import app
from gpuprov.config import Config
from gpuprov.errors import CredentialsError
from gpuprov.store.commitments import CommitmentStore

RI = Commitment(
    id="aws:reserved_instance:11111111-aaaa-4bbb-8ccc-000000000001",
    cloud="aws",
    kind=Kind.RESERVED_INSTANCE,
    starts=datetime(2026, 6, 1, tzinfo=UTC),
    ends=datetime(2027, 6, 1, tzinfo=UTC),
    instance_type="p4d.24xlarge",
    region="us-east-1",
    count=4,
    hourly_usd=Decimal("13.921094"),
    term="1y",
    source="aws",
)


@pytest.fixture
def clouds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("gcp: {project: gpuprov-test}\naws: {regions: [us-east-1]}\n")
    monkeypatch.setenv("GPUPROV_CONFIG", str(cfg))
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    asked: dict[str, Any] = {}

    def fake_aws(regions: list[str], offers: Any, now: Any, **kw: Any) -> Any:
        asked["aws"] = (regions, len(offers), kw["known"](RI))
        return [RI], ["aws: skipped aws:reserved_instance:x: count must be at least 1, got -2\x1b[31m"]

    def fake_gcp(project: str, offers: Any, now: Any, **kw: Any) -> Any:
        asked["gcp"] = project
        raise CredentialsError("GCP credentials: DefaultCredentialsError")

    monkeypatch.setattr(aws, "discover", fake_aws)
    monkeypatch.setattr(gcp, "discover", fake_gcp)
    return asked


def test_discover_stores_what_answered_and_names_the_rest_exit_4(clouds: dict[str, Any]) -> None:
    """What AWS answered is stored; GCP, configured, could not be asked: named, exit 4 (a cloud
    not configured, Azure, is a note)."""
    result = CliRunner().invoke(app, ["commitments", "discover", "-o", "json"])
    assert result.exit_code == 4, result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: commitments discover could not ask gcp (GCP credentials: DefaultCredentialsError)"
    ]
    body = json.loads(result.stdout)
    assert body["unasked"] == {"gcp": "GCP credentials: DefaultCredentialsError"}
    assert [c["id"] for c in body["commitments"]] == [RI.id]
    assert body["stored"] == 1
    assert body["notes"] == [
        "aws: skipped aws:reserved_instance:x: count must be at least 1, got -2?[31m",  # no escape reaches a terminal
        "gcp: not asked: GCP credentials: DefaultCredentialsError",
        "azure: not asked: no subscription configured (azure.subscription_id, or AZURE_SUBSCRIPTION_ID)",
    ]
    regions, n_offers, problem = clouds["aws"]
    assert regions == ["us-east-1"] and n_offers > 0 and problem is None  # p4d is in the bundled catalog
    assert clouds["gcp"] == "gpuprov-test"
    assert [c.id for c in CommitmentStore().list()] == [RI.id]

    again = CliRunner().invoke(app, ["commitments", "discover", "--clouds", "aws"])  # found again: replaced
    assert again.exit_code == 0, again.output
    assert "stored 1 commitments from aws" in again.stdout
    assert [(c.id, c.count) for c in CommitmentStore().list()] == [(RI.id, 4)]


def test_dry_run_stores_nothing(clouds: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["commitments", "discover", "--clouds", "aws", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would store 1 commitments from aws" in result.stdout
    assert "warning: aws: skipped aws:reserved_instance:x" in result.stderr
    assert CommitmentStore().list() == []


def test_the_same_id_from_a_cloud_twice_is_kept_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aws, "discover", lambda *a, **k: ([RI, RI], []))
    cfg = Config(path=None, aws={"regions": ["us-east-1"]})
    records, notes, failed = discover.discover(["aws"], cfg, [], datetime(2026, 11, 1, tzinfo=UTC))
    assert records == [RI] and failed == {}
    assert notes == [f"aws: skipped {RI.id}: the id is listed twice"]
