"""The refreshed AWS Spot Instance Advisor feed (pricing/spot_advisor.py), kept between runs.

One JSON document in the ``gpuprov_meta`` table (key ``spot_advisor``), so no schema change is
needed: ``{"fetched_at": ISO time, "url": where from, "feed": the feed cut to the GPU families}``.
A refresh replaces the document in one transaction: readers see the old feed or the new one.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from gpuprov.errors import StoreError
from gpuprov.store.database import Database, parse_time

KEY = "spot_advisor"


class SpotAdvisorStore(Database):
    def load(self) -> tuple[dict[str, Any], datetime, str] | None:
        """(feed, fetched at, url) of the stored feed, or None where none was refreshed."""
        self.ensure_schema()
        rows = self._rows("SELECT value FROM gpuprov_meta WHERE key = :key", {"key": KEY})
        if not rows:
            return None
        try:
            doc = json.loads(str(rows[0][0]))
            feed, fetched_at, url = doc["feed"], parse_time(doc["fetched_at"]), str(doc.get("url", ""))
        except (ValueError, KeyError, TypeError):
            raise StoreError(
                "the stored Spot Advisor feed is unreadable", hint="gpuprov pricing spot-advisor refresh"
            ) from None
        if not isinstance(feed, dict):
            raise StoreError("the stored Spot Advisor feed has an unknown shape", hint="refresh it again")
        return feed, fetched_at, url

    def save(self, feed: dict[str, Any], fetched_at: datetime, url: str) -> None:
        """Replace the stored feed (one transaction)."""
        text = json.dumps({"fetched_at": fetched_at.isoformat(), "url": url, "feed": feed}, sort_keys=True)
        self._put_meta(KEY, text, "the Spot Advisor feed")
