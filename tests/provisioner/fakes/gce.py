"""A small stateful fake of the Compute Engine v1 zonal instances API, served by `responses`.

It speaks the same JSON as the recordings in tests/fixtures/gcp/compute/ (compute#instance,
compute#operation, compute#instanceList, compute#instanceAggregatedList, the v1 error body) and
keeps what the real API promises that the driver relies on:

* names are unique per zone (``409 alreadyExists``), names and label values are validated (400);
* a repeated ``requestId`` replays the original operation and changes nothing;
* operations start RUNNING and are DONE on their first poll (an insert then makes the VM
  RUNNING, a delete removes it); ``fail_next_insert`` makes the next insert's operation end
  with an error code (a stockout, a quota);
* list / aggregatedList honour ``filter = 'labels.<key> = "<value>"'`` and page with
  ``maxResults`` / ``pageToken``.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

import responses

HOST = "https://compute.googleapis.com/compute/v1"
SELF = "https://www.googleapis.com/compute/v1"
PACIFIC = timezone(timedelta(hours=-8))
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_FILTER = re.compile(r'^labels\.([a-z][a-z0-9_-]*)\s*=\s*"([^"]*)"$')

Reply = tuple[int, dict[str, str], str]


def error(code: int, reason: str, message: str) -> Reply:
    body = {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }
    return code, {"Content-Type": "application/json"}, json.dumps(body)


def ok(body: dict[str, Any]) -> Reply:
    return 200, {"Content-Type": "application/json"}, json.dumps(body)


class FakeGce:
    def __init__(self, project: str = "gpuprov-test", page_size: int = 2) -> None:
        self.project = project
        self.page_size = page_size
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], dict[str, Any]] = {}
        self.request_ids: dict[str, tuple[str, str]] = {}
        self.creations: Counter[str] = Counter()
        self.inserted: list[dict[str, Any]] = []  # request bodies, as sent
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}  # (region, name) -> resource policy
        self.policy_inserts: list[dict[str, Any]] = []
        self.policy_calls: list[tuple[str, str]] = []  # (method, policy name), in order
        self._errors: list[tuple[str, int]] = []
        self._ids = itertools.count(7049211238452217394, 7919)
        self._clock = datetime(2026, 11, 2, 2, 15, 30, tzinfo=PACIFIC)

    # -- wiring -------------------------------------------------------------------------
    def install(self, rsps: responses.RequestsMock) -> None:
        base = re.escape(f"{HOST}/projects/{self.project}")
        one = re.compile(base + r"/zones/([^/]+)/instances/([^/?]+)(\?.*)?$")
        many = re.compile(base + r"/zones/([^/]+)/instances(\?.*)?$")
        rsps.add_callback(responses.POST, many, self._insert)
        rsps.add_callback(responses.GET, many, self._list)
        rsps.add_callback(responses.GET, one, self._get)
        rsps.add_callback(responses.DELETE, one, self._delete)
        rsps.add_callback(responses.GET, re.compile(base + r"/aggregated/instances(\?.*)?$"), self._aggregated)
        rsps.add_callback(
            responses.GET, re.compile(base + r"/zones/([^/]+)/operations/([^/?]+)(\?.*)?$"), self._operation
        )
        policies = base + r"/regions/([^/]+)/resourcePolicies"
        rsps.add_callback(responses.POST, re.compile(policies + r"(\?.*)?$"), self._insert_policy)
        rsps.add_callback(responses.GET, re.compile(policies + r"/([^/?]+)(\?.*)?$"), self._get_policy)
        rsps.add_callback(
            responses.GET, re.compile(base + r"/regions/([^/]+)/operations/([^/?]+)(\?.*)?$"), self._region_operation
        )

    def fail_next_insert(self, code: str, http_status: int = 503) -> None:
        self._errors.append((code, http_status))

    def count(self, token: str) -> int:
        return sum(1 for i in self.instances.values() if i["labels"].get("gpuprov-token") == token)

    # -- helpers ------------------------------------------------------------------------
    def _now(self) -> str:
        self._clock += timedelta(seconds=7)
        return self._clock.isoformat(timespec="milliseconds")

    def _zone_link(self, zone: str) -> str:
        return f"{SELF}/projects/{self.project}/zones/{zone}"

    @staticmethod
    def _parts(request: Any) -> tuple[list[str], dict[str, str]]:
        url = urlsplit(request.url)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        return url.path.split("/"), query

    def _new_operation(self, zone: str, kind: str, name: str, target_id: str, effect: dict[str, Any]) -> dict[str, Any]:
        op_name = f"operation-{uuid.uuid4().hex[:13]}-{uuid.uuid4().hex[:13]}"
        op = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": op_name,
            "zone": self._zone_link(zone),
            "operationType": kind,
            "targetLink": f"{self._zone_link(zone)}/instances/{name}",
            "targetId": target_id,
            "status": "RUNNING",
            "user": "gpuprov-sa@gpuprov-test.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": self._now(),
            "startTime": self._now(),
            "selfLink": f"{self._zone_link(zone)}/operations/{op_name}",
        }
        self.operations[(zone, op_name)] = {"op": op, "effect": effect}
        return op

    # -- handlers -----------------------------------------------------------------------
    def _insert(self, request: Any) -> Reply:
        path, query = self._parts(request)
        zone = path[-2]
        request_id = query.get("requestId", "")
        if request_id:
            try:
                uuid.UUID(request_id)
            except ValueError:
                return error(400, "invalid", f"Invalid value for field 'requestId': '{request_id}'.")
            if request_id in self.request_ids:
                return ok(self.operations[self.request_ids[request_id]]["op"])
        body = json.loads(request.body)
        self.inserted.append(body)
        name = body.get("name", "")
        if not _NAME.fullmatch(name):
            return error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
        for key, value in (body.get("labels") or {}).items():
            if not _LABEL_VALUE.fullmatch(value) or not _NAME.fullmatch(key.replace("_", "-")):
                return error(400, "invalid", f"Invalid value for field 'resource.labels': '{key}'.")
        for link in body.get("resourcePolicies") or []:  # as GCE: a policy named must exist, in the region
            parts = link.split("/")
            if len(parts) < 6 or (parts[-3], parts[-1]) not in self.policies or not zone.startswith(parts[-3]):
                return error(400, "invalid", f"The resource '{link}' was not found")
        if (zone, name) in self.instances:
            return error(
                409,
                "alreadyExists",
                f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists",
            )
        effect: dict[str, Any] = {"create": (zone, name)}
        if self._errors:
            effect = {"error": self._errors.pop(0)}
        else:
            self.instances[(zone, name)] = self._instance(zone, body)
            self.creations[name] += 1
        op = self._new_operation(zone, "insert", name, self.instances.get((zone, name), {}).get("id", "0"), effect)
        if request_id:
            self.request_ids[request_id] = (zone, op["name"])
        return ok(op)

    def _instance(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["name"]
        zl = self._zone_link(zone)
        inst = copy.deepcopy(body)
        boot = (body.get("disks") or [{}])[0]
        size = str((boot.get("initializeParams") or {}).get("diskSizeGb", "10"))
        inst.update(
            {
                "kind": "compute#instance",
                "id": str(next(self._ids)),
                "creationTimestamp": self._now(),
                "status": "PROVISIONING",
                "zone": zl,
                "selfLink": f"{zl}/instances/{name}",
                "machineType": f"{SELF}/projects/{self.project}/{body['machineType']}",
                "disks": [
                    {
                        "kind": "compute#attachedDisk",
                        "type": "PERSISTENT",
                        "mode": "READ_WRITE",
                        "source": f"{zl}/disks/{name}",
                        "deviceName": "persistent-disk-0",
                        "index": 0,
                        "boot": True,
                        "autoDelete": True,
                        "interface": "SCSI",
                        "diskSizeGb": size,
                        "architecture": "X86_64",
                    }
                ],
                "networkInterfaces": [
                    {
                        "kind": "compute#networkInterface",
                        "name": "nic0",
                        "networkIP": "10.128.0.12",
                        "network": f"{SELF}/projects/{self.project}/"
                        f"{(body.get('networkInterfaces') or [{}])[0].get('network', '')}",
                        "stackType": "IPV4_ONLY",
                    }
                ],
                "metadata": {
                    "kind": "compute#metadata",
                    "fingerprint": "oY0CPw1Xmvk=",
                    **({"items": body["metadata"]["items"]} if (body.get("metadata") or {}).get("items") else {}),
                },
                "labels": body.get("labels") or {},
                "labelFingerprint": "2Vbq4nP8u3M=",
                "fingerprint": "c3rcUQ4jXn0=",
                "startRestricted": False,
                "deletionProtection": False,
            }
        )
        inst["scheduling"] = {
            "preemptible": inst.get("scheduling", {}).get("provisioningModel") == "SPOT",
            **inst.get("scheduling", {}),
        }
        return inst

    def _operation(self, request: Any) -> Reply:
        path, _ = self._parts(request)
        key = (path[-3], path[-1])
        if key not in self.operations:
            return error(404, "notFound", f"The resource 'operations/{key[1]}' was not found")
        entry = self.operations[key]
        op = entry["op"]
        if op["status"] != "DONE":
            op.update(status="DONE", progress=100, endTime=self._now())
            effect = entry["effect"]
            if "create" in effect and effect["create"] in self.instances:
                self.instances[effect["create"]]["status"] = "RUNNING"
            if "delete" in effect:
                self.instances.pop(effect["delete"], None)
            if "error" in effect:
                code, status = effect["error"]
                op.update(
                    error={"errors": [{"code": code, "message": f"fake: {code}"}]},
                    httpErrorStatusCode=status,
                    httpErrorMessage="SERVICE UNAVAILABLE",
                )
        return ok(op)

    # -- compact placement (resourcePolicies.insert / get, regionOperations.get) ------------------
    def _insert_policy(self, request: Any) -> Reply:
        path, _ = self._parts(request)
        region = path[-2]
        body = json.loads(request.body)
        self.policy_inserts.append(body)
        name = body.get("name", "")
        self.policy_calls.append(("POST", name))
        if (region, name) in self.policies:
            return error(
                409, "alreadyExists", f"The resource 'regions/{region}/resourcePolicies/{name}' already exists"
            )
        self.policies[(region, name)] = {
            **body,
            "kind": "compute#resourcePolicy",
            "id": str(next(self._ids)),
            "region": f"{SELF}/projects/{self.project}/regions/{region}",
            "selfLink": f"{SELF}/projects/{self.project}/regions/{region}/resourcePolicies/{name}",
            "status": "READY",
        }
        op_name = f"operation-{uuid.uuid4().hex[:13]}"
        op = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": op_name,
            "region": f"{SELF}/projects/{self.project}/regions/{region}",
            "operationType": "insert",
            "targetLink": self.policies[(region, name)]["selfLink"],
            "status": "RUNNING",
            "progress": 0,
            "selfLink": f"{SELF}/projects/{self.project}/regions/{region}/operations/{op_name}",
        }
        self.operations[(region, op_name)] = {"op": op, "effect": {}}
        return ok(op)

    def _get_policy(self, request: Any) -> Reply:
        path, _ = self._parts(request)
        key = (path[-3], path[-1])
        self.policy_calls.append(("GET", key[1]))
        if key not in self.policies:
            return error(404, "notFound", f"The resource 'regions/{key[0]}/resourcePolicies/{key[1]}' was not found")
        return ok(self.policies[key])

    def _region_operation(self, request: Any) -> Reply:
        path, _ = self._parts(request)
        entry = self.operations.get((path[-3], path[-1]))
        if entry is None:
            return error(404, "notFound", f"The resource 'operations/{path[-1]}' was not found")
        entry["op"].update(status="DONE", progress=100)
        return ok(entry["op"])

    def _get(self, request: Any) -> Reply:
        path, _ = self._parts(request)
        zone, name = path[-3], path[-1]
        if (zone, name) not in self.instances:
            return error(
                404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' was not found"
            )
        return ok(self.instances[(zone, name)])

    def _delete(self, request: Any) -> Reply:
        path, _ = self._parts(request)
        zone, name = path[-3], path[-1]
        inst = self.instances.get((zone, name))
        if inst is None:
            return error(
                404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' was not found"
            )
        inst["status"] = "STOPPING"
        return ok(self._new_operation(zone, "delete", name, inst["id"], {"delete": (zone, name)}))

    def _matching(self, query: dict[str, str], zone: str | None = None) -> list[dict[str, Any]] | Reply:
        found = [i for (z, _), i in sorted(self.instances.items()) if zone is None or z == zone]
        text = query.get("filter", "").strip()
        if text:
            match = _FILTER.match(text)
            if not match:
                return error(
                    400, "invalid", f"Invalid value for field 'filter': '{text}'. Invalid list filter expression."
                )
            key, value = match.groups()
            found = [i for i in found if i["labels"].get(key) == value]
        return found

    def _page(self, items: list[Any], query: dict[str, str]) -> tuple[list[Any], str | None]:
        start = int(query.get("pageToken") or 0)
        size = int(query.get("maxResults") or self.page_size)
        end = start + size
        return items[start:end], (str(end) if end < len(items) else None)

    def _list(self, request: Any) -> Reply:
        path, query = self._parts(request)
        zone = path[-2]
        found = self._matching(query, zone)
        if isinstance(found, tuple):
            return found
        page, token = self._page(found, query)
        body: dict[str, Any] = {
            "kind": "compute#instanceList",
            "id": f"projects/{self.project}/zones/{zone}/instances",
            "items": page,
            "selfLink": f"{self._zone_link(zone)}/instances",
        }
        if token:
            body["nextPageToken"] = token
        return ok(body)

    def _aggregated(self, request: Any) -> Reply:
        _, query = self._parts(request)
        found = self._matching(query)
        if isinstance(found, tuple):
            return found
        page, token = self._page(found, query)
        items: dict[str, Any] = {}
        for inst in page:
            scope = "zones/" + inst["zone"].rsplit("/", 1)[-1]
            items.setdefault(scope, {"instances": []})["instances"].append(inst)
        items.setdefault(
            "zones/us-east1-b",
            {
                "warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": "There are no results for scope 'zones/us-east1-b' on this page.",
                    "data": [{"key": "scope", "value": "zones/us-east1-b"}],
                }
            },
        )
        body: dict[str, Any] = {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.project}/aggregated/instances",
            "items": items,
            "selfLink": f"{SELF}/projects/{self.project}/aggregated/instances",
        }
        if token:
            body["nextPageToken"] = token
        return ok(body)
