"""Names that reach clouds, tags, Kubernetes and file names: validated once, here.

A fleet (owner) name is used as a tag and label value, inside resource names and as a
Kubernetes object name, and EC2 filters treat ``*`` and ``?`` in tag values as wildcards; so
it must match ``OWNER`` (lower-case letters, digits and dashes, 1-40 characters, no dash at
either end). Plan ids are the planner's own hex; workload names follow the same rule as owners.
"""

from __future__ import annotations

import re

from gpuprov.errors import ConfigError, UsageError

OWNER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
PLAN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def show(value: str, limit: int = 40) -> str:
    """A user-given string fit for one error line: control characters escaped, length cut."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def owner(name: str, where: str = "--owner", config: bool = False) -> str:
    if isinstance(name, str) and OWNER.fullmatch(name):
        return name
    error = ConfigError if config else UsageError
    raise error(
        f"{where}: {show(str(name))} is not a valid fleet name",
        hint="1-40 lower-case letters, digits and dashes, starting and ending with a letter or digit",
    )
