"""Refreshed AWS Savings Plans rates (pricing/savings_plans.py), kept between runs.

Stored as one JSON document in the ``gpuprov_meta`` table (key ``savings_plan_rates``), so no
schema change is needed: ``{"regions": {"<region>": {"fetched_at": ISO time, "rates": [{kind,
region, instance_type, rate, on_demand}]}}}`` with money as decimal strings. A refresh of one
region replaces that region's rates and keeps the others.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpuprov.errors import StoreError
from gpuprov.store.database import Database

KEY = "savings_plan_rates"


class SavingsPlanRates(Database):
    def _document(self) -> dict[str, Any]:
        self.ensure_schema()
        rows = self._rows("SELECT value FROM gpuprov_meta WHERE key = :key", {"key": KEY})
        if not rows:
            return {"regions": {}}
        try:
            doc = json.loads(str(rows[0][0]))
        except ValueError:
            raise StoreError("the stored Savings Plans rates are not JSON", hint="refresh them again") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("regions"), dict):
            raise StoreError("the stored Savings Plans rates have an unknown shape", hint="refresh them again")
        return doc

    def save(self, region: str, rows: Sequence[dict[str, str]], fetched_at: datetime) -> None:
        """Replace one region's rates (one transaction)."""
        doc = self._document()
        doc["regions"][region] = {"fetched_at": fetched_at.isoformat(), "rates": list(rows)}
        self._put_meta(KEY, json.dumps(doc, sort_keys=True), "Savings Plans rates")

    def list(self) -> list[dict[str, str]]:
        """Every stored rate row, region by region."""
        out: list[dict[str, str]] = []
        for _region, entry in sorted(self._document()["regions"].items()):
            out += [dict(r) for r in entry.get("rates", []) if isinstance(r, dict)]
        return out

    def fetched(self) -> dict[str, str]:
        """Region → when its rates were fetched (ISO 8601)."""
        return {r: str(e.get("fetched_at", "")) for r, e in sorted(self._document()["regions"].items())}
