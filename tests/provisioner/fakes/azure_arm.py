"""A small stateful fake of ARM's Microsoft.Compute/virtualMachines API, served by `responses`.

It answers in the wire format of the recordings in tests/fixtures/azure/compute/ (the VM
resource with ``properties``, ``{"error": {"code", "message"}}`` bodies, Azure-AsyncOperation
status documents, ``value`` / ``nextLink`` pages) and keeps the behaviour the driver relies on:

* PUT creates (201) or updates (200) and answers with an ``Azure-AsyncOperation`` header;
  the operation is Succeeded on its first poll (``fail_next_create`` makes it Failed with an
  error code and leaves the VM ``Failed``, as ARM does after an allocation failure);
* DELETE answers 202 and the VM is gone after the first poll; deleting a missing VM is 204;
* GET of a missing VM is 404 ``ResourceNotFound``; list pages with ``$skiptoken``.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import responses

HOST = "https://management.azure.com"
API_VERSION = "2026-04-01"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}[A-Za-z0-9_]")

Reply = tuple[int, dict[str, str], str]
JSON = {"Content-Type": "application/json; charset=utf-8"}


def error(status: int, code: str, message: str) -> Reply:
    return status, JSON, json.dumps({"error": {"code": code, "message": message}})


class FakeArm:
    def __init__(
        self,
        subscription: str = "00000000-0000-0000-0000-000000000000",
        resource_group: str = "gpuprov-rg",
        location: str = "eastus",
        page_size: int = 2,
    ) -> None:
        self.subscription = subscription
        self.resource_group = resource_group
        self.location = location
        self.page_size = page_size
        self.vms: dict[str, dict[str, Any]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        self.creations: Counter[str] = Counter()
        self.puts: list[dict[str, Any]] = []
        self.ppgs: dict[str, dict[str, Any]] = {}  # proximity placement groups by name
        self.ppg_puts: list[dict[str, Any]] = []
        self._failures: list[str] = []
        self._clock = datetime(2026, 11, 2, 10, 15, 30, tzinfo=UTC)
        self._seq = itertools.count(1)

    @property
    def prefix(self) -> str:
        return (
            f"{HOST}/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
            "/providers/Microsoft.Compute/virtualMachines"
        )

    def install(self, rsps: responses.RequestsMock) -> None:
        one = re.compile(re.escape(self.prefix) + r"/([^/?]+)(\?.*)?$")
        rsps.add_callback(responses.PUT, one, self._put)
        rsps.add_callback(responses.GET, one, self._get)
        rsps.add_callback(responses.DELETE, one, self._delete)
        rsps.add_callback(responses.GET, re.compile(re.escape(self.prefix) + r"(\?.*)?$"), self._list)
        ops = (
            f"{HOST}/subscriptions/{self.subscription}/providers/Microsoft.Compute/locations/"
            f"{self.location}/operations/"
        )
        rsps.add_callback(responses.GET, re.compile(re.escape(ops) + r"([^/?]+)(\?.*)?$"), self._operation)
        ppg = re.compile(re.escape(self.ppg_prefix) + r"/([^/?]+)(\?.*)?$")
        rsps.add_callback(responses.PUT, ppg, self._put_ppg)
        rsps.add_callback(responses.GET, ppg, self._get_ppg)

    @property
    def ppg_prefix(self) -> str:
        return (
            f"{HOST}/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
            "/providers/Microsoft.Compute/proximityPlacementGroups"
        )

    # Proximity Placement Groups - Create Or Update / Get (synchronous in ARM: 200 or 201 with the
    # resource; the body as the REST reference shows it: location, tags, properties.proximityPlacementGroupType)
    def _put_ppg(self, request: Any) -> Reply:
        name = self._name(request)
        body = json.loads(request.body)
        self.ppg_puts.append(body)
        status = 200 if name in self.ppgs else 201
        self.ppgs[name] = {
            "id": f"{self.ppg_prefix}/{name}".removeprefix(HOST),
            "name": name,
            "type": "Microsoft.Compute/proximityPlacementGroups",
            "location": body["location"],
            "tags": body.get("tags") or {},
            "properties": {
                "proximityPlacementGroupType": (body.get("properties") or {}).get("proximityPlacementGroupType"),
                "virtualMachines": [],
            },
        }
        return status, JSON, json.dumps(self.ppgs[name])

    def _get_ppg(self, request: Any) -> Reply:
        name = self._name(request)
        if name not in self.ppgs:
            return error(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.Compute/proximityPlacementGroups/{name}' was not found.",
            )
        return 200, JSON, json.dumps(self.ppgs[name])

    def fail_next_create(self, code: str = "AllocationFailed") -> None:
        self._failures.append(code)

    def count(self, token: str) -> int:
        return sum(
            1
            for vm in self.vms.values()
            if (vm.get("tags") or {}).get("gpuprov-token") == token
            and vm["properties"]["provisioningState"] != "Deleting"
        )

    # -- helpers ------------------------------------------------------------------------
    def _now(self) -> str:
        self._clock += timedelta(seconds=3)
        return self._clock.isoformat(timespec="microseconds").replace("+00:00", "1+00:00")  # ARM: 7 digits

    @staticmethod
    def _name(request: Any) -> str:
        return str(urlsplit(request.url).path).rsplit("/", 1)[-1]

    def _operation_reply(self, status: int, body: dict[str, Any] | None, effect: dict[str, Any]) -> Reply:
        op_id = str(uuid.uuid4())
        self.operations[op_id] = {
            "doc": {"startTime": self._now(), "status": "InProgress", "name": op_id},
            "effect": effect,
        }
        url = (
            f"{HOST}/subscriptions/{self.subscription}/providers/Microsoft.Compute/locations/{self.location}"
            f"/operations/{op_id}?p=fake-{next(self._seq)}&api-version={API_VERSION}"
        )
        headers = {**JSON, "Azure-AsyncOperation": url, "Retry-After": "0"}
        if body is None:
            headers["Location"] = url + "&monitor=true"
        return status, headers, json.dumps(body) if body is not None else ""

    # -- handlers -----------------------------------------------------------------------
    def _put(self, request: Any) -> Reply:
        name = self._name(request)
        body = json.loads(request.body)
        self.puts.append(body)
        props = body.get("properties") or {}
        if not _NAME.fullmatch(name):
            return error(400, "InvalidParameter", f"The value of parameter vmName '{name}' is invalid.")
        for part in ("hardwareProfile", "storageProfile", "osProfile", "networkProfile"):
            if part not in props:
                return error(400, "InvalidParameter", f"Required parameter '{part}' is missing (null).")
        if any(len(v) > 256 for v in (body.get("tags") or {}).values()):
            return error(400, "InvalidTagNameCharacters", "A tag value exceeds 256 characters.")
        ppg = (props.get("proximityPlacementGroup") or {}).get("id")
        if ppg is not None and ppg.rsplit("/", 1)[-1] not in self.ppgs:  # as ARM: the group must exist
            return error(404, "NotFound", f"Proximity placement group '{ppg}' was not found.")
        existing = self.vms.get(name)
        if existing is not None and existing["properties"]["provisioningState"] == "Deleting":
            return error(
                409,
                "OperationNotAllowed",
                f"Operation 'PUT' is not allowed on VM '{name}' since the VM is marked for deletion.",
            )
        failure = self._failures.pop(0) if self._failures else None
        if existing is None or existing["properties"]["provisioningState"] == "Failed":
            vm = self._resource(name, body)
            vm["properties"]["provisioningState"] = "Creating"
            self.vms[name] = vm
            self.creations[name] += 1
            status = 201
        else:
            vm = existing
            vm["tags"] = body.get("tags") or {}
            vm["properties"]["provisioningState"] = "Updating"
            status = 200
        return self._operation_reply(status, vm, {"settle": name, "error": failure})

    def _resource(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        props = copy.deepcopy(body["properties"])
        props["vmId"] = str(uuid.uuid4())
        props["timeCreated"] = self._now()
        disk = props["storageProfile"].setdefault("osDisk", {})
        disk.update(osType="Linux", name=f"{name}_OsDisk_1_{uuid.uuid4().hex}", caching="ReadWrite")
        props["osProfile"].update(secrets=[], allowExtensionOperations=True, requireGuestProvisionSignal=True)
        return {
            "name": name,
            "id": f"{self.prefix}/{name}".removeprefix(HOST),
            "type": "Microsoft.Compute/virtualMachines",
            "location": body["location"],
            "tags": body.get("tags") or {},
            "etag": '"1"',
            "properties": props,
        }

    def _operation(self, request: Any) -> Reply:
        op_id = self._name(request)
        entry = self.operations.get(op_id)
        if entry is None:
            return error(404, "NotFound", f"The operation '{op_id}' was not found.")
        doc = entry["doc"]
        if doc["status"] == "InProgress":
            effect = entry["effect"]
            doc.update(status="Succeeded", endTime=self._now())
            vm = self.vms.get(effect.get("settle") or "")
            if effect.get("error"):
                doc.update(status="Failed", error={"code": effect["error"], "message": f"fake: {effect['error']}"})
                if vm is not None:
                    vm["properties"]["provisioningState"] = "Failed"
            elif vm is not None:
                vm["properties"]["provisioningState"] = "Succeeded"
            if effect.get("delete"):
                self.vms.pop(effect["delete"], None)
        return 200, JSON, json.dumps(doc)

    def _get(self, request: Any) -> Reply:
        name = self._name(request)
        if name not in self.vms:
            return error(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under resource group "
                f"'{self.resource_group}' was not found. For more details please go to "
                "https://aka.ms/ARMResourceNotFoundFix",
            )
        return 200, JSON, json.dumps(self.vms[name])

    def _delete(self, request: Any) -> Reply:
        name = self._name(request)
        vm = self.vms.get(name)
        if vm is None:
            return 204, {}, ""
        vm["properties"]["provisioningState"] = "Deleting"
        return self._operation_reply(202, None, {"delete": name})

    def _list(self, request: Any) -> Reply:
        query = {k: v[-1] for k, v in parse_qs(urlsplit(request.url).query).items()}
        start = int(query.get("$skiptoken") or 0)
        names = sorted(self.vms)
        body: dict[str, Any] = {"value": [self.vms[n] for n in names[start : start + self.page_size]]}
        if start + self.page_size < len(names):
            body["nextLink"] = f"{self.prefix}?api-version={API_VERSION}&$skiptoken={start + self.page_size}"
        return 200, JSON, json.dumps(body)
