"""GCP driver: Compute Engine VMs through google-cloud-compute's ``InstancesClient`` (REST).

Names and ids
    An instance is named ``gpuprov-<token>`` (names are unique per zone, which is what makes
    ``launch`` idempotent across calls and processes); its driver id is ``"<zone>/<name>"``,
    e.g. ``us-central1-a/gpuprov-3f2a…``. ``terminate`` takes those ids.

Labels
    ``request.tags()`` become GCE labels (what ``describe`` filters on). A label value must match
    ``[a-z0-9_-]{0,63}``; a value that does not is rewritten deterministically (lowercased,
    other characters to ``-``, plus 8 hex of its SHA-256), and the exact tags are then also kept
    in the metadata item ``gpuprov-tags`` (JSON), from which handles are read back.

Liveness
    Every status but ``TERMINATED`` counts as live: PROVISIONING and STAGING (state
    ``pending``), RUNNING (``running``), STOPPING and SUSPENDING (``stopping``), SUSPENDED
    (``stopped``), REPAIRING (``repairing``). A ``TERMINATED`` (stopped) instance is not listed;
    launching its token again deletes it and starts a new one. Spot VMs use
    ``instanceTerminationAction=DELETE``, so a preempted one disappears on its own.

Idempotency
    ``launch`` first GETs ``gpuprov-<token>`` in the zone; an insert answered ``409 alreadyExists``
    (a concurrent launch) is a success and returns the existing instance. Each launch call sends
    one ``requestId`` (a UUID), reused by every retry of its insert, so a retried POST never
    creates a second VM. The id is fresh per call, not a function of the token alone: GCE
    replays the original operation for a reused ``requestId`` for at least an hour, which would
    turn a relaunch after a termination into a silent no-op (or replay a stale stockout).

Not done here: GPUs are not attached separately (``guestAccelerators``), so an N1 machine type
gets no GPU; the a2/a3/a4/g2 families have theirs built in. No external IP is configured.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuprov.bootstrap import Bootstrap
from gpuprov.errors import (
    CapacityError,
    ConfigError,
    CredentialsError,
    GpuprovError,
    ProvisioningError,
    QuotaError,
    TransientError,
)
from gpuprov.models import Cloud, Market, Site
from provisioner.base import (
    OWNER_TAG,
    TAGS,
    InstanceHandle,
    LaunchRequest,
    read_tags,
)
from sdk import gcp as sdk_gcp
from sdk import net

DEFAULT_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
DEFAULT_NETWORK = "global/networks/default"
TAGS_METADATA_KEY = "gpuprov-tags"
STARTUP_SCRIPT_KEY = "startup-script"  # the config's bootstrap.gcp (gpuprov/bootstrap.py)

# Operation / error reason codes, as GCE reports them (operation errors[].code, HTTP errors[].reason).
CAPACITY_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "RESOURCE_POOL_EXHAUSTED",
        "STOCKOUT",
        "RESOURCE_NOT_AVAILABLE",
        "resourceNotAvailable",
    }
)
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded", "QUOTA_LIMIT_EXCEEDED"})
RATE_LIMIT_CODES = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
NOT_FOUND_CODES = frozenset({"RESOURCE_NOT_FOUND", "notFound"})
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

STATES = {
    "PROVISIONING": "pending",
    "STAGING": "pending",
    "RUNNING": "running",
    "STOPPING": "stopping",
    "SUSPENDING": "stopping",
    "SUSPENDED": "stopped",
    "STOPPED": "stopped",
    "TERMINATED": "terminated",
}
NOT_LIVE = frozenset({"TERMINATED"})

_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class GcpPolling:
    """How to wait on zone operations, and how long to retry one call on 429/5xx (seconds)."""

    initial: float = 1.0
    maximum: float = 20.0
    multiplier: float = 1.5
    timeout: float = 900.0
    retry_deadline: float = 120.0


def _sanitize(value: str, pattern: re.Pattern[str], limit: int) -> str:
    if pattern.fullmatch(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9_-]", "-", value.lower())[: limit - 9]
    if pattern is _LABEL_KEY and not base[:1].isalpha():
        base = "k" + base[: limit - 10]
    return f"{base}-{digest}"


def label_value(value: str) -> str:
    """A GCE label value for a tag value: unchanged when valid, else a deterministic rewrite."""
    return _sanitize(value, _LABEL_VALUE, 63)


def instance_name(token: str) -> str:
    name = f"gpuprov-{token}"
    if _NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(token.encode()).hexdigest()[:24]
    return f"gpuprov-{digest}"


def policy_name(placement_group: str) -> str:
    """A resource policy name for a gang's placement group: [a-z][-a-z0-9]* (at most 63), the
    group's name where it already is one, else a readable prefix and a digest of it."""
    if _NAME.fullmatch(placement_group):
        return placement_group
    text = re.sub(r"[^a-z0-9-]+", "-", placement_group.lower()).strip("-")[:40].rstrip("-") or "gpuprov"
    digest = hashlib.sha256(placement_group.encode()).hexdigest()[:12]
    return f"{text if text[0].isalpha() else 'g-' + text}-{digest}"


