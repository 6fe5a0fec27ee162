"""Window edges: a CronJob per edge, and ``gpuprov k8s apply-window`` against a fake API server.

The fake API server is a real HTTP server on 127.0.0.1 that records every request and answers
like the API server does for a merge patch (200 with the object, 404 for an unknown name); the
``kubernetes`` client reaches it through a kubeconfig written for the test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuprov.cli import app
from k8s.check import problems
from k8s.render import (
    WINDOW_SA,
    Params,
    cron,
    edges,
    window_cronjobs,
    window_limits,
    window_patches,
    window_rbac,
    window_slots,
)
from tests.plans import planned

runner = CliRunner()
IMAGE = "ghcr.io/acme/gpuprov:1.2"


class FakeApi:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.missing: set[str] = set()
        self.status: int | None = None
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_PATCH(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                api.requests.append(
                    {
                        "method": "PATCH",
                        "path": self.path,
                        "content_type": self.headers.get("Content-Type"),
                        "authorization": self.headers.get("Authorization"),
                        "body": json.loads(body),
                    }
                )
                name = self.path.rsplit("/", 1)[-1]
                if api.status is not None or name in api.missing:
                    code = api.status or 404
                    out = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": "no"}
                else:
                    code, out = 200, {"metadata": {"name": name}, **json.loads(body)}
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def fake_api(tmp_path: Path) -> Iterator[tuple[FakeApi, Path]]:
    api = FakeApi()
    thread = threading.Thread(target=api.server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "fake",
            }
        )
    )
    try:
        yield api, kubeconfig
    finally:
        api.server.shutdown()
        api.server.server_close()


def _save(policy: str, gpus: str = "64") -> str:
    r = runner.invoke(app, ["plan", "--policy", policy, "--gpus", gpus, "--type", "a100", "--save", "-o", "json"])
    assert r.exit_code == 0, r.output
    return str(json.loads(r.stdout)["plan_id"])


def test_cron_is_the_window_start_in_the_plans_time_zone() -> None:
    assert cron(8, "day") == "0 8 * * *"
    assert cron(0, "week") == "0 0 * * 1"  # Monday 00:00
    assert cron(24 * 6 + 20, "week") == "0 20 * * 0"  # Sunday 20:00
    doc = planned("three_clouds")
    jobs = window_cronjobs(doc, IMAGE, Params())["windows-cronjobs.yaml"]
    assert [(j["spec"]["schedule"], j["spec"]["timeZone"]) for j in jobs] == [
        (cron(w.start_slot, doc.slot_origin), "Europe/Berlin") for w in edges(doc)
    ]


@pytest.mark.parametrize("case", ["day_night", "weekday_weekend", "three_clouds"])
def test_one_valid_cronjob_per_edge_running_apply_window(case: str) -> None:
    doc = planned(case)
    files = window_cronjobs(doc, IMAGE, Params(), {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"})
    jobs = files["windows-cronjobs.yaml"]
    assert len(jobs) == len(edges(doc)) >= max(2, len(doc.windows))
    for job, w in zip(jobs, edges(doc), strict=True):
        assert problems(job) == []  # Kubernetes 1.35 batch/v1, strict
        assert len(job["metadata"]["name"]) <= 52
        c = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        assert c["image"] == IMAGE
        assert c["args"] == ["k8s", "apply-window", doc.plan_id, "--window", w.name]
    assert len({j["metadata"]["name"] for j in jobs}) == len(jobs)
    assert problems(files["windows-serviceaccount.yaml"][0]) == []
    role, binding = files["windows-rbac.yaml"]
    assert problems(role) == [] and problems(binding) == []  # Kubernetes 1.35 rbac/v1, strict
    account = files["windows-serviceaccount.yaml"][0]["metadata"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"], "namespace": "gpuprov"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    for job in jobs:
        assert job["metadata"]["namespace"] == account["namespace"]
        assert job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"] == account["name"]


def _granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.mark.parametrize(("nodes", "queues"), [(True, True), (True, False), (False, True)])
def test_window_rbac_grants_exactly_what_the_patches_need(nodes: bool, queues: bool) -> None:
    doc = planned("day_night")
    p = Params(nodes=nodes, queues=queues)
    needed = {(x.group, x.plural, "patch") for w in edges(doc) for x in window_patches(doc, w, p)}
    role, binding = window_rbac(p, "ops")
    assert _granted(role["rules"]) == needed
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": WINDOW_SA, "namespace": "ops"}


def test_the_rbac_schema_is_strict() -> None:
    role, binding = window_rbac(Params(), "gpuprov")
    assert problems({**role, "rules": [{**role["rules"][0], "verb": ["get"]}]})  # a typo is an error
    assert problems({**role, "rules": [{"apiGroups": ["karpenter.sh"], "resources": ["nodepools"]}]})  # no verbs
    assert problems({**binding, "roleRef": {**binding["roleRef"], "namespace": "x"}})
    assert problems({**role, "kind": "Role", "rules": "all"})


def test_window_limits_are_each_pools_peak_within_the_window() -> None:
    doc = planned("day_night")
    peak_all: dict[str, int] = {}
    for w in doc.windows:
        for pool, limit in window_limits(doc, w).items():
            peak_all[pool] = max(peak_all.get(pool, 0), limit)
    from k8s.render import node_pools

    assert peak_all == {p["metadata"]["name"]: p["spec"]["limits"]["nvidia.com/gpu"] for p in node_pools(doc, Params())}
    slots = [window_slots(doc, w) for w in doc.windows]
    assert sorted(t for s in slots for t in s) == list(range(doc.horizon_hours))  # the windows tile the day


def test_apply_window_sends_exactly_the_windows_patches(fake_api: tuple[FakeApi, Path]) -> None:
    api, kubeconfig = fake_api
    pid = _save("day-night")
    r = runner.invoke(app, ["k8s", "apply-window", pid, "--window", "night", "--kubeconfig", str(kubeconfig)])
    assert r.exit_code == 0, r.output
    from gpuprov.commands import common
    from k8s.render import find_window

    doc = common.load_plan(pid)
    w = find_window(doc, "night")
    assert w is not None
    want = window_patches(doc, w, Params())
    assert [(q["path"], q["body"]) for q in api.requests] == [
        (f"/apis/{p.group}/{p.version}/{p.plural}/{p.name}", p.body) for p in want
    ]
    assert {q["method"] for q in api.requests} == {"PATCH"}
    # the emitted ClusterRole grants each request sent: verb patch on that group and plural
    sent = {(q["path"].split("/")[2], q["path"].split("/")[4], q["method"].lower()) for q in api.requests}
    assert sent <= _granted(window_rbac(Params(), "gpuprov")[0]["rules"])
    assert {q["content_type"] for q in api.requests} == {"application/merge-patch+json"}
    assert {q["authorization"] for q in api.requests} == {"Bearer t0ken"}
    # the quotas sent are the plan's GPUs per workload at the window's start
    slot = w.start_slot % doc.horizon_hours
    for q in api.requests:
        if "/clusterqueues/" in q["path"]:
            workload = q["path"].rsplit("/", 1)[-1].removeprefix("gpuprov-")
            sent = sum(
                r["nominalQuota"] for f in q["body"]["spec"]["resourceGroups"][0]["flavors"] for r in f["resources"]
            )
            assert sent == sum(
                a.instances_by_slot[slot] * a.gpus_per_instance for a in doc.placements() if a.workload == workload
            )
    assert sum("/clusterqueues/" in q["path"] for q in api.requests) == len(doc.workloads)
    assert any("/nodepools/" in q["path"] for q in api.requests)


def test_apply_window_queues_only_and_errors(fake_api: tuple[FakeApi, Path]) -> None:
    api, kubeconfig = fake_api
    pid = _save("day-night")
    base = ["k8s", "apply-window", pid, "--kubeconfig", str(kubeconfig)]
    r = runner.invoke(app, [*base, "--window", "day", "--nodes", "none"])
    assert r.exit_code == 0, r.output
    assert api.requests and all("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/" in q["path"] for q in api.requests)
    api.requests.clear()
    api.missing = {"gpuprov-inference"}
    r = runner.invoke(app, [*base, "--window", "day"])
    assert r.exit_code == 2 and "gpuprov-inference is not in the cluster" in r.stderr
    api.missing, api.status = set(), 403
    r = runner.invoke(app, [*base, "--window", "day"])
    assert r.exit_code == 4 and "refused" in r.stderr and len(r.stderr.splitlines()) == 2  # error + hint
    api.requests.clear()
    r = runner.invoke(app, [*base, "--window", "dusk"])
    assert r.exit_code == 2 and "no window" in r.stderr and api.requests == []
    r = runner.invoke(app, ["k8s", "apply-window", pid])
    assert r.exit_code == 2 and r.stderr.startswith("error:")


def test_cli_emits_cronjobs_and_refuses_a_plan_without_edges(tmp_path: Path) -> None:
    pid = _save("day-night")
    out = tmp_path / "k8s"
    r = runner.invoke(app, ["k8s", pid, "--out", str(out), "--windows", "cronjob", "--image", IMAGE])
    assert r.exit_code == 0, r.output
    docs = [d for d in yaml.safe_load_all((out / "windows-cronjobs.yaml").read_text()) if d]
    assert [d["kind"] for d in docs] == ["CronJob", "CronJob"]
    rbac = [d for d in yaml.safe_load_all((out / "windows-rbac.yaml").read_text()) if d]
    assert [d["kind"] for d in rbac] == ["ClusterRole", "ClusterRoleBinding"]
    r = runner.invoke(app, ["k8s", "--check", str(out)])
    assert r.exit_code == 0, r.stdout
    ns = tmp_path / "ns"
    r = runner.invoke(
        app, ["k8s", pid, "--out", str(ns), "--windows", "cronjob", "--image", IMAGE, "--windows-namespace", "ops"]
    )
    assert r.exit_code == 0, r.output
    assert "namespace: ops" in (ns / "windows-rbac.yaml").read_text()
    again = tmp_path / "again"
    runner.invoke(app, ["k8s", pid, "--out", str(again), "--windows", "cronjob", "--image", IMAGE])
    assert (again / "windows-cronjobs.yaml").read_bytes() == (out / "windows-cronjobs.yaml").read_bytes()
    for image in ("localhost:5000/gpuprov:0.1", "registry.example.com:5000/acme/gpuprov:0.1"):
        port = tmp_path / "port"
        r = runner.invoke(app, ["k8s", pid, "--out", str(port), "--windows", "cronjob", "--image", image])
        assert r.exit_code == 0, r.output
        jobs = [d for d in yaml.safe_load_all((port / "windows-cronjobs.yaml").read_text()) if d]
        assert {d["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"] for d in jobs} == {image}
    flat = _save("constant")
    for bad in (
        [flat, "--windows", "cronjob", "--image", IMAGE],
        [pid, "--windows", "cronjob"],
        [pid, "--windows", "cronjob", "--image", "ghcr.io/acme/gpuprov"],
        [pid, "--windows", "cronjob", "--image", "ghcr.io/acme/gpuprov:latest"],
        [pid, "--windows", "cronjob", "--image", "localhost:5000/gpuprov"],
        [pid, "--windows", "cronjob", "--image", "localhost:5000/gpuprov:latest"],
        [pid, "--windows", "cronjob", "--image", "localhost:5000/gpuprov:0.1 && id"],
        [pid, "--windows", "sometimes"],
        [pid, "--windows", "cronjob", "--image", IMAGE, "--service-account-annotation", "no-equals"],
        [pid, "--windows", "cronjob", "--image", IMAGE, "--windows-namespace", "Bad_NS"],
    ):
        r = runner.invoke(app, ["k8s", *bad, "--out", str(tmp_path / "new")])
        assert r.exit_code == 2, (bad, r.output)
        assert len(r.stderr.strip().splitlines()) <= 2 and r.stderr.startswith("error:"), r.stderr
        assert not (tmp_path / "new").exists()
    r = runner.invoke(app, ["k8s", flat, "--out", str(tmp_path / "new"), "--windows", "cronjob", "--image", IMAGE])
    assert "no window edges" in r.stderr


def test_apply_window_loads_the_kubernetes_client_lazily() -> None:
    import subprocess
    import sys

    code = "import sys\nimport gpuprov.cli\nprint(any(m.startswith('kubernetes') for m in sys.modules))\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


def test_dates_do_not_matter_to_the_cronjobs() -> None:
    doc = planned("weekday_weekend")
    a = window_cronjobs(doc, IMAGE, Params())
    b = window_cronjobs(doc, IMAGE, Params())
    assert a == b
    assert datetime(2026, 1, 1, tzinfo=UTC)  # no clock is read


def test_the_stretch_outside_every_window_gets_its_own_edge() -> None:
    doc = planned("three_clouds")  # one window, day 08-20; the policy's default the rest
    assert [(w.name, w.start_slot, w.end_slot) for w in edges(doc)] == [("day", 8, 20), ("default", 20, 8)]
    jobs = window_cronjobs(doc, IMAGE, Params())["windows-cronjobs.yaml"]
    assert [j["spec"]["schedule"] for j in jobs] == ["0 8 * * *", "0 20 * * *"]
    from k8s.render import render

    files = render(doc, Params(), datetime(2026, 6, 2, 12, tzinfo=UTC))
    assert "windows/default/clusterqueues.yaml" in files
