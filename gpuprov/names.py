"""Names that reach clouds, tags, Kubernetes and file names: validated once, here.

A fleet (owner) name is used as a tag and label value, inside resource names and as a
Kubernetes object name, and EC2 filters treat ``*`` and ``?`` in tag values as wildcards; so
it must match ``OWNER`` (lower-case letters, digits and dashes, 1-40 characters, no dash at
either end). Plan ids are the planner's own hex; workload names follow the same rule as owners.

Names made from free text (policy windows, workloads, pools) become identifiers through
``identifier``: a text that already is one (a DNS-1123 label that fits) is kept; any other is
normalised (lower case, runs of other characters to one ``-``) and given ``-`` and 8 hex of the
SHA-256 of the text itself, cut to fit: stable across runs and versions, and two texts never
share it by normalising alike (``Night!`` and ``night?`` become ``night-3b5f…`` and
``night-9a0c…``, never both ``night``). ``unique`` then refuses, naming both sources, the
one-in-four-billion case where two texts still meet.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable

from gpuprov.errors import ConfigError, UsageError

OWNER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
PLAN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def show(value: str, limit: int = 40) -> str:
    """A user-given string fit for one error line: control characters escaped, length cut."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def show_path(path: str, limit: int = 120) -> str:
    """A path fit for one error line: control characters escaped, the middle of a long one
    elided (its start and its file name stay)."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 2
    return f"{text[:keep]}...{text[-keep:]}"


def owner(name: str, where: str = "--owner", config: bool = False) -> str:
    if isinstance(name, str) and OWNER.fullmatch(name):
        return name
    error = ConfigError if config else UsageError
    raise error(
        f"{where}: {show(str(name))} is not a valid fleet name",
        hint="1-40 lower-case letters, digits and dashes, starting and ending with a letter or digit",
    )


LABEL = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
K8S_CRONJOB = 52  # the CronJob controller appends 11 characters to its Jobs' names (63)
K8S_LABEL = 63  # a label value, a DNS-1123 label (NodePool, ClusterQueue, Namespace names used as labels)
K8S_NAME = 253  # any other object name (a DNS-1123 subdomain)


def identifier(text: str, limit: int = K8S_LABEL) -> str:
    """``text`` as a DNS-1123 label of at most ``limit`` characters (see the module docstring)."""
    if len(text) <= limit and LABEL.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[: limit - 9].rstrip("-")
    return f"{base}-{digest}" if base else f"x{digest}"[:limit]


def unique(sources: Iterable[str], make: Callable[[str], str], what: str) -> dict[str, str]:
    """Each source's name; two different sources that get the same one are refused, naming both."""
    from gpuprov.errors import UsageError

    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for source in sources:
        made = make(source)
        other = seen.get(made)
        if other is not None and other != source:
            raise UsageError(
                f"{what} {show(other)} and {show(source)} would both be named {made!r}",
                hint=f"rename one of the two {what}s",
            )
        seen[made] = source
        out[source] = made
    return out
