"""The price snapshot bundled with the package (built by ``scripts/build_snapshot.py``).

``pricing/data/snapshot.json`` names each cloud's source and as-of time;
``pricing/data/offers.csv.gz`` holds the offers in gpuprov's CSV layout.
"""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass
from datetime import datetime
from importlib import resources

from gpuprov.models import Cloud, Offer
from pricing.gpuprov_csv import read_offers

META_FILE = "snapshot.json"
OFFERS_FILE = "offers.csv.gz"


@dataclass(frozen=True)
class BundledSnapshot:
    cloud: Cloud
    source: str
    as_of: datetime
    note: str
    offers: tuple[Offer, ...]


def bundled_meta() -> dict[Cloud, tuple[str, int]]:
    """(source, rows) of each cloud's bundled snapshot, without reading the offers."""
    meta = json.loads((resources.files("pricing") / "data" / META_FILE).read_text(encoding="utf-8"))
    return {Cloud(s["cloud"]): (s["source"], int(s["rows"])) for s in meta["snapshots"]}


def load_bundled() -> list[BundledSnapshot]:
    data = resources.files("pricing") / "data"
    meta = json.loads((data / META_FILE).read_text(encoding="utf-8"))
    raw = gzip.decompress((data / OFFERS_FILE).read_bytes()).decode("utf-8")
    offers = list(read_offers(io.StringIO(raw), f"bundled {OFFERS_FILE}"))
    out = []
    for snap in meta["snapshots"]:
        cloud = Cloud(snap["cloud"])
        out.append(
            BundledSnapshot(
                cloud=cloud,
                source=snap["source"],
                as_of=datetime.fromisoformat(snap["as_of"]),
                note=snap["note"],
                offers=tuple(o for o in offers if o.cloud == cloud),
            )
        )
    return out