def _labels(tags: dict[str, str]) -> dict[str, str]:
    return {_sanitize(k, _LABEL_KEY, 63): label_value(v) for k, v in tags.items()}


def _sdk() -> Any:
    """google.cloud.compute_v1 (sdk/gcp.py: loaded lazily, one missing-extra error)."""
    return sdk_gcp.load("the GCP driver").compute


def _codes(exc: BaseException) -> set[str]:
    """Reason codes carried by a google.api_core error (HTTP errors[] dicts or operation Errors)."""
    codes: set[str] = set()
    for err in getattr(exc, "errors", None) or ():
        code = err.get("reason") if isinstance(err, dict) else getattr(err, "code", None)
        if code:
            codes.add(str(code))
    reason = getattr(exc, "reason", None)
    if reason:
        codes.add(str(reason))
    return codes


def _operation_codes(lro: Any) -> set[str]:
    error = getattr(lro, "error", None)
    return {str(e.code) for e in getattr(error, "errors", None) or () if e.code}


def translate(exc: BaseException, pool: Site, what: str, codes: Iterable[str] = ()) -> ProvisioningError:
    """Map a google error to gpuprov's tree. Messages name codes and statuses, never credentials."""
    all_codes = _codes(exc) | set(codes)
    status = getattr(exc, "code", None)
    status = status if isinstance(status, int) else None
    named = ", ".join(sorted(all_codes)) or f"HTTP {status}"
    if all_codes & CAPACITY_CODES:
        return CapacityError(
            f"{what}: no capacity ({named})",
            pool=pool,
            hint="the pool is marked unavailable; another zone or market may have room",
        )
    if all_codes & QUOTA_CODES or (status == 403 and "quota" in str(exc).lower()):
        return QuotaError(
            f"{what}: quota exceeded ({named})",
            pool=pool,
            hint="raise the quota in the Cloud console, or plan without this pool",
        )
    if all_codes & RATE_LIMIT_CODES or status in TRANSIENT_STATUS:
        return TransientError(f"{what}: GCP is throttling or unavailable ({named})")
    if status in (401, 403):
        return CredentialsError(
            f"{what}: GCP refused the credentials ({named})",
            hint="check the service account's roles (compute.instanceAdmin.v1)",
        )
    return ProvisioningError(f"{what}: GCP error {named}")


def _retryable(exc: BaseException) -> bool:
    """Throttling and 5xx (the network policy, sdk/gcp.py ``retry``, decides on failed connections)."""
    from google.api_core import exceptions as gexc

    if isinstance(
        exc,
        (
            gexc.TooManyRequests,
            gexc.InternalServerError,
            gexc.BadGateway,
            gexc.ServiceUnavailable,
            gexc.GatewayTimeout,
            gexc.DeadlineExceeded,
        ),
    ):
        return True
    return isinstance(exc, gexc.Forbidden) and bool(_codes(exc) & RATE_LIMIT_CODES)


