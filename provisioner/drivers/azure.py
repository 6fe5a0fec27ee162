"""Azure driver: virtual machines in one resource group through azure-mgmt-compute.

Names and ids
    A VM is named ``gpuprov-<token>``; the driver id is that name (unique in the resource group).
    ``terminate`` takes names.

Network
    The VM creates its own NIC: ``networkProfile.networkApiVersion = 2020-11-01`` with one
    ``networkInterfaceConfigurations`` entry on ``subnet_id`` (no public IP). NIC and OS disk
    have ``deleteOption = Delete``, so deleting the VM removes them. Launching needs
    ``subnet_id`` and ``ssh_public_key`` (password login is disabled).

Markets
    Spot: ``priority = Spot``, ``evictionPolicy = Delete``, ``billingProfile.maxPrice = -1`` (pay
    up to the on-demand price; evicted only for capacity). Other markets: ``priority = Regular``
    (a reservation applies by billing, not by a VM property).

Liveness
    The VM list carries no power state, so states come from ``provisioningState``: Creating
    → ``pending``; Succeeded, Updating, Migrating → ``running``; Failed, Canceled → ``failed``
    (listed: the VM still exists, and launching its token again re-sends the create);
    Deleting → not live (not listed).

Idempotency
    ``launch`` GETs the name first and returns a live VM as is; a PUT on an existing name is
    itself idempotent in ARM. Capacity errors leave the pool's zone element as the region
    (Azure VMs here are regional): ``pool = ("azure", region, vm_size, market)``.

Gangs
    A training gang's VMs are placed in one proximity placement group (``Standard``) per
    (fleet, workload, region), found by name (GET) or created (PUT, idempotent in ARM) before
    the first of them, once per driver; its name is the placement group's, made a valid ARM
    name (``ppg_name``).

Network and surprises
    Clients and the credential take the network policy (``sdk/azure.py``: connection retries,
    timeouts, the deadline); an answer the driver does not expect is one ``ProvisioningError``
    line, never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuprov.bootstrap import Bootstrap, b64
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
    InstanceHandle,
    LaunchRequest,
    read_tags,
)
from sdk import azure as sdk_azure
from sdk import net

DEFAULT_IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}
NETWORK_API_VERSION = "2020-11-01"

CAPACITY_CODES = frozenset(
    {
        "SkuNotAvailable",
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
        "AllocationFailedDueToCapacity",
    }
)
QUOTA_CODES = frozenset({"QuotaExceeded", "OperationNotAllowedQuotaExceeded", "ResourceQuotaExceeded"})
AUTH_CODES = frozenset(
    {
        "AuthorizationFailed",
        "InvalidAuthenticationToken",
        "LinkedAuthorizationFailed",
        "AuthenticationFailed",
        "ExpiredAuthenticationToken",
    }
)
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

STATES = {
    "Creating": "pending",
    "Succeeded": "running",
    "Updating": "running",
    "Migrating": "running",
    "Failed": "failed",
    "Canceled": "failed",
}
NOT_LIVE = frozenset({"Deleting"})
RECREATE = frozenset({"Failed", "Canceled"})


def vm_name(token: str) -> str:
    return f"gpuprov-{token}"


_PPG = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,78}[A-Za-z0-9_])?")


def ppg_name(placement_group: str) -> str:
    """A proximity placement group name (1-80 of letters, digits, ``_.-``, no ``.``/``-`` at the
    end): the group's own name where it is one, else a readable prefix and 12 hex of its SHA-256."""
    if _PPG.fullmatch(placement_group):
        return placement_group
    text = re.sub(r"[^A-Za-z0-9_.-]+", "-", placement_group).strip("-.")[:60].rstrip("-.") or "gpuprov"
    return f"{text}-{hashlib.sha256(placement_group.encode()).hexdigest()[:12]}"


def _sdk() -> tuple[Any, Any]:
    """ComputeManagementClient and its models (sdk/azure.py: loaded lazily, one missing-extra error)."""
    azure = sdk_azure.load("the Azure driver")
    return azure.compute_client, azure.models


def _error_codes(error: Any) -> tuple[set[str], str]:
    """Codes of an ARM error and its details, and the top message."""
    codes: set[str] = set()
    message = ""
    stack = [error] if error is not None else []
    while stack:
        err = stack.pop()
        if getattr(err, "code", None):
            codes.add(str(err.code))
        message = message or str(getattr(err, "message", "") or "")
        stack.extend(getattr(err, "details", None) or ())
    return codes, message


