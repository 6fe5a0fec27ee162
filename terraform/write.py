"""Write rendered Terraform JSON files atomically (temp file in the same directory, then rename)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def dumps(doc: Mapping[str, Any]) -> str:
    """The exact bytes gpuprov writes: indent 2, sorted keys, UTF-8 as is, trailing newline."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_files(files: Mapping[str, Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Write each document to ``out_dir/<name>``; return the paths written, sorted by name.

    Each file is written to a temporary file in ``out_dir`` and moved into place with
    ``os.replace``, so a reader never sees half a file. Files not in ``files`` are left alone.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in sorted(files):
        if Path(name).name != name or not name.endswith(".json"):
            raise ValueError(f"not a plain .json file name: {name!r}")
        target = out_dir / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(dumps(files[name]))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(target)
    return written
