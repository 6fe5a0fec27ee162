"""``gpuprov commitments discover``: ask each cloud for the commitments the account holds.

One module per cloud (commitments/aws.py, gcp.py, azure.py; each imports its SDK lazily).
``discover`` returns ``(records, notes)``: a cloud that is not configured, has no credentials
or fails gives one note line, and the others are still asked; a record a cloud returns
malformed is skipped with a note naming it. Notes are single lines of printable text (cloud
values are read back into them, so control characters are replaced).

What is configured: AWS when the config has an ``aws`` section or the SDK has credentials to
find (its environment variables or files: ``sdk.aws.configured``; ``aws.regions`` in the config
lists the regions, else every region DescribeRegions gives); GCP needs ``gcp.project`` (or
GOOGLE_CLOUD_PROJECT); Azure needs ``azure.subscription_id`` (the signal that Azure is in use;
the reservation list itself is tenant-wide). A cloud that is not configured is a note; one that
is and fails (credentials, the network, an answer not understood) is in ``failed`` (the command
then exits 4, after storing what the others answered). The clouds are asked at once, each on
its own, within the network policy's limits (``sdk/net.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from functools import partial

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


def not_configured(cloud: str, cfg: Config) -> str | None:
    from sdk import aws as sdk_aws

    if cloud == "aws" and not sdk_aws.configured(cfg.aws):
        return "aws: not asked: no aws section in the config and no AWS credentials in the environment or ~/.aws"
    if cloud == "gcp" and not cfg.gcp.get("project"):
        return "gcp: not asked: no project configured (gcp.project in the config, or GOOGLE_CLOUD_PROJECT)"
    if cloud == "azure" and not cfg.azure.get("subscription_id"):
        return "azure: not asked: no subscription configured (azure.subscription_id, or AZURE_SUBSCRIPTION_ID)"
    return None


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

        endpoint = cfg.gcp.get("endpoint")
        return gcp.discover(str(project), offers, now, known=known, endpoint=str(endpoint) if endpoint else None)
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
) -> tuple[list[Commitment], list[str], dict[str, str]]:
    """Every asked cloud's commitments (ids unique), the notes on what was not read, and the
    configured clouds that could not be asked, with why."""
    from sdk import net

    records: list[Commitment] = []
    said: dict[str, list[str]] = {c: [] for c in CLOUDS}
    failed: dict[str, str] = {}
    seen: set[str] = set()
    asked: dict[str, Callable[[], tuple[list[Commitment], list[str]]]] = {}
    for cloud in (c for c in CLOUDS if c in clouds):
        reason = not_configured(cloud, cfg)
        if reason is not None:
            said[cloud].append(reason)
        else:
            asked[cloud] = partial(_ask, cloud, cfg, offers, now, known)
    answers = net.ask_all(asked, str)
    for cloud in (c for c in CLOUDS if c in answers):
        answer = answers[cloud]
        if isinstance(answer, GpuprovError):
            failed[cloud] = one_line(answer.message)
            said[cloud].append(one_line(f"{cloud}: not asked: {answer.message}"))
            continue
        if isinstance(answer, BaseException):
            raise answer
        found, notes = answer
        said[cloud] += [one_line(n) for n in notes]
        for c in found:
            if c.id in seen:
                said[cloud].append(one_line(f"{cloud}: skipped {c.id}: the id is listed twice"))
                continue
            seen.add(c.id)
            records.append(c)
    notes = [n for c in CLOUDS for n in said[c]]
    return records, notes, failed
