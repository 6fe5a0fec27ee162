"""The driver contract: three verbs per cloud, and the records they take and return.

A driver owns nothing but the calls to its cloud. It must be idempotent:

* ``launch(request)`` starts exactly one instance tagged with ``request.token``; if an
  instance with that token already exists (any state but terminated), it returns that
  one and starts nothing. It raises ``CapacityError``/``QuotaError`` (with the pool
  ``(cloud, zone, instance type, market)``) when the cloud has no room, ``TransientError``
  after its SDK's own retries are spent, ``CredentialsError`` for auth failures.
* ``describe(owner)`` lists every instance tagged ``gpuprov-owner=<owner>`` that is not
  terminated (pending, running, stopping, …), in the driver's configured scope.
* ``terminate(ids)`` ends those instances; unknown or already-ended ids are not an error.

Every instance carries the tags in ``TAGS``: the cloud is the source of truth, the local
database only mirrors it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuprov.bootstrap import LABEL_DOMAIN, tag_key
from gpuprov.models import Cloud, InstanceHandle, Market

__all__ = ["TAGS", "Driver", "InstanceHandle", "LaunchRequest", "TagFields", "launch_token", "read_tags"]

OWNER_TAG = "gpuprov-owner"
TOKEN_TAG = "gpuprov-token"
# the facts a node is also labelled with (gpuprov.io/plan, …): one mapping, gpuprov.bootstrap.tag_key
PLAN_TAG = tag_key(f"{LABEL_DOMAIN}/plan")
WORKLOAD_TAG = tag_key(f"{LABEL_DOMAIN}/workload")
MARKET_TAG = tag_key(f"{LABEL_DOMAIN}/market")
TAGS = (OWNER_TAG, PLAN_TAG, TOKEN_TAG, WORKLOAD_TAG, MARKET_TAG)


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One instance to start. ``zone`` is the catalog's zone (AWS: an AZ id such as use1-az1;
    GCP: a zone name; Azure: None, the region)."""

    cloud: Cloud
    region: str
    zone: str | None
    instance_type: str
    market: Market
    token: str
    owner: str
    plan_id: str
    workload: str
    image: str | None = None
    placement_group: str | None = None  # a training gang's cluster placement group
    extra_tags: dict[str, str] = field(default_factory=dict)
    gpu: str | None = None  # canonical GPU name and count, for clouds where GPUs
    gpus: int = 0  # are attached to a host type (GCP n1 + T4/V100/P4/P100)

    def tags(self) -> dict[str, str]:
        return {
            **self.extra_tags,
            OWNER_TAG: self.owner,
            PLAN_TAG: self.plan_id,
            TOKEN_TAG: self.token,
            WORKLOAD_TAG: self.workload,
            MARKET_TAG: self.market.value,
        }


@dataclass(frozen=True, slots=True)
class TagFields:
    owner: str
    plan_id: str
    token: str
    workload: str
    market: Market
    problem: str | None


TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PLAN_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
WORKLOAD_RE = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")


def read_tags(tags: Mapping[str, str], fallback_market: Market) -> TagFields:
    """gpuprov's tags as read back from a cloud: data, never trusted. A value that does not parse
    is dropped (empty) and named in ``problem``; the market falls back to what the cloud says.
    The owner is kept verbatim: the driver asked the cloud for that exact owner."""
    bad: list[str] = []

    def pick(key: str, pattern: re.Pattern[str]) -> str:
        value = tags.get(key, "")
        if not isinstance(value, str) or not pattern.fullmatch(value):
            bad.append(key)
            return ""
        return value

    plan_id, token, workload = pick(PLAN_TAG, PLAN_RE), pick(TOKEN_TAG, TOKEN_RE), pick(WORKLOAD_TAG, WORKLOAD_RE)
    try:
        market = Market(tags.get(MARKET_TAG, ""))
    except ValueError:
        bad.append(MARKET_TAG)
        market = fallback_market
    owner = tags.get(OWNER_TAG, "")
    return TagFields(
        owner=owner if isinstance(owner, str) else "",
        plan_id=plan_id,
        token=token,
        workload=workload,
        market=market,
        problem=f"unreadable tags: {', '.join(bad)}" if bad else None,
    )


class Driver(Protocol):
    cloud: Cloud

    def describe(self, owner: str) -> list[InstanceHandle]: ...

    def launch(self, request: LaunchRequest) -> InstanceHandle: ...

    def terminate(self, instance_ids: Sequence[str]) -> None: ...


def launch_token(plan_id: str, pool: Sequence[str], index: int, owner: str = "") -> str:
    """The idempotency token of the index-th instance of a pool under a plan, for one fleet
    (two fleets applying one plan must not share tokens: EC2 honours a ClientToken across
    the account). 24 hex chars: valid as an EC2 ClientToken, a GCE label value, an Azure tag
    and in a VM name."""
    blob = "\x1f".join([owner, plan_id, *pool, str(index)]).encode()
    return hashlib.sha256(blob).hexdigest()[:24]
