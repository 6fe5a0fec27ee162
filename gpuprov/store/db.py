"""Where the catalog lives: a SQLite file in the user data dir, or ``GPUPROV_DATABASE_URL``."""

from __future__ import annotations

import os
from pathlib import Path

ENV_URL = "GPUPROV_DATABASE_URL"


def database_url() -> str:
    url = os.environ.get(ENV_URL, "").strip()
    if url:
        return url
    from platformdirs import user_data_dir

    path = Path(user_data_dir("gpuprov", appauthor=False)) / "gpuprov.db"
    return f"sqlite:///{path}"


def sqlite_path(url: str) -> Path | None:
    """The file behind a plain ``sqlite:///`` URL, or None for any other database."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url or url == "sqlite:///:memory:":
        return None
    return Path(url[len(prefix) :])