def translate(exc: BaseException, pool: Site, what: str) -> ProvisioningError:
    """Map an azure-core error to gpuprov's tree. Messages carry ARM codes, never credentials."""
    from azure.core import exceptions as aexc

    if sdk_azure.unreachable(exc) is not None or isinstance(exc, aexc.DecodeError):
        found = sdk_azure.translated(exc, what)
        if isinstance(found, ProvisioningError):
            return found
    if isinstance(exc, aexc.ClientAuthenticationError):
        return CredentialsError(
            f"{what}: Azure refused or could not get credentials ({type(exc).__name__})",
            hint="az login, or set AZURE_CLIENT_ID / AZURE_TENANT_ID and a secret or certificate",
        )
    if isinstance(exc, (aexc.ServiceRequestError, aexc.ServiceResponseError)):
        return TransientError(f"{what}: could not reach Azure ({type(exc).__name__})")
    codes, message = _error_codes(getattr(exc, "error", None))
    status = getattr(exc, "status_code", None)
    named = ", ".join(sorted(codes)) or f"HTTP {status}"
    quota_text = "quota" in message.lower()
    if codes & QUOTA_CODES or ("OperationNotAllowed" in codes and quota_text):
        return QuotaError(
            f"{what}: quota exceeded ({named})",
            pool=pool,
            hint="request more vCPU quota for the VM family (or spot vCPUs), or plan without it",
        )
    if codes & CAPACITY_CODES:
        return CapacityError(
            f"{what}: no capacity ({named})",
            pool=pool,
            hint="the pool is marked unavailable; another region, size or market may have room",
        )
    if status in TRANSIENT_STATUS:
        return TransientError(f"{what}: Azure is throttling or unavailable ({named})")
    if status in (401, 403) or codes & AUTH_CODES:
        return CredentialsError(
            f"{what}: Azure denied the request ({named})",
            hint="the identity needs Virtual Machine Contributor on the resource group",
        )
    return ProvisioningError(f"{what}: Azure error {named}")


@contextlib.contextmanager
def _boundary(pool: Site, what: str) -> Iterator[None]:
    from azure.core import exceptions as aexc

    try:
        yield
    except GpuprovError:
        raise
    except aexc.AzureError as exc:
        raise translate(exc, pool, what) from exc
    except Exception as exc:  # an answer the SDK could not read, or one the driver did not expect
        raise sdk_azure.translated(exc, what) from exc