@contextlib.contextmanager
def _boundary(pool: Site, what: str) -> Iterator[None]:
    """Translate SDK exceptions raised inside the block, chaining the original."""
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    try:
        yield
    except GpuprovError:
        raise
    except (auth_exc.TransportError, requests.RequestException, gexc.RetryError) as exc:
        # the network (refused, DNS, proxy, TLS, hung), else retried until the deadline
        raise sdk_gcp.translated(exc, what) from exc
    except gexc.GoogleAPICallError as exc:
        if sdk_gcp.unreachable(exc) is not None:
            raise sdk_gcp.translated(exc, what) from exc
        raise translate(exc, pool, what) from exc
    except auth_exc.RefreshError as exc:
        raise sdk_gcp.translated(exc, what) from exc
    except auth_exc.GoogleAuthError as exc:
        raise CredentialsError(
            f"{what}: no usable GCP credentials ({type(exc).__name__})",
            hint="run 'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS",
        ) from exc
    except TimeoutError as exc:
        raise TransientError(f"{what}: the operation did not finish in time; launching again is safe") from exc
    except Exception as exc:  # an answer the SDK could not read, or one the driver did not expect
        raise sdk_gcp.translated(exc, what) from exc


def _utc(stamp: str) -> datetime | None:
    if not stamp:
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)
    return None


# n1 machine types carry no GPU of their own: these are attached (accelerator type names of
# the Compute API). a2/a3/a4/g2 types have theirs built in.
ATTACHED_GPUS = {
    "T4": "nvidia-tesla-t4",
    "V100": "nvidia-tesla-v100",
    "P4": "nvidia-tesla-p4",
    "P100": "nvidia-tesla-p100",
}


