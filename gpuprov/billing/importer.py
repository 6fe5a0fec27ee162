"""``gpuprov bill import``: FOCUS exports into the store, streamed, all files in one transaction.

Each file is read a row at a time (``reader``), every row checked (``charges.RowParser``: one bad
decimal, date, enumeration or JSON value anywhere is one error naming the row, and nothing of any
file is stored), the kept charges written ``BATCH`` at a time. Memory holds a batch and the
file's totals (per provider: charge period covered; per provider, billing account and billing
period: one key), never the file. Then the charges earlier imports stored for the same keys are
replaced, in the same transaction.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprov.billing import charges, focus, reader
from gpuprov.errors import UsageError

if TYPE_CHECKING:
    from gpuprov.store.billing import BillStore, Session

BATCH = 5000  # charges per INSERT
FORMATS = ("focus",)


@dataclass
class Summary:
    """What one file held and what of it was kept."""

    source: str
    focus_version: str
    format: str  # csv | parquet
    sha256: str = ""
    rows: int = 0
    billed_usd: Decimal = Decimal(0)  # every row
    effective_usd: Decimal = Decimal(0)
    list_usd: Decimal = Decimal(0)
    kept: Counter[str] = field(default_factory=Counter)  # kind -> rows
    kept_billed_usd: Decimal = Decimal(0)
    kept_effective_usd: Decimal = Decimal(0)
    coverage: dict[tuple[str | None, str | None], list[datetime]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    replaced: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "focus_version": self.focus_version,
            "format": self.format,
            "sha256": self.sha256,
            "rows": self.rows,
            "billed_usd": format(self.billed_usd, "f"),
            "effective_usd": format(self.effective_usd, "f"),
            "list_usd": format(self.list_usd, "f"),
            "kept": dict(sorted(self.kept.items())),
            "kept_rows": sum(self.kept.values()),
            "kept_billed_usd": format(self.kept_billed_usd, "f"),
            "kept_effective_usd": format(self.kept_effective_usd, "f"),
            "coverage": [
                {"provider": p, "cloud": c, "from": a.isoformat(), "to": b.isoformat()}
                for (p, c), (a, b) in sorted(self.coverage.items(), key=lambda kv: str(kv[0]))
            ],
            "notes": self.notes,
            "replaced": self.replaced,
        }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def import_files(
    paths: Sequence[Path], store: BillStore, types: charges.Types, where: Sequence[str] | None = None
) -> list[Summary]:
    """Import every file, or (on any error) nothing; one Summary per file."""
    shown = list(where) if where is not None else [str(p)[:200] for p in paths]
    out: list[Summary] = []
    periods: set[tuple[str | None, str | None, datetime | None]] = set()
    with store.session() as tx:
        for path, name in zip(paths, shown, strict=True):
            done = _import_one(path, name, tx, types, periods)
            same = next((o.source for o in out if o.sha256 and o.sha256 == done.sha256), None)
            if same is not None:  # its charges would count twice
                raise UsageError(f"{name}: the same export as {same} (sha256 {done.sha256[:12]}); nothing was stored")
            out.append(done)
        replaced = tx.finish(periods)
    if out:
        out[0].replaced = replaced  # once, for the whole command
    return out


def _import_one(
    path: Path,
    name: str,
    tx: Session,
    types: charges.Types,
    periods: set[tuple[str | None, str | None, datetime | None]],
) -> Summary:
    with reader.open_source(path, name) as src:
        layout = focus.detect(src.header, name)
        parser = charges.RowParser(layout, src.header, name, types)
        summary = Summary(name, layout.version, src.kind)
        if layout.missing_mandatory:
            summary.notes.append(
                f"not every mandatory FOCUS {layout.version} column is present; missing: "
                + ", ".join(layout.missing_mandatory)
            )
        if layout.not_focus:
            summary.notes.append(
                f"columns that are not FOCUS {layout.version} (ignored): " + ", ".join(layout.not_focus[:10])
            )
        writer = tx.start(name, layout.version, src.kind)
        buf: list[charges.Charge] = []
        clouds: dict[str | None, str | None] = {}
        for n, line, values in src.rows:
            facts, charge = parser.parse(n, line, values)
            summary.rows += 1
            summary.billed_usd += facts.billed
            summary.effective_usd += facts.effective
            if facts.list_cost is not None:
                summary.list_usd += facts.list_cost
            cloud = clouds[facts.provider] if facts.provider in clouds else charges.cloud_of(facts.provider)
            key = (facts.provider, clouds.setdefault(facts.provider, cloud))
            span = summary.coverage.get(key)
            if span is None:
                summary.coverage[key] = [facts.start, facts.end]
            else:
                span[0], span[1] = min(span[0], facts.start), max(span[1], facts.end)
            periods.add((facts.provider, facts.billing_account_id, facts.billing_period_start))
            if charge is not None:
                summary.kept[charge.kind] += 1
                summary.kept_billed_usd += charge.billed
                summary.kept_effective_usd += charge.effective
                buf.append(charge)
                if len(buf) >= BATCH:
                    writer.add(buf)
                    buf = []
        writer.add(buf)
        summary.sha256 = src.sha256() if src.sha256 is not None else _sha256(path)
    summary.notes += [f"{what} in {k:,} rows (FOCUS allows none)" for what, k in sorted(parser.notes.items())]
    writer.summary = {
        "sha256": summary.sha256,
        "rows_read": summary.rows,
        "billed_usd": format(summary.billed_usd, "f"),
        "effective_usd": format(summary.effective_usd, "f"),
        "list_usd": format(summary.list_usd, "f"),
        "coverage": json.dumps([[p, c, _ms(a), _ms(b)] for (p, c), (a, b) in summary.coverage.items()], sort_keys=True),
        "notes": json.dumps(summary.notes),
    }
    return summary


def _ms(when: datetime) -> int:
    from gpuprov.store.billing import ms

    return ms(when)