def _utc(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return None


def _image(value: str | Mapping[str, str]) -> dict[str, str]:
    """An ARM imageReference from a mapping, an image resource id or a 'publisher:offer:sku:version' URN."""
    if isinstance(value, Mapping):
        return dict(value)
    if value.startswith("/"):
        return {"id": value}
    parts = value.split(":")
    if len(parts) != 4:
        raise ConfigError(f"azure image {value!r} is neither a resource id nor publisher:offer:sku:version")
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


class AzureDriver:
    """Launch, list and end tagged VMs in one resource group (see the module docstring)."""

    cloud = Cloud.AZURE

    def __init__(
        self,
        subscription_id: str,
        resource_group: str,
        location: str,
        credential: Any = None,
        image_reference: dict[str, str] | None = None,
        admin_username: str = "gpuprov",
        ssh_public_key: str | None = None,
        subnet_id: str | None = None,
        polling_interval: float | None = None,
        *,
        os_disk_gb: int | None = 200,
        os_disk_type: str = "Premium_LRS",
        client_kwargs: Mapping[str, Any] | None = None,
        bootstrap: Bootstrap | None = None,
        endpoint: str | None = None,
    ) -> None:
        self.subscription_id = subscription_id
        self.resource_group = resource_group
        self.location = location
        self.image_reference = dict(image_reference or DEFAULT_IMAGE)
        self.admin_username = admin_username
        self.ssh_public_key = ssh_public_key
        self.subnet_id = subnet_id
        self.polling_interval = polling_interval
        self.os_disk_gb = os_disk_gb
        self.os_disk_type = os_disk_type
        self._credential = credential
        self._client_kwargs = dict(client_kwargs or {})
        self.bootstrap = bootstrap or Bootstrap()
        self.endpoint = endpoint or self._client_kwargs.get("base_url")  # ARM (config azure.endpoint)
        self._options = sdk_azure.call_options(self.endpoint)  # per call: plain HTTP only to loopback
        self._compute: Any = None
        self._ppgs: set[str] = set()  # proximity placement groups known to exist
        self._placing = threading.Lock()  # a gang's launches run at once: one of them makes the group

    def _client(self) -> Any:
        if self._compute is None:
            client_cls, _ = _sdk()
            credential = self._credential if self._credential is not None else sdk_azure.credential()
            kwargs = {**sdk_azure.arm(self.endpoint), **self._client_kwargs}
            if self.polling_interval is not None:
                kwargs["polling_interval"] = self.polling_interval
            self._compute = client_cls(credential, self.subscription_id, **kwargs)
        return self._compute

    def _vms(self) -> Any:
        return self._client().virtual_machines

    def _get(self, name: str) -> dict[str, Any] | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return dict(self._vms().get(self.resource_group, name, **self._options).as_dict())
        except ResourceNotFoundError:
            return None

    def proximity_placement(self, group: str, owner: str) -> str:
        """The gang's proximity placement group: found by name, else created; its resource id."""

        _, m = _sdk()
        name = ppg_name(group)
        ppgs = self._client().proximity_placement_groups
        with self._placing:
            self._find_or_create_ppg(ppgs, m, name, owner)
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/proximityPlacementGroups/{name}"
        )

    def _find_or_create_ppg(self, ppgs: Any, m: Any, name: str, owner: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        if name not in self._ppgs:
            try:
                ppgs.get(self.resource_group, name, **self._options)
            except ResourceNotFoundError:
                body = m.ProximityPlacementGroup(
                    location=self.location,
                    tags={OWNER_TAG: owner},
                    properties=m.ProximityPlacementGroupProperties(proximity_placement_group_type="Standard"),
                )
                ppgs.create_or_update(self.resource_group, name, body, **self._options)
            self._ppgs.add(name)

    # -- the three verbs ----------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> InstanceHandle:
        pool = Site(Cloud.AZURE.value, request.zone or request.region, request.instance_type, request.market.value)
        with _boundary(pool, "azure launch"):
            return self._launch(request)

    def describe(self, owner: str) -> list[InstanceHandle]:
        with _boundary(Site(Cloud.AZURE.value, self.location, "", ""), "azure describe"):
            return self._describe(owner)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        with _boundary(Site(Cloud.AZURE.value, self.location, "", ""), "azure terminate"):
            self._terminate(instance_ids)

    def _launch(self, request: LaunchRequest) -> InstanceHandle:
        name = vm_name(request.token)
        pool = Site(Cloud.AZURE.value, request.zone or request.region, request.instance_type, request.market.value)
        what = f"azure launch {request.instance_type} ({request.market.value}) in {request.region}"
        if request.region != self.location:
            raise ConfigError(
                f"{what}: the driver is set up for {self.location}",
                hint="use one AzureDriver per location (its subnet is regional)",
            )
        with _boundary(pool, what):
            existing = self._get(name)
            state = _props(existing).get("provisioningState")
            if existing is not None and state in NOT_LIVE:
                raise TransientError(f"{what}: {name} is still being deleted; launch again shortly")
            if existing is not None and state not in RECREATE:
                return self._handle(existing)
            ppg = self.proximity_placement(request.placement_group, request.owner) if request.placement_group else None
            body = self._vm(request, ppg)
            vm = self._vms().begin_create_or_update(self.resource_group, name, body, **self._options).result()
        return self._handle(dict(vm.as_dict()))

    def _describe(self, owner: str) -> list[InstanceHandle]:
        pool = Site(Cloud.AZURE.value, self.location, "", "")
        with _boundary(pool, f"azure describe (owner {owner})"):
            vms = [dict(vm.as_dict()) for vm in self._vms().list(self.resource_group, **self._options)]
        handles = [
            self._handle(vm)
            for vm in vms
            if (vm.get("tags") or {}).get(OWNER_TAG) == owner and _props(vm).get("provisioningState") not in NOT_LIVE
        ]
        return sorted(handles, key=lambda h: h.instance_id)

    def _terminate(self, instance_ids: Sequence[str]) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        pollers: list[tuple[Any, str]] = []
        pool = Site(Cloud.AZURE.value, self.location, "", "")
        for name in instance_ids:
            with _boundary(pool, f"azure terminate {name}"):
                try:
                    pollers.append((self._vms().begin_delete(self.resource_group, name, **self._options), name))
                except ResourceNotFoundError:
                    continue
        for poller, name in pollers:  # every delete is started before waiting on any
            with _boundary(pool, f"azure terminate {name}"), contextlib.suppress(ResourceNotFoundError):
                poller.result(timeout=net.remaining(3600.0))  # accepted deletes go on past a deadline

    # -- request and response shapes ----------------------------------------------------
    def _vm(self, request: LaunchRequest, ppg: str | None = None) -> Any:
        _, m = _sdk()
        name = vm_name(request.token)
        what = f"azure launch {name}"
        if not self.subnet_id:
            raise ConfigError(f"{what}: no subnet_id configured", hint="pass AzureDriver(subnet_id=...)")
        if not self.ssh_public_key:
            raise ConfigError(f"{what}: no ssh_public_key configured", hint="pass AzureDriver(ssh_public_key=...)")
        image = _image(request.image) if request.image else self.image_reference
        os_disk = m.OSDisk(
            create_option="FromImage",
            delete_option="Delete",
            managed_disk=m.ManagedDiskParameters(storage_account_type=self.os_disk_type),
        )
        if self.os_disk_gb:
            os_disk.disk_size_gb = self.os_disk_gb
        key = m.SshPublicKey(path=f"/home/{self.admin_username}/.ssh/authorized_keys", key_data=self.ssh_public_key)
        nic = m.VirtualMachineNetworkInterfaceConfiguration(
            name=f"{name}-nic",
            primary=True,
            delete_option="Delete",
            ip_configurations=[
                m.VirtualMachineNetworkInterfaceIPConfiguration(
                    name="ipconfig1", primary=True, subnet=m.SubResource(id=self.subnet_id)
                )
            ],
        )
        os_profile = m.OSProfile(
            computer_name=name,
            admin_username=self.admin_username,
            linux_configuration=m.LinuxConfiguration(
                disable_password_authentication=True, ssh=m.SshConfiguration(public_keys=[key])
            ),
        )
        custom = self.bootstrap.user_data("azure", request.workload, request.market.value, request.plan_id)
        if custom is not None:
            os_profile.custom_data = b64(custom)  # the API takes it base64-encoded
        props: dict[str, Any] = {
            "hardware_profile": m.HardwareProfile(vm_size=request.instance_type),
            "storage_profile": m.StorageProfile(image_reference=m.ImageReference(image), os_disk=os_disk),
            "os_profile": os_profile,
            "network_profile": m.NetworkProfile(
                network_api_version=NETWORK_API_VERSION, network_interface_configurations=[nic]
            ),
            "priority": "Regular",
        }
        if request.market is Market.SPOT:
            props.update(priority="Spot", eviction_policy="Delete", billing_profile=m.BillingProfile(max_price=-1))
        if ppg is not None:
            props["proximity_placement_group"] = m.SubResource(id=ppg)
        return m.VirtualMachine(
            location=self.location, tags=request.tags(), properties=m.VirtualMachineProperties(**props)
        )

    def _handle(self, vm: Mapping[str, Any]) -> InstanceHandle:
        props = _props(vm)
        tags = dict(vm.get("tags") or {})
        f = read_tags(tags, Market.SPOT if props.get("priority") == "Spot" else Market.ON_DEMAND)
        state = str(props.get("provisioningState") or "")
        return InstanceHandle(
            cloud=Cloud.AZURE,
            instance_id=str(vm.get("name")),
            region=str(vm.get("location") or self.location),
            zone=None,
            instance_type=str((props.get("hardwareProfile") or {}).get("vmSize", "")),
            market=f.market,
            state=STATES.get(state, state.lower()),
            owner=f.owner,
            plan_id=f.plan_id,
            token=f.token,
            workload=f.workload,
            problem=f.problem,
            launched_at=_created(props.get("timeCreated")),
        )


def _props(vm: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (vm or {}).get("properties") or {}


def _created(value: Any) -> datetime | None:
    """ARM's timeCreated (``2026-11-02T10:15:30.1234567+00:00``: 7 fractional digits) as aware UTC."""
    if isinstance(value, datetime) or not value:
        return _utc(value)
    text = str(value).replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:
        digits = "".join(c for c in rest if c.isdigit())
        text = f"{head}.{digits[:6]}{rest[len(digits) :]}"
    with contextlib.suppress(ValueError):
        return _utc(datetime.fromisoformat(text))
    return None