class GcpDriver:
    """Launch, list and end tagged Compute Engine VMs in one project (see the module docstring)."""

    cloud = Cloud.GCP

    def __init__(
        self,
        project: str,
        zones: Sequence[str],
        credentials: Any = None,
        image: str = DEFAULT_IMAGE,
        network: str | None = None,
        poll: GcpPolling | None = None,
        *,
        subnetwork: str | None = None,
        boot_disk_gb: int = 200,
        boot_disk_type: str = "pd-balanced",
        bootstrap: Bootstrap | None = None,
        endpoint: str | None = None,
    ) -> None:
        self.project = project
        self.endpoint = endpoint  # the Compute API's address (config gcp.endpoint), else Google's
        self.zones = tuple(zones)
        self.image = image
        self.network = network or DEFAULT_NETWORK
        self.subnetwork = subnetwork
        self.poll = poll or GcpPolling()
        self.boot_disk_gb = boot_disk_gb
        self.boot_disk_type = boot_disk_type
        self.bootstrap = bootstrap or Bootstrap()
        self._credentials = credentials
        self._instances: Any = None
        self._policies: Any = None
        self._placed: set[tuple[str, str]] = set()  # (region, name) of compact policies known to exist
        self._placing = threading.Lock()  # a gang's launches run at once: one of them makes the policy

    # -- SDK plumbing -------------------------------------------------------------------
    def _client(self) -> Any:
        if self._instances is None:
            self._instances = _sdk().InstancesClient(
                credentials=self._credentials, transport="rest", client_options=sdk_gcp.options(self.endpoint)
            )
        return self._instances

    def _policy_client(self) -> Any:
        if self._policies is None:
            self._policies = _sdk().ResourcePoliciesClient(
                credentials=self._credentials, transport="rest", client_options=sdk_gcp.options(self.endpoint)
            )
        return self._policies

    def compact_placement(self, region: str, name: str, pool: Site, what: str) -> str:
        """The gang's compact placement resource policy (``groupPlacementPolicy.collocation:
        COLLOCATED``), created if missing: idempotent by name (a GET first, and a concurrent
        creation's ``alreadyExists`` counts as done). Returns its URL for ``resourcePolicies``."""

        with self._placing:
            return self._compact_placement(region, name, pool, what)

    def _compact_placement(self, region: str, name: str, pool: Site, what: str) -> str:
        from google.api_core import exceptions as gexc

        compute_v1 = _sdk()
        name = policy_name(name)
        link = f"projects/{self.project}/regions/{region}/resourcePolicies/{name}"
        if (region, name) in self._placed:
            return link
        client = self._policy_client()
        try:
            client.get(
                project=self.project,
                region=region,
                resource_policy=name,
                retry=self._retry(),
                timeout=sdk_gcp.timeout(),
            )
        except gexc.NotFound:
            policy = compute_v1.ResourcePolicy(
                name=name,
                description="gpuprov: compact placement of one training gang",
                group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(collocation="COLLOCATED"),
            )
            insert = compute_v1.InsertResourcePolicyRequest(
                project=self.project, region=region, request_id=str(uuid.uuid4()), resource_policy_resource=policy
            )
            try:
                lro = client.insert(request=insert, retry=self._retry(), timeout=sdk_gcp.timeout())
            except gexc.Conflict as exc:
                if "alreadyExists" not in _codes(exc):
                    raise
            else:
                self._wait(lro, pool, f"{what}: resource policy {name}", ignore=frozenset({"alreadyExists"}))
        self._placed.add((region, name))
        return link

    def _retry(self) -> Any:
        """Throttling retried until ``retry_deadline``, failed connections as the network policy says."""
        return sdk_gcp.retry(_retryable, self.poll.retry_deadline, self.poll.initial)

    def _wait(self, lro: Any, pool: Site, what: str, ignore: frozenset[str] = frozenset()) -> None:
        """Wait for a zone operation; raise the translated error of a failed one (unless all its
        error codes are in ``ignore``)."""
        from google.api_core import exceptions as gexc
        from google.api_core.future import polling

        p = self.poll
        waiting = polling.DEFAULT_POLLING.with_delay(initial=p.initial, maximum=p.maximum, multiplier=p.multiplier)
        try:
            lro.result(timeout=net.remaining(p.timeout), polling=waiting)
        except gexc.GoogleAPICallError as exc:
            codes = _operation_codes(lro)
            if codes and codes <= ignore:
                return
            raise translate(exc, pool, what, codes) from exc
        codes = _operation_codes(lro)
        if codes and not codes <= ignore:  # DONE with errors but no HTTP status: the SDK saw success
            raise translate(ProvisioningError(what), pool, what, codes)

    def _get(self, zone: str, name: str) -> Any | None:
        from google.api_core import exceptions as gexc

        try:
            return self._client().get(
                project=self.project, zone=zone, instance=name, retry=self._retry(), timeout=sdk_gcp.timeout()
            )
        except gexc.NotFound:
            return None

    def _delete(self, zone: str, name: str) -> Any | None:
        """Start deleting; None when the instance does not exist."""
        from google.api_core import exceptions as gexc

        compute_v1 = _sdk()
        request = compute_v1.DeleteInstanceRequest(
            project=self.project, zone=zone, instance=name, request_id=str(uuid.uuid4())
        )
        try:
            return self._client().delete(request=request, retry=self._retry(), timeout=sdk_gcp.timeout())
        except gexc.NotFound:
            return None

    # -- the three verbs (each whole: any answer not expected is one error line) -------------
    def launch(self, request: LaunchRequest) -> InstanceHandle:
        with _boundary(Site(Cloud.GCP.value, request.zone or request.region, request.instance_type, ""), "gcp launch"):
            return self._launch(request)

    def describe(self, owner: str) -> list[InstanceHandle]:
        with _boundary(Site(Cloud.GCP.value, "", "", ""), "gcp describe"):
            return self._describe(owner)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        with _boundary(Site(Cloud.GCP.value, "", "", ""), "gcp terminate"):
            self._terminate(instance_ids)

    def _launch(self, request: LaunchRequest) -> InstanceHandle:
        zone = self._zone_for(request)
        name = instance_name(request.token)
        pool = Site(Cloud.GCP.value, zone, request.instance_type, request.market.value)
        what = f"gcp launch {request.instance_type} ({request.market.value}) in {zone}"
        with _boundary(pool, what):
            existing = self._get(zone, name)
            if existing is not None and existing.status not in NOT_LIVE:
                return self._handle(existing)
            if existing is not None:  # a stopped (TERMINATED) VM holds the name: it does not count
                lro = self._delete(zone, name)
                if lro is not None:
                    self._wait(lro, pool, what, ignore=NOT_FOUND_CODES)
            if request.placement_group:
                self.compact_placement(request.region, request.placement_group, pool, what)
            self._insert(request, zone, name, pool, what)
            created = self._get(zone, name)
        if created is None:
            raise TransientError(f"{what}: the instance was gone right after its creation (preempted?)")
        return self._handle(created)

    def _insert(self, request: LaunchRequest, zone: str, name: str, pool: Site, what: str) -> None:
        from google.api_core import exceptions as gexc

        compute_v1 = _sdk()
        insert = compute_v1.InsertInstanceRequest(
            project=self.project,
            zone=zone,
            request_id=str(uuid.uuid4()),
            instance_resource=self._instance(request, zone, name),
        )
        try:
            lro = self._client().insert(request=insert, retry=self._retry(), timeout=sdk_gcp.timeout())
        except gexc.Conflict as exc:
            if "alreadyExists" in _codes(exc):  # a concurrent launch of the same token won
                return
            raise
        self._wait(lro, pool, what)

    def _describe(self, owner: str) -> list[InstanceHandle]:
        compute_v1 = _sdk()
        label = label_value(owner)
        query = f'labels.{OWNER_TAG} = "{label}"'
        pool = Site(Cloud.GCP.value, "", "", "")
        found: list[Any] = []
        with _boundary(pool, f"gcp describe (owner {owner})"):
            if self.zones:
                for zone in self.zones:
                    req = compute_v1.ListInstancesRequest(project=self.project, zone=zone, filter=query)
                    found.extend(self._client().list(request=req, retry=self._retry(), timeout=sdk_gcp.timeout()))
            else:
                req = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=query)
                for _scope, scoped in self._client().aggregated_list(
                    request=req, retry=self._retry(), timeout=sdk_gcp.timeout()
                ):
                    found.extend(scoped.instances)
        handles = [
            self._handle(i) for i in found if i.status not in NOT_LIVE and dict(i.labels).get(OWNER_TAG) == label
        ]
        return sorted((h for h in handles if h.owner == owner), key=lambda h: h.instance_id)

    def _terminate(self, instance_ids: Sequence[str]) -> None:
        pending: list[tuple[Any, Site, str]] = []
        for instance_id in instance_ids:
            zone, _, name = instance_id.partition("/")
            if not zone or not name or "/" in name:
                raise ProvisioningError(f"not a GCP instance id ('<zone>/<name>'): {instance_id!r}")
            pool = Site(Cloud.GCP.value, zone, "", "")
            what = f"gcp terminate {instance_id}"
            with _boundary(pool, what):
                lro = self._delete(zone, name)
            if lro is not None:
                pending.append((lro, pool, what))
        for lro, pool, what in pending:  # all deletes are started before waiting on any
            with _boundary(pool, what):
                self._wait(lro, pool, what, ignore=NOT_FOUND_CODES)

    # -- request and response shapes ----------------------------------------------------
    def _zone_for(self, request: LaunchRequest) -> str:
        zone = request.zone or next((z for z in self.zones if z.rsplit("-", 1)[0] == request.region), None)
        if zone is None:
            raise ConfigError(f"gcp launch: no zone given and none configured in {request.region}")
        if self.zones and zone not in self.zones:
            raise ConfigError(
                f"gcp launch: zone {zone} is outside the driver's zones ({', '.join(self.zones)})",
                hint="describe only looks in the configured zones; add it there",
            )
        return zone

    def _instance(self, request: LaunchRequest, zone: str, name: str) -> Any:
        compute_v1 = _sdk()
        tags = request.tags()
        labels = _labels(tags)
        spot = request.market is Market.SPOT
        scheduling = compute_v1.Scheduling(
            on_host_maintenance="TERMINATE",
            automatic_restart=not spot,
            provisioning_model="SPOT" if spot else "STANDARD",
        )
        if spot:
            scheduling.instance_termination_action = "DELETE"
        metadata = compute_v1.Metadata()
        items: list[Any] = []
        if any(labels.get(k) != tags[k] for k in TAGS):
            exact = json.dumps({k: tags[k] for k in TAGS}, sort_keys=True)
            items.append(compute_v1.Items(key=TAGS_METADATA_KEY, value=exact))
        script = self.bootstrap.user_data("gcp", request.workload, request.market.value, request.plan_id)
        if script is not None:
            items.append(compute_v1.Items(key=STARTUP_SCRIPT_KEY, value=script))
        if items:
            metadata.items = items
        disk = compute_v1.AttachedDisk(
            boot=True,
            auto_delete=True,
            type_="PERSISTENT",
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=request.image or self.image,
                disk_size_gb=self.boot_disk_gb,
                disk_type=f"zones/{zone}/diskTypes/{self.boot_disk_type}",
            ),
        )
        nic = compute_v1.NetworkInterface(network=self.network)
        if self.subnetwork:
            nic.subnetwork = self.subnetwork
        instance = compute_v1.Instance(
            name=name,
            machine_type=f"zones/{zone}/machineTypes/{request.instance_type}",
            labels=labels,
            metadata=metadata,
            scheduling=scheduling,
            disks=[disk],
            network_interfaces=[nic],
        )
        accelerator = ATTACHED_GPUS.get(request.gpu or "") if request.instance_type.startswith("n1-") else None
        if accelerator and request.gpus:
            instance.guest_accelerators = [
                compute_v1.AcceleratorConfig(
                    accelerator_type=f"zones/{zone}/acceleratorTypes/{accelerator}", accelerator_count=request.gpus
                )
            ]
        if request.placement_group:
            instance.resource_policies = [
                f"projects/{self.project}/regions/{request.region}/resourcePolicies/{policy_name(request.placement_group)}"
            ]
        return instance

    def _handle(self, inst: Any) -> InstanceHandle:
        labels = dict(inst.labels)
        tags = {k: labels.get(k, "") for k in TAGS}
        for item in inst.metadata.items:
            if item.key == TAGS_METADATA_KEY:
                with contextlib.suppress(ValueError, TypeError):
                    tags.update({k: str(v) for k, v in json.loads(item.value).items() if k in TAGS})
        zone = inst.zone.rsplit("/", 1)[-1]
        f = read_tags(tags, Market.SPOT if inst.scheduling.provisioning_model == "SPOT" else Market.ON_DEMAND)
        return InstanceHandle(
            cloud=Cloud.GCP,
            instance_id=f"{zone}/{inst.name}",
            region=zone.rsplit("-", 1)[0],
            zone=zone,
            instance_type=inst.machine_type.rsplit("/", 1)[-1],
            market=f.market,
            state=STATES.get(inst.status, inst.status.lower()),
            owner=f.owner,
            plan_id=f.plan_id,
            token=f.token,
            workload=f.workload,
            problem=f.problem,
            launched_at=_utc(inst.creation_timestamp),
        )
