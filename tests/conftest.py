"""Shared fixtures: every test gets its own catalog database; nothing touches the user's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'gpuprov.db'}"
    monkeypatch.setenv("GPUPROV_DATABASE_URL", url)
    monkeypatch.delenv("GPUPROV_DEBUG", raising=False)
    yield url
