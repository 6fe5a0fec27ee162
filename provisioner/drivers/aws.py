"""AWS EC2 driver (boto3), imported lazily: nothing here loads boto3 until a driver is made.

Instance ids are ``<region>/<instance-id>`` so that terminate knows where to call.
Zones: the catalog names AWS zones by AZ id (``use1-az1``), which is the same physical zone
in every account; the driver maps it to this account's zone name with
``describe_availability_zones``. Idempotency does not rest on EC2's ClientToken (moto does
not honour it, and EC2 refuses a reused token after termination): the token is a tag, and
``launch`` looks it up before calling ``run_instances``; the ClientToken is still passed.
Retries: botocore's standard retry mode (throttling and 5xx, with backoff) within the network
policy (``sdk/net.py``: failed connections retried twice, a hung server not at all, then
"cannot reach aws <endpoint>", never retried by the launch loop) for every call but
``run_instances``, which gets a single attempt per try: between tries the driver looks the
token up again, because a call that failed on the wire (a timeout, a 503 after the fact)
may still have started the instance. So a retried launch never makes a duplicate.

Gangs: a training gang's instances launch in one cluster placement group per (fleet,
workload, zone), found by name (``describe_placement_groups``) or created
(``create_placement_group``, strategy ``cluster``; a concurrent creation's
``InvalidPlacementGroup.Duplicate`` counts as found), once per driver.

Any answer the driver does not expect (a shape botocore cannot parse, a missing key, an SDK
exception it does not know) is one ``ProvisioningError`` line naming the call, never a traceback
(``_boundary``).
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuprov.bootstrap import Bootstrap
from gpuprov.errors import (
    CapacityError,
    CredentialsError,
    GpuprovError,
    ProvisioningError,
    QuotaError,
    TransientError,
    UnreachableError,
)
from gpuprov.models import Cloud, Market, Site
from provisioner.base import (
    OWNER_TAG,
    TOKEN_TAG,
    InstanceHandle,
    LaunchRequest,
    read_tags,
)
from sdk import aws as sdk_aws

OWNER_SAFE = re.compile(r"^[A-Za-z0-9_.:/=+@ -]{1,128}$")  # no EC2 filter wildcard

log = logging.getLogger(__name__)

LIVE_STATES = ["pending", "running", "stopping", "stopped"]


class AwsDriver:
    cloud = Cloud.AWS

    def __init__(
        self,
        regions: Sequence[str] = (),
        image: str | None = None,
        subnets: dict[str, str] | None = None,
        key_name: str | None = None,
        session: Any = None,
        security_groups: Sequence[str] = (),
        max_attempts: int = 5,
        bootstrap: Bootstrap | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        aws = sdk_aws.load("the AWS driver")
        boto3, self._exc = aws.boto3, aws.exceptions
        self.regions = sorted(set(regions))  # empty: every region the account can see
        self._home = self.regions[0] if self.regions else "us-east-1"
        self.image = image
        self.subnets = subnets or {}  # zone id or name -> subnet id
        self.key_name = key_name
        self.security_groups = list(security_groups)
        self.bootstrap = bootstrap or Bootstrap()
        self._session = session or boto3.session.Session()
        self._config = sdk_aws.config(max_attempts=max_attempts)
        self._once = sdk_aws.config(total_max_attempts=1)
        self.max_attempts = max_attempts
        self._groups: set[tuple[str, str]] = set()  # (region, name) of placement groups known to exist
        self._grouping = threading.Lock()  # a gang's launches run at once: one of them makes the group
        self._sleep = sleep
        self._clients: dict[str, Any] = {}
        self._launchers: dict[str, Any] = {}
        self._zones: dict[str, dict[str, str]] = {}
        self._efa: dict[tuple[str, str], bool] = {}

    # -- plumbing --------------------------------------------------------------------
    def client(self, region: str) -> Any:
        if region not in self._clients:
            self._clients[region] = sdk_aws.client(self._session, "ec2", region, self._config)
        return self._clients[region]

    def launcher(self, region: str) -> Any:
        """A client without botocore retries, for run_instances (see the module docstring)."""
        if region not in self._launchers:
            self._launchers[region] = sdk_aws.client(self._session, "ec2", region, self._once)
        return self._launchers[region]

    def _translate(self, what: str, exc: Any, pool: Site | None = None) -> ProvisioningError:
        """gpuprov's error for an EC2 ClientError (never echoing credentials)."""
        code = sdk_aws.code_of(exc)
        message = exc.response.get("Error", {}).get("Message", "")
        found = sdk_aws.kind(exc)
        if pool is not None and found is sdk_aws.ErrorKind.QUOTA:
            return QuotaError(
                f"AWS quota reached for {pool.instance_type} {pool.market} in {pool.location}: {code}", pool=pool
            )
        if pool is not None and found is sdk_aws.ErrorKind.CAPACITY:
            return CapacityError(
                f"AWS has no capacity for {pool.instance_type} {pool.market} in {pool.location}: {code}", pool=pool
            )
        if found is sdk_aws.ErrorKind.AUTH:
            return CredentialsError(
                f"AWS refused the credentials for {what}: {code}",
                hint="check the AWS credential chain (profile, environment, role)",
            )
        if found is sdk_aws.ErrorKind.TRANSIENT:
            return TransientError(f"AWS {what} kept failing after retries: {code}")
        return ProvisioningError(f"AWS {what} failed: {code}: {message}")

    def _call(self, what: str, fn: Any, pool: Site | None = None, _via: Any = None, **kwargs: Any) -> Any:
        """Call EC2 and translate its failures into gpuprov's error tree (``_via``: the client,
        when ``fn`` is not one of its methods, to name its endpoint)."""
        try:
            return fn(**kwargs)
        except self._exc.ClientError as exc:
            raise self._translate(what, exc, pool) from exc
        except GpuprovError:
            raise
        except Exception as exc:  # the network, or an answer botocore cannot read
            raise sdk_aws.translated(exc, what, _via or getattr(fn, "__self__", None)) from exc

    def zone_name(self, region: str, zone: str) -> str:
        """This account's zone name for a catalog zone (an AZ id like use1-az1, or a name)."""
        if region not in self._zones:
            ec2 = self.client(region)
            zones = self._call("describe_availability_zones", ec2.describe_availability_zones)
            self._zones[region] = {z["ZoneId"]: z["ZoneName"] for z in zones["AvailabilityZones"]}
        names = self._zones[region]
        if zone in names:
            return names[zone]
        if zone in names.values():
            return zone
        raise ProvisioningError(f"zone {zone} is not in {region} for this AWS account")

    def zone_id(self, region: str, name: str) -> str:
        self.zone_name(region, name)  # fills the cache
        by_name = {v: k for k, v in self._zones[region].items()}
        return by_name.get(name, name)

    def _supports_efa(self, region: str, instance_type: str) -> bool:
        key = (region, instance_type)
        if key not in self._efa:
            out = self._call(
                "describe_instance_types", self.client(region).describe_instance_types, InstanceTypes=[instance_type]
            )
            info = out["InstanceTypes"][0].get("NetworkInfo", {}) if out["InstanceTypes"] else {}
            self._efa[key] = bool(info.get("EfaSupported"))
        return self._efa[key]

    def _handle(self, region: str, inst: dict[str, Any]) -> InstanceHandle:
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        fields = read_tags(tags, Market.SPOT if inst.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND)
        launched = inst.get("LaunchTime")
        if isinstance(launched, datetime):
            launched = launched.astimezone(UTC) if launched.tzinfo else launched.replace(tzinfo=UTC)
        zone_name = inst.get("Placement", {}).get("AvailabilityZone")
        return InstanceHandle(
            cloud=Cloud.AWS,
            instance_id=f"{region}/{inst['InstanceId']}",
            region=region,
            zone=self.zone_id(region, zone_name) if zone_name else None,
            instance_type=inst["InstanceType"],
            market=fields.market,
            state=inst["State"]["Name"],
            owner=fields.owner,
            plan_id=fields.plan_id,
            token=fields.token,
            workload=fields.workload,
            problem=fields.problem,
            launched_at=launched if isinstance(launched, datetime) else None,
        )

    def _find(self, region: str, filters: list[dict[str, Any]]) -> list[InstanceHandle]:
        ec2 = self.client(region)
        paginator = ec2.get_paginator("describe_instances")
        pages = self._call(
            "describe_instances",
            lambda: list(
                paginator.paginate(Filters=[*filters, {"Name": "instance-state-name", "Values": LIVE_STATES}])
            ),
            _via=ec2,
        )
        return [self._handle(region, i) for page in pages for r in page["Reservations"] for i in r["Instances"]]

    @contextlib.contextmanager
    def _boundary(self, what: str) -> Iterator[None]:
        """The last resort of every verb: whatever escaped the translation is one error line."""
        try:
            yield
        except GpuprovError:
            raise
        except self._exc.ClientError as exc:
            raise self._translate(what, exc) from exc
        except Exception as exc:
            raise sdk_aws.translated(exc, what) from exc

    # -- the three verbs ----------------------------------------------------------------
    def describe(self, owner: str) -> list[InstanceHandle]:
        with self._boundary("describe_instances"):
            return self._describe(owner)

    def launch(self, request: LaunchRequest) -> InstanceHandle:
        with self._boundary(f"launch {request.instance_type[:40]} in {request.zone or request.region}"):
            return self._launch(request)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        with self._boundary("terminate_instances"):
            self._terminate(instance_ids)

    def _describe(self, owner: str) -> list[InstanceHandle]:
        """Instances of this fleet in every region of the driver (all the account's regions when
        none were given). The owner is matched exactly: EC2 filter values treat * and ? as
        wildcards, so a name carrying them is refused, and every answer is checked again."""
        if not OWNER_SAFE.fullmatch(owner):
            raise ProvisioningError(f"refusing to filter on a fleet name with wildcards: {owner[:40]!r}")
        regions = self.all_regions()
        for region in regions:  # clients are made here, one thread: boto3 sessions are not thread-safe
            self.client(region)
        wanted = [{"Name": f"tag:{OWNER_TAG}", "Values": [owner]}]
        out: list[InstanceHandle] = []
        if len(regions) <= 1:
            for region in regions:
                out += self._find(region, wanted)
        else:  # the account's regions in parallel: paginated, filtered server-side by the owner tag
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(8, len(regions)), thread_name_prefix="gpuprov-describe") as pool:
                for found in pool.map(lambda r: self._find(r, wanted), regions):
                    out += found
        return sorted((h for h in out if h.owner == owner), key=lambda h: h.instance_id)

    def all_regions(self) -> list[str]:
        """The regions given, or every region the account can see (described once, then cached)."""
        if not self.regions:
            answer = self._call("describe_regions", self.client(self._home).describe_regions)
            self.regions = sorted(r["RegionName"] for r in answer.get("Regions", []))
        return self.regions

    def _launch(self, request: LaunchRequest) -> InstanceHandle:
        if request.region not in self.regions:
            self.regions = sorted({*self.regions, request.region})
        existing = self._find(request.region, [{"Name": f"tag:{TOKEN_TAG}", "Values": [request.token]}])
        if existing:
            return existing[0]
        if not self.image:
            raise ProvisioningError(
                "no AWS image (AMI id) configured", hint="set aws.image in the gpuprov config file or GPUPROV_AWS_IMAGE"
            )
        zone = self.zone_name(request.region, request.zone) if request.zone else None
        pool = Site(Cloud.AWS.value, request.zone or request.region, request.instance_type, request.market.value)
        tags = [{"Key": k, "Value": v} for k, v in sorted(request.tags().items())]
        params: dict[str, Any] = {
            "ImageId": self.image,
            "InstanceType": request.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": request.token,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
        }
        placement: dict[str, Any] = {}
        if zone:
            placement["AvailabilityZone"] = zone
        if request.placement_group:
            self._placement_group(request.region, request.placement_group)
            placement["GroupName"] = request.placement_group
        if placement:
            params["Placement"] = placement
        if request.market is Market.SPOT:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        subnet = self.subnets.get(request.zone or "") or (self.subnets.get(zone) if zone else None)
        if subnet:
            # a gang on an EFA type gets an EFA primary interface in its cluster placement group
            interface: dict[str, Any] = {"DeviceIndex": 0, "SubnetId": subnet, "DeleteOnTermination": True}
            if self.security_groups:
                interface["Groups"] = self.security_groups  # with NetworkInterfaces they go here
            if request.placement_group and self._supports_efa(request.region, request.instance_type):
                interface["InterfaceType"] = "efa"
            params["NetworkInterfaces"] = [interface]
        elif self.security_groups:
            params["SecurityGroupIds"] = self.security_groups
        if self.key_name:
            params["KeyName"] = self.key_name
        user_data = self.bootstrap.user_data("aws", request.workload, request.market.value, request.plan_id)
        if user_data is not None:
            params["UserData"] = user_data  # botocore base64-encodes it for RunInstances
        token_filter = [{"Name": f"tag:{TOKEN_TAG}", "Values": [request.token]}]
        for attempt in range(1, self.max_attempts + 1):
            try:
                out = self._call("run_instances", self.launcher(request.region).run_instances, pool=pool, **params)
                return self._handle(request.region, out["Instances"][0])
            except UnreachableError:
                # no answer to a sent RunInstances: it may have started the instance. One look by
                # its token (which, if the endpoint is gone, fails the same way), never a new call
                started = self._find(request.region, token_filter)
                if started:
                    return started[0]
                raise
            except TransientError:
                if attempt == self.max_attempts:
                    raise
            self._sleep(min(20.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0))
            started = self._find(request.region, token_filter)  # the failed call may have started it
            if started:
                return started[0]
        raise TransientError("AWS run_instances: no attempt left")  # unreachable: the loop returns or raises

    def _placement_group(self, region: str, name: str) -> None:
        """The gang's cluster placement group: found by name, else created (idempotent)."""
        with self._grouping:
            self._find_or_create_group(region, name)

    def _find_or_create_group(self, region: str, name: str) -> None:
        if (region, name) in self._groups:
            return
        ec2 = self.client(region)
        try:
            found = ec2.describe_placement_groups(GroupNames=[name])
        except self._exc.ClientError as exc:
            if sdk_aws.code_of(exc) != "InvalidPlacementGroup.Unknown":
                raise self._translate("describe_placement_groups", exc) from exc
            found = {"PlacementGroups": []}
        groups = [g for g in found.get("PlacementGroups", []) if g.get("GroupName") == name]
        if groups:
            strategy = str(groups[0].get("Strategy") or "cluster")
            if strategy != "cluster":
                raise ProvisioningError(
                    f"AWS placement group {name} in {region} exists with strategy {strategy[:20]}",
                    hint="a gang needs a cluster placement group: delete or rename that group",
                )
            self._groups.add((region, name))
            return
        try:
            ec2.create_placement_group(
                GroupName=name,
                Strategy="cluster",
                TagSpecifications=[{"ResourceType": "placement-group", "Tags": [{"Key": OWNER_TAG, "Value": name}]}],
            )
        except self._exc.ClientError as exc:
            if sdk_aws.code_of(exc) != "InvalidPlacementGroup.Duplicate":
                raise self._translate("create_placement_group", exc) from exc
        self._groups.add((region, name))

    def _terminate(self, instance_ids: Sequence[str]) -> None:
        by_region: dict[str, list[str]] = {}
        for full in instance_ids:
            region, _, iid = full.partition("/")
            if not iid:
                raise ProvisioningError(f"not an AWS instance id of gpuprov's form region/i-…: {full!r}")
            by_region.setdefault(region, []).append(iid)
        for region, ids in sorted(by_region.items()):
            ec2 = self.client(region)
            for start in range(0, len(ids), 500):
                batch = ids[start : start + 500]
                try:
                    ec2.terminate_instances(InstanceIds=batch)
                except self._exc.ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") != "InvalidInstanceID.NotFound":
                        raise self._translate("terminate_instances", exc) from exc
                    for iid in batch:  # one unknown id fails the batch: retry one by one
                        self._terminate_one(ec2, iid)

    def _terminate_one(self, ec2: Any, iid: str) -> None:
        try:
            ec2.terminate_instances(InstanceIds=[iid])
        except self._exc.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "InvalidInstanceID.NotFound",
                "InvalidInstanceID.Malformed",
            ):
                raise self._translate("terminate_instances", exc) from exc
