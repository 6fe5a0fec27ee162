"""Shared fixtures: every test gets its own catalog database; nothing touches the user's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'gpuprov.db'}"
    monkeypatch.setenv("GPUPROV_DATABASE_URL", url)
    monkeypatch.delenv("GPUPROV_DEBUG", raising=False)
    yield url


@pytest.fixture(autouse=True)
def _every_plan_round_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every plan document the planner writes in any test is read back equal by from_json."""
    from gpuprov import planning
    from gpuprov.plandoc import from_json, to_json

    made: list[Any] = []
    original = planning.document

    def checked(*args: Any, **kwargs: Any) -> Any:
        doc = original(*args, **kwargs)
        assert from_json(to_json(doc)) == doc, "plan document does not survive to_json/from_json"
        made.append(doc)
        return doc

    monkeypatch.setattr(planning, "document", checked)
    yield made


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, _isolated_db: str) -> str:
    """The test's own SQLite file, and (where CI started one) a clean PostgreSQL database."""
    if request.param == "sqlite":
        return _isolated_db
    import os

    url = os.environ.get("GPUPROV_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("GPUPROV_TEST_POSTGRES_URL is not set (.ci/run starts PostgreSQL and sets it)")
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as con:
        con.execute(text("DROP SCHEMA public CASCADE"))
        con.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    return url


@pytest.fixture
def fake_clouds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[Any, Any]]:
    """In-memory clouds for CLI tests: the driver factory hands out one FakeDriver per cloud."""
    from gpuprov.commands import drivers as driver_factory
    from provisioner.drivers.fake import FakeDriver

    made: dict[Any, Any] = {}

    def make(wanted: Any, regions: Any, zones: Any, cfg: Any) -> dict[Any, Any]:
        for c in wanted:
            made.setdefault(c, FakeDriver(c))
        return {c: made[c] for c in wanted}

    monkeypatch.setattr(driver_factory, "make", make)
    monkeypatch.setenv("GPUPROV_CONFIG", str(tmp_path / "none.yaml"))
    yield made
