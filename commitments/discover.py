"""``gpuprov commitments discover``: ask each cloud for the commitments the account holds.

One module per cloud (commitments/aws.py, gcp.py, azure.py; each imports its SDK lazily).
``discover`` returns ``(records, notes)``: a cloud that is not configured, has no credentials
or fails gives one note line, and the others are still asked; a record a cloud returns
malformed is skipped with a note naming it. Notes are single lines of printable text (cloud
values are read back into them, so control characters are replaced).

What is configured: AWS is always tried (boto3's credential chain decides; ``aws.regions`` in
the config lists the regions, else every region DescribeRegions gives); GCP needs
``gcp.project`` (or GOOGLE_CLOUD_PROJECT); Azure needs ``azure.subscription_id`` (the signal
that Azure is in use; the reservation list itself is tenant-wide).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from commitments.records import Commitment, Known
from gpuprov.config import Config
from gpuprov.errors import GpuprovError
from gpuprov.models import Offer

CLOUDS = ("aws", "gcp", "azure")
NOTE_CHARS = 300


def one_line(text: str) -> str:
    """A note fit to print on one line: no control characters, bounded."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text)
    return clean if len(clean) <= NOTE_CHARS else clean[: NOTE_CHARS - 1] + "…"


def _ask(
    cloud: str, cfg: Config, offers: Sequence[Offer], now: datetime, known: Known | None
) -> tuple[list[Commitment], list[str]]:
    if cloud == "aws":
        from commitments import aws

        return aws.discover(list(cfg.aws.get("regions", [])), offers, now, known=known)
    if cloud == "gcp":
        project = cfg.gcp.get("project")
        if not project:
            return [], ["gcp: not asked: no project configured (gcp.project in the config, or GOOGLE_CLOUD_PROJECT)"]
        from commitments import gcp

        return gcp.discover(str(project), offers, now, known=known)
    if not cfg.azure.get("subscription_id"):
        return [], ["azure: not asked: no subscription configured (azure.subscription_id, or AZURE_SUBSCRIPTION_ID)"]
    from commitments import azure

    return azure.discover(offers, now, known=known)


def discover(
    clouds: Collection[str],
    cfg: Config,
    offers: Sequence[Offer],
    now: datetime,
    known: Known | None = None,
) -> tuple[list[Commitment], list[str]]:
    """Every asked cloud's commitments (ids unique) and the notes on what was not read."""
    records: list[Commitment] = []
    notes: list[str] = []
    seen: set[str] = set()
    for cloud in (c for c in CLOUDS if c in clouds):
        try:
            found, said = _ask(cloud, cfg, offers, now, known)
        except GpuprovError as exc:
            notes.append(one_line(f"{cloud}: not asked: {exc.message}"))
            continue
        notes += [one_line(n) for n in said]
        for c in found:
            if c.id in seen:
                notes.append(one_line(f"{cloud}: skipped {c.id}: the id is listed twice"))
                continue
            seen.add(c.id)
            records.append(c)
    return records, notes
