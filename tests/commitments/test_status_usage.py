"""``gpuprov status`` shows what the running fleet uses of each held commitment (fake clouds)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commitments.records import Commitment, Kind
from gpuprov.cli import app
from gpuprov.models import Cloud, Market
from gpuprov.store.commitments import CommitmentStore
from provisioner.base import LaunchRequest
from provisioner.drivers.fake import FakeDriver


def test_status_lists_held_commitments_with_use_and_unused_cost(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "fleet"
    monkeypatch.setenv("GPUPROV_FAKE_CLOUD", str(fake))
    monkeypatch.setenv("GPUPROV_CONFIG", str(tmp_path / "none.yaml"))
    driver = FakeDriver(Cloud.AWS, state_file=Path(f"{fake}.aws.json"))
    for i, market in enumerate([Market.ON_DEMAND, Market.ON_DEMAND, Market.ON_DEMAND, Market.SPOT]):
        driver.launch(
            LaunchRequest(Cloud.AWS, "us-east-1", "use1-az1", "p4d.24xlarge", market, f"t{i}", "default", "p1", "train")
        )
    now = datetime.now(UTC)
    CommitmentStore().add(
        [
            Commitment(
                id="ri-1",
                cloud="aws",
                kind=Kind.RESERVED_INSTANCE,
                starts=now - timedelta(days=30),
                ends=now + timedelta(days=300),
                instance_type="p4d.24xlarge",
                region="us-east-1",
                count=4,
                hourly_usd=Decimal("13.921094"),
                term="1y",
            )
        ]
    )
    result = CliRunner().invoke(app, ["status", "-o", "json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["commitments"]
    # 3 on-demand p4d run (the spot one is not billed against it): 1 of 4 unused at 13.921094
    assert (row["id"], row["used"], row["unused_hourly_usd"]) == ("ri-1", 3, "13.921094")
    table = CliRunner().invoke(app, ["status"])
    assert table.exit_code == 0, table.output
    assert "1 commitments held: $13.92/h unused now" in table.stdout
