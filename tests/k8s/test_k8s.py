"""Kubernetes output: what the planner's plans become, checked against the real schemas."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuprov.cli import app
from k8s.check import problems
from k8s.render import OUTPUT_FILE, Params, dump, render, window_cronjobs
from tests.plans import CASES, planned

runner = CliRunner()
AT = datetime(2026, 6, 2, 12, tzinfo=UTC)  # a Tuesday, noon UTC


def flat(files: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [d for docs in files.values() for d in docs]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_planned_case_renders_to_valid_manifests(case: str) -> None:
    doc = planned(case)
    files = render(doc, Params(namespaces=("ml",)), AT)
    found = [p for name, docs in files.items() for i, d in enumerate(docs) for p in problems(d, f"{name}[{i}]")]
    assert found == []
    assert {d["kind"] for d in flat(files)} >= {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    # byte-stable
    again = render(doc, Params(namespaces=("ml",)), AT)
    assert {k: dump(v) for k, v in files.items()} == {k: dump(v) for k, v in again.items()}
    # every name is one gpuprov k8s --out recognises as its own (else a re-render is refused)
    every = {**files, **window_cronjobs(doc, "ghcr.io/acme/gpuprov:1", Params())}
    assert [n for n in every if not OUTPUT_FILE.fullmatch(n)] == []


@pytest.mark.parametrize("case", ["day_night", "weekday_weekend", "three_clouds"])
def test_each_windows_quotas_are_the_plans_gpus_per_workload(case: str) -> None:
    doc = planned(case)
    files = render(doc, Params(), AT)
    assert doc.windows
    for w in doc.windows:
        queues = {q["metadata"]["name"]: q for q in files[f"windows/{_name(w.name)}/clusterqueues.yaml"]}
        slot = w.start_slot % doc.horizon_hours
        for workload in doc.workloads:
            want = sum(
                a.instances_by_slot[slot] * a.gpus_per_instance for a in doc.placements() if a.workload == workload
            )
            q = queues[f"gpuprov-{workload}"]
            got = sum(r["nominalQuota"] for f in q["spec"]["resourceGroups"][0]["flavors"] for r in f["resources"])
            assert got == want, (w.name, workload)
            assert got >= doc.demand[workload][slot % len(doc.demand[workload])]
    now = {q["metadata"]["name"]: q for q in files["clusterqueues.yaml"]}
    slot = doc.slot_at(AT)
    for workload in doc.workloads:
        want = sum(a.instances_by_slot[slot] * a.gpus_per_instance for a in doc.placements() if a.workload == workload)
        got = sum(
            r["nominalQuota"]
            for f in now[f"gpuprov-{workload}"]["spec"]["resourceGroups"][0]["flavors"]
            for r in f["resources"]
        )
        assert got == want


def test_node_pools_match_the_allocations() -> None:
    doc = planned("day_night")
    pools = render(doc, Params(), AT)["nodepools.yaml"]
    want: dict[tuple[str, str, str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    peak: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0] * doc.horizon_hours)
    for a in doc.placements():
        if a.cloud in ("aws", "azure") and any(a.instances_by_slot):
            key = (a.region, a.workload, a.gpu, "spot" if a.market == "spot" else "on-demand")
            want[key]["types"].add(a.instance_type)
            if a.zone:
                want[key]["zones"].add(a.zone)
            for t, n in enumerate(a.instances_by_slot):
                peak[key][t] += n * a.gpus_per_instance
    assert len(pools) == len(want)
    for pool in pools:
        labels = pool["spec"]["template"]["metadata"]["labels"]
        req = {r["key"]: set(r["values"]) for r in pool["spec"]["template"]["spec"]["requirements"]}
        key = (
            pool["metadata"]["labels"]["gpuprov.io/region"],
            labels["gpuprov.io/workload"],
            labels["gpuprov.io/gpu"],
            labels["gpuprov.io/market"],
        )
        assert req["node.kubernetes.io/instance-type"] == want[key]["types"]
        assert req["karpenter.sh/capacity-type"] == {key[3]}
        assert req.get("topology.k8s.aws/zone-id", set()) == want[key]["zones"]
        assert pool["spec"]["limits"]["nvidia.com/gpu"] == max(peak[key])
        assert pool["spec"]["template"]["spec"]["taints"][0]["key"] == "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        ("spec.weight", 1000, "1000"),
        ("spec.template.spec.requirements.0.operator", "Maybe", "Maybe"),
        ("spec.limitz", {"cpu": 1}, "limitz"),  # unknown field: strict, as kubectl is
        ("spec.template.spec.taints.0.effect", "Sometimes", "Sometimes"),
    ],
)
def test_the_checker_catches_broken_manifests(path: str, value: Any, words: str) -> None:
    pool = json.loads(json.dumps(render(planned("day_night"), Params(), AT)["nodepools.yaml"][0]))
    node = pool
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[keys[-1]] = value
    found = problems(pool)
    assert found and any(words in p for p in found), found


def test_cli_writes_checks_and_replaces_a_directory_atomically(tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json"])
    pid = json.loads(r.stdout)["plan_id"]
    out = tmp_path / "k8s"
    r = runner.invoke(app, ["k8s", pid, "--out", str(out), "--namespace", "research"])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["k8s", "--check", str(out)])
    assert r.exit_code == 0, r.stdout
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.yaml")}
    (out / "windows" / "gone").mkdir()
    (out / "windows" / "gone" / "clusterqueues.yaml").write_text("---\n")  # a window of an older render
    r = runner.invoke(app, ["k8s", pid, "--out", str(out), "--namespace", "research"])
    assert r.exit_code == 0
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.yaml")}
    assert after == before  # replaced whole: its own stale file is gone
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left
    for bad in (["--namespace", "Bad_NS"], ["--namespace", "x" * 70], ["--cluster", "a b"]):
        r = runner.invoke(app, ["k8s", pid, "--out", str(tmp_path / "new"), *bad])
        assert r.exit_code == 2 and r.stderr.startswith("error:"), r.stderr
        assert not (tmp_path / "new").exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    doc = yaml.safe_load((out / "resourceflavors.yaml").read_text().split("---\n")[1])
    doc["spec"]["nodeLabelz"] = {}
    (broken / "f.yaml").write_text(yaml.safe_dump(doc))
    r = runner.invoke(app, ["k8s", "--check", str(broken)])
    assert r.exit_code == 2 and "nodeLabelz" in r.stdout


def test_the_emitted_cronjob_validates_against_kubernetes_1_35() -> None:
    r = runner.invoke(
        app,
        ["rebalance", "--emit", "cronjob", "--every", "15m", "--image", "ghcr.io/acme/gpuprov:1.2"],
        env={"GPUPROV_DATABASE_URL": "postgresql+psycopg://u:pw@db/gpuprov"},
    )
    assert r.exit_code == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert docs and all(problems(d) == [] for d in docs), [problems(d) for d in docs]


def _name(text: str) -> str:
    from k8s.render import name

    return name(text)


def test_windows_cover_the_week() -> None:
    from k8s.render import periods, window_slots

    doc = planned("weekday_weekend")
    files = render(doc, Params(), AT)
    found = periods(doc)
    assert sorted(k for k in files if k.startswith("windows/")) == sorted(
        f"windows/{_name(w.name)}/clusterqueues.yaml" for w in found
    )
    assert len(doc.windows) == 11  # weekday days (5), weekday nights (4), weekend days (2)
    # and the policy's default schedule where no window is: Monday 00-08 and Friday 20-24
    assert [(w.name, w.start_slot, w.end_slot) for w in found if w not in doc.windows] == [
        ("default-1", 0, 8),
        ("default-2", 116, 120),
    ]
    assert sorted(t for w in found for t in window_slots(doc, w)) == list(range(168))


def _saved_plan() -> str:
    r = runner.invoke(app, ["plan", "--policy", "day-night", "--gpus", "64", "--type", "a100", "--save", "-o", "json"])
    return str(json.loads(r.stdout)["plan_id"])


@pytest.mark.parametrize(
    ("foreign", "named"),
    [
        ("notes.md", "notes.md"),
        ("keep/data.db", "keep/"),
        ("windows/day/notes.md", "windows/day/notes.md"),
        ("stale.yaml", "stale.yaml"),
    ],
)
def test_out_holding_files_gpuprov_did_not_write_is_refused_and_kept(tmp_path: Path, foreign: str, named: str) -> None:
    pid = _saved_plan()
    out = tmp_path / "scratch"
    (out / foreign).parent.mkdir(parents=True)
    (out / foreign).write_text("mine\n")
    (out / "nodepools.yaml").write_text("hand-made\n")
    r = runner.invoke(app, ["k8s", pid, "--out", str(out)])
    assert r.exit_code == 2, r.stdout
    assert r.stderr.startswith("error:") and f"holds '{named}', which gpuprov k8s did not write" in r.stderr
    assert (out / foreign).read_text() == "mine\n" and (out / "nodepools.yaml").read_text() == "hand-made\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left behind


def test_a_link_in_out_is_refused(tmp_path: Path) -> None:
    pid = _saved_plan()
    out = tmp_path / "k8s"
    out.mkdir()
    (tmp_path / "elsewhere.yaml").write_text("x\n")
    (out / "nodepools.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    r = runner.invoke(app, ["k8s", pid, "--out", str(out)])
    assert r.exit_code == 2 and "holds 'nodepools.yaml'" in r.stderr
    assert (out / "nodepools.yaml").is_symlink()


@pytest.mark.parametrize("out", ["", " ", ".", "./", "..", "sub/..", "/"])
def test_out_that_is_no_replaceable_directory_is_one_line(
    out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = _saved_plan()
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    monkeypatch.chdir(work / "sub")
    r = runner.invoke(app, ["k8s", pid, "--out", out])
    assert r.exit_code == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.stderr.startswith("error:") and len(errors) == 1, r.stderr  # and at most a hint line
    assert all(line.startswith(("error:", "hint:")) for line in r.stderr.splitlines()), r.stderr
    assert [p.name for p in work.iterdir()] == ["sub"] and not any((work / "sub").iterdir())


def test_out_naming_the_current_directory_by_path_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid = _saved_plan()
    work = tmp_path / "w"
    work.mkdir()
    monkeypatch.chdir(work)
    r = runner.invoke(app, ["k8s", pid, "--out", str(work)])
    assert r.exit_code == 2 and "current directory" in r.stderr
    assert not any(work.iterdir())
