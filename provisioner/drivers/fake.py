"""An in-memory cloud for tests and dry runs, optionally kept in a JSON file between processes.

``FakeDriver(cloud, capacity={(zone, instance_type, market): n})`` refuses launches past a
pool's capacity with ``CapacityError``, as a real cloud would. With ``state_file`` the
instances survive the process (used by CLI tests that run apply more than once).

``latency`` (seconds) makes every call take that long, as a real cloud's API does, and ``rate``
(calls per second, per driver) throttles like an API rate limit: a call past it raises
``TransientError`` with a throttling message, which the caller's retry must absorb. Both come from
``GPUPROV_FAKE_LATENCY`` and ``GPUPROV_FAKE_RATE`` when the CLI makes fakes, so benchmarks measure
gpuprov against a cloud-like clock rather than an in-process mock. Thread-safe.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuprov.errors import CapacityError, TransientError
from gpuprov.models import Cloud, Market, Site
from provisioner.base import InstanceHandle, LaunchRequest

LIVE = ("pending", "running")


class FakeDriver:
    def __init__(
        self,
        cloud: Cloud,
        capacity: dict[tuple[str, str, str], int] | None = None,
        state_file: Path | None = None,
        latency: float = 0.0,
        rate: float | None = None,
    ) -> None:
        self.cloud = cloud
        self.capacity = capacity or {}
        self.state_file = state_file
        self.latency = latency
        self.rate = rate
        self.calls: list[str] = []
        self._instances: dict[str, InstanceHandle] = {}
        self._seq = 0
        self._lock = threading.RLock()
        self._window: list[float] = []
        self._load()

    def _call(self, name: str) -> None:
        """Record the call, refuse it past the rate limit, then wait the latency (outside the lock).
        Only a launch is refused: describe and terminate go through their SDK's own retries in
        the real drivers, which the fake stands in for by waiting its turn."""
        while True:
            with self._lock:
                if self.rate is None:
                    break
                now = time.monotonic()
                self._window = [t for t in self._window if now - t < 1.0]
                if len(self._window) < self.rate:
                    self._window.append(now)
                    break
                if name == "launch":
                    self.calls.append(name)
                    raise TransientError(f"{self.cloud.value}: Throttling: rate exceeded ({self.rate:g} calls/s)")
                pause = 1.0 - (now - self._window[0])
            time.sleep(max(0.001, pause))
        with self._lock:
            self.calls.append(name)
        if self.latency:
            time.sleep(self.latency)

    def _load(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        data = json.loads(self.state_file.read_text())
        self._seq = data["seq"]
        for raw in data["instances"]:
            raw["cloud"], raw["market"] = Cloud(raw["cloud"]), Market(raw["market"])
            raw["launched_at"] = datetime.fromisoformat(raw["launched_at"]) if raw["launched_at"] else None
            handle = InstanceHandle(**raw)
            self._instances[handle.instance_id] = handle

    def _save(self) -> None:
        if self.state_file is None:
            return

        def enc(h: InstanceHandle) -> dict[str, Any]:
            d = asdict(h)
            d["cloud"], d["market"] = h.cloud.value, h.market.value
            d["launched_at"] = h.launched_at.isoformat() if h.launched_at else None
            return d

        blob = json.dumps({"seq": self._seq, "instances": [enc(h) for h in self._instances.values()]})
        fd, tmp = tempfile.mkstemp(dir=self.state_file.parent)
        with os.fdopen(fd, "w") as fh:
            fh.write(blob)
        os.replace(tmp, self.state_file)

    def describe(self, owner: str) -> list[InstanceHandle]:
        self._call("describe")
        with self._lock:
            return sorted(
                (h for h in self._instances.values() if h.owner == owner and h.state in LIVE),
                key=lambda h: h.instance_id,
            )

    def launch(self, request: LaunchRequest) -> InstanceHandle:
        self._call("launch")
        with self._lock:
            return self._launch(request)

    def _launch(self, request: LaunchRequest) -> InstanceHandle:
        for h in self._instances.values():
            if h.token == request.token and h.state in LIVE:
                return h
        key = (request.zone or request.region, request.instance_type, request.market.value)
        if key in self.capacity:
            used = sum(
                1
                for h in self._instances.values()
                if h.state in LIVE and (h.zone or h.region, h.instance_type, h.market.value) == key
            )
            if used >= self.capacity[key]:
                raise CapacityError(
                    f"no capacity for {request.instance_type} {request.market} in {key[0]}",
                    pool=Site(self.cloud.value, key[0], request.instance_type, request.market.value),
                )
        self._seq += 1
        handle = InstanceHandle(
            cloud=self.cloud,
            instance_id=f"fake-{self._seq:06d}",
            region=request.region,
            zone=request.zone,
            instance_type=request.instance_type,
            market=request.market,
            state="running",
            owner=request.owner,
            plan_id=request.plan_id,
            token=request.token,
            workload=request.workload,
            launched_at=datetime.now(UTC),
        )
        self._instances[handle.instance_id] = handle
        self._save()
        return handle

    def terminate(self, instance_ids: Sequence[str]) -> None:
        self._call("terminate")
        with self._lock:
            for i in instance_ids:
                h = self._instances.get(i)
                if h is not None and h.state in LIVE:
                    self._instances[i] = InstanceHandle(**{**asdict(h), "state": "terminated"})
            self._save()

    def interrupt(self, instance_id: str) -> None:
        """Test helper: the cloud reclaims a spot instance."""
        h = self._instances[instance_id]
        self._instances[instance_id] = InstanceHandle(**{**asdict(h), "state": "terminated"})
        self._save()
