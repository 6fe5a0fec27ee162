"""A plan document as the Kubernetes objects that place pods: Karpenter node pools, Kueue queues.

Pure and deterministic: the same plan and parameters give the same bytes (YAML written by a
serializer, keys in a fixed order, no timestamps); one kind per file.

Nodes (Karpenter v1), for the plan's AWS and Azure capacity:
* one ``NodePool`` per (workload, GPU model, market) with the plan's instance types and zones as
  requirements (``topology.k8s.aws/zone-id`` on AWS: the plan names zones by AZ id),
  ``karpenter.sh/capacity-type`` (``on-demand`` for on-demand and reserved instances: a reserved
  instance is a billing discount on on-demand capacity; ``spot``), a GPU limit equal to the pool's
  peak over the plan's horizon, a weight that prefers cheaper pools, the labels
  ``gpuprov.io/{plan,workload,market,gpu}`` and a ``nvidia.com/gpu`` NoSchedule taint;
* one ``EC2NodeClass`` (AMI alias, subnet and security-group selectors by the cluster's discovery
  tag, the node IAM role: parameters) and, where the plan uses Azure, one ``AKSNodeClass``.
GCP has no Karpenter: its capacity is rendered by ``gpuprov terraform`` (node groups with the same
labels are not produced here), and the output says so.

Queues (Kueue v1beta2):
* one ``ResourceFlavor`` per (GPU model, market), selecting the nodes by those labels and
  tolerating the taint;
* one ``ClusterQueue`` per workload, in one cohort, whose ``nvidia.com/gpu`` quota per flavor is
  the plan's GPUs for that workload in one window: ``clusterqueues.yaml`` holds the window in
  force at ``at``; ``windows/<window>/clusterqueues.yaml`` holds each window's, to apply at its
  edge (Kueue shrinks a quota without evicting admitted jobs unless preemption is configured, so
  a training gang finishes where it runs);
* one ``LocalQueue`` per (namespace, workload) for the namespaces given.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuprov.bootstrap import LABEL_DOMAIN, capacity_type
from gpuprov.names import K8S_CRONJOB, K8S_LABEL, identifier, unique
from gpuprov.plandoc import Allocation, PlanDocument, Window

GPU_RESOURCE = "nvidia.com/gpu"
LABEL = LABEL_DOMAIN
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Params:
    cluster: str = "gpuprov"  # the karpenter.sh/discovery tag of subnets and security groups
    node_role: str = "KarpenterNodeRole-gpuprov"
    ami_alias: str = "al2023@latest"
    namespaces: tuple[str, ...] = ()
    nodes: bool = True  # --nodes karpenter|none
    queues: bool = True  # --queues kueue|none


def name(*parts: str) -> str:
    """A DNS-1123 label from free text (gpuprov/names.py ``identifier``): the text itself when it
    is one, else normalised with 8 hex of its SHA-256, so two texts never share a name."""
    return identifier("-".join(p for p in parts if p), K8S_LABEL)


def window_key(window: str) -> str:
    """A window's name in objects, labels and directories: at most 37 characters, so that its
    CronJob ``gpuprov-window-<key>`` fits the 52 a CronJob may have."""
    return identifier(window, K8S_CRONJOB - len("gpuprov-window-"))


def window_keys(doc: PlanDocument) -> dict[str, str]:
    """Each period's key, refused when two windows would share one (naming both)."""
    return unique((w.name for w in periods(doc)), window_key, "window")


def label_value(text: str) -> str:
    """A label value: [A-Za-z0-9._-], at most 63 characters, alphanumeric at both ends."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("-._")
    return out or "x"


def _capacity_type(market: str) -> str:
    return capacity_type(market)


def _labels(doc: PlanDocument, workload: str, market: str, gpu: str) -> dict[str, str]:
    return {
        f"{LABEL}/plan": label_value(doc.plan_id),
        f"{LABEL}/workload": label_value(workload),
        f"{LABEL}/market": label_value(_capacity_type(market)),
        f"{LABEL}/gpu": label_value(gpu),
    }


def _pools(doc: PlanDocument, cloud: str) -> dict[tuple[str, str, str, str], list[Allocation]]:
    """Placements by (region, workload, GPU model, capacity type): a cluster, and so a NodePool,
    lives in one region; a plan that spans regions gets a pool per region for each cluster."""
    out: dict[tuple[str, str, str, str], list[Allocation]] = defaultdict(list)
    for a in doc.placements():
        if a.cloud == cloud and any(a.instances_by_slot):
            out[(a.region, a.workload, a.gpu, _capacity_type(a.market))].append(a)
    return dict(sorted(out.items()))


def pool_name(region: str, workload: str, gpu: str, capacity: str) -> str:
    """A NodePool's name (a label value: Karpenter labels its nodes with it)."""
    return name(workload, gpu, capacity, region)


def _peak_gpus(allocs: Sequence[Allocation], horizon: int) -> int:
    return max((sum(a.instances_by_slot[t] * a.gpus_per_instance for a in allocs) for t in range(horizon)), default=0)


def node_pools(doc: PlanDocument, p: Params) -> list[dict[str, Any]]:
    out = []
    for cloud, group, kind in (
        ("aws", "karpenter.k8s.aws", "EC2NodeClass"),
        ("azure", "karpenter.azure.com", "AKSNodeClass"),
    ):
        pools = _pools(doc, cloud)
        unique(("\x1f".join(k) for k in pools), lambda k: pool_name(*k.split("\x1f")), "node pool")
        prices = {key: min(a.unit_hourly_usd / a.gpus_per_instance for a in allocs) for key, allocs in pools.items()}
        ranked = sorted(prices, key=lambda k: (prices[k], k))
        for (region, workload, gpu, capacity), allocs in pools.items():
            requirements: list[dict[str, Any]] = [
                {
                    "key": "node.kubernetes.io/instance-type",
                    "operator": "In",
                    "values": sorted({a.instance_type for a in allocs}),
                },
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
            ]
            if cloud == "aws":
                zones = sorted({a.zone for a in allocs if a.zone})
                if zones:
                    requirements.append({"key": "topology.k8s.aws/zone-id", "operator": "In", "values": zones})
            else:
                requirements.append(
                    {
                        "key": "topology.kubernetes.io/region",
                        "operator": "In",
                        "values": [region],
                    }
                )
            weight = 100 - ranked.index((region, workload, gpu, capacity)) * 99 // max(1, len(ranked) - 1)
            out.append(
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "metadata": {
                        "name": pool_name(region, workload, gpu, capacity),
                        "labels": {f"{LABEL}/region": label_value(region)},
                    },
                    "spec": {
                        "template": {
                            "metadata": {"labels": _labels(doc, workload, capacity, gpu)},
                            "spec": {
                                "nodeClassRef": {"group": group, "kind": kind, "name": name(p.cluster)},
                                "requirements": requirements,
                                "taints": [{"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}],
                            },
                        },
                        "limits": {GPU_RESOURCE: _peak_gpus(allocs, doc.horizon_hours)},
                        "weight": max(1, min(100, weight)),
                        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"},
                    },
                }
            )
    return out


def node_classes(doc: PlanDocument, p: Params) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    selector = [{"tags": {"karpenter.sh/discovery": p.cluster}}]
    if _pools(doc, "aws"):
        out["ec2nodeclass.yaml"] = [
            {
                "apiVersion": "karpenter.k8s.aws/v1",
                "kind": "EC2NodeClass",
                "metadata": {"name": name(p.cluster)},
                "spec": {
                    "amiSelectorTerms": [{"alias": p.ami_alias}],
                    "subnetSelectorTerms": selector,
                    "securityGroupSelectorTerms": selector,
                    "role": p.node_role,
                    "tags": {f"{LABEL}/plan": label_value(doc.plan_id)},
                    "blockDeviceMappings": [
                        {
                            "deviceName": "/dev/xvda",
                            "ebs": {"volumeSize": "200Gi", "volumeType": "gp3", "encrypted": True},
                        }
                    ],
                },
            }
        ]
    if _pools(doc, "azure"):
        out["aksnodeclass.yaml"] = [
            {
                "apiVersion": "karpenter.azure.com/v1beta1",
                "kind": "AKSNodeClass",
                "metadata": {"name": name(p.cluster)},
                "spec": {"imageFamily": "Ubuntu2204", "osDiskSizeGB": 200},
            }
        ]
    return out


def window_quotas(doc: PlanDocument, slot: int) -> dict[str, dict[str, int]]:
    """GPUs per workload per flavor (GPU model, market) in one slot."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for a in doc.placements():
        n = a.instances_by_slot[slot] * a.gpus_per_instance
        out[a.workload][name(a.gpu, _capacity_type(a.market))] += n
    return {w: dict(v) for w, v in out.items()}


def flavors(doc: PlanDocument) -> list[dict[str, Any]]:
    keys = sorted({(a.gpu, _capacity_type(a.market)) for a in doc.placements() if any(a.instances_by_slot)})
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": name(gpu, capacity)},
            "spec": {
                "nodeLabels": {f"{LABEL}/gpu": label_value(gpu), f"{LABEL}/market": capacity},
                "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
        for gpu, capacity in keys
    ]


def cluster_queues(doc: PlanDocument, slot: int) -> list[dict[str, Any]]:
    all_flavors = [f["metadata"]["name"] for f in flavors(doc)]
    quotas = window_quotas(doc, slot)
    out = []
    for w in sorted(doc.workloads):
        mine = quotas.get(w, {})
        out.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": name("gpuprov", w)},
                "spec": {
                    "cohortName": name("gpuprov", doc.plan_id),
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU_RESOURCE],
                            "flavors": [
                                {"name": f, "resources": [{"name": GPU_RESOURCE, "nominalQuota": mine.get(f, 0)}]}
                                for f in all_flavors
                            ],
                        }
                    ],
                },
            }
        )
    return out


def local_queues(doc: PlanDocument, p: Params) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": name(w), "namespace": ns},
            "spec": {"clusterQueue": name("gpuprov", w)},
        }
        for ns in p.namespaces
        for w in sorted(doc.workloads)
    ]


# Every path ``render`` and ``window_cronjobs`` write, relative to the output directory: what
# ``gpuprov k8s --out`` recognises as its own output (anything else there is refused, never deleted).
OUTPUT_FILE = re.compile(
    r"(?:nodepools|ec2nodeclass|aksnodeclass|resourceflavors|clusterqueues|localqueues"
    r"|windows-cronjobs|windows-rbac|windows-serviceaccount)\.yaml"
    r"|windows/[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?/clusterqueues\.yaml"
)
OUTPUT_DIR = re.compile(r"windows(?:/[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)?")


def render(doc: PlanDocument, p: Params, at: datetime) -> dict[str, list[dict[str, Any]]]:
    """Map file name → its documents."""
    files: dict[str, list[dict[str, Any]]] = {}
    if p.nodes:
        pools = node_pools(doc, p)
        if pools:
            files["nodepools.yaml"] = pools
            files.update(node_classes(doc, p))
    if p.queues:
        files["resourceflavors.yaml"] = flavors(doc)
        files["clusterqueues.yaml"] = cluster_queues(doc, doc.slot_at(at))
        keys = window_keys(doc)
        for w in periods(doc):
            files[f"windows/{keys[w.name]}/clusterqueues.yaml"] = cluster_queues(doc, w.start_slot % doc.horizon_hours)
        if p.namespaces:
            files["localqueues.yaml"] = local_queues(doc, p)
    return dict(sorted(files.items()))


def dump(docs: list[dict[str, Any]]) -> str:
    import yaml

    return "".join(
        "---\n" + yaml.safe_dump(d, sort_keys=False, default_flow_style=False, allow_unicode=True) for d in docs
    )


def gcp_note(doc: PlanDocument) -> str | None:
    if any(a.cloud == "gcp" for a in doc.placements()):
        return "GCP capacity has no Karpenter: render it with gpuprov terraform (node groups); Kueue flavors cover it"
    return None


# ---------------------------------------------------------------------------- window edges
#
# Each window edge of the plan gets a CronJob that runs ``gpuprov k8s apply-window PLAN --window
# NAME`` at the window's first hour in the plan's time zone (``spec.timeZone``): it sets the
# ClusterQueues' quotas and the NodePools' limits to that window's values (``window_patches``).

CYCLE = {"day": 24, "week": 168}
WINDOW_SA = "gpuprov-windows"
WINDOW_NAMESPACE = "gpuprov"  # where the window CronJobs, their ServiceAccount and the gpuprov Secret live


def periods(doc: PlanDocument) -> tuple[Window, ...]:
    """The plan's windows and the stretches between them (the policy's default schedule), which
    together tile the cycle, by start. A stretch no window covers is named ``default`` (``default-2``,
    … when there are several); none when the plan has no windows."""
    if not doc.windows:
        return ()
    n = doc.horizon_hours
    covered = [False] * n
    for w in doc.windows:
        for t in window_slots(doc, w):
            covered[t] = True
    gaps: list[tuple[int, int]] = []
    for t in range(n):
        if not covered[t] and covered[(t - 1) % n]:
            end = t
            while not covered[end % n]:
                end += 1
            gaps.append((t, end % n))
    taken = {w.name for w in doc.windows}
    out = list(doc.windows)
    for i, (start, end) in enumerate(gaps, start=1):
        label = "default" if len(gaps) == 1 else f"default-{i}"
        while label in taken:
            label = f"gpuprov-{label}"
        out.append(Window(name=label, start_slot=start, end_slot=end))
    return tuple(sorted(out, key=lambda w: (w.start_slot % n, w.name)))


def edges(doc: PlanDocument) -> tuple[Window, ...]:
    """The periods whose start is an edge: none when fewer than two periods start at different
    slots (one window, or none, covering the whole cycle: nothing ever changes)."""
    found = periods(doc)
    if len({w.start_slot % doc.horizon_hours for w in found}) < 2:
        return ()
    return found


def cron(slot: int, origin: str) -> str:
    """Unix cron (minute hour dom month dow, Sunday = 0) for the start of ``slot``."""
    if origin == "week":
        return f"0 {slot % 24} * * {(slot // 24 + 1) % 7}"
    return f"0 {slot % 24} * * *"


def window_slots(doc: PlanDocument, w: Window) -> list[int]:
    """The slots a window covers, wrapping around the cycle (start == end: the whole cycle)."""
    n = doc.horizon_hours
    length = (w.end_slot - w.start_slot) % n or n
    return [(w.start_slot + k) % n for k in range(length)]


def window_limits(doc: PlanDocument, w: Window) -> dict[str, int]:
    """NodePool name → its GPU limit in one window: the pool's peak over the window's slots."""
    slots = window_slots(doc, w)
    out: dict[str, int] = {}
    for cloud in ("aws", "azure"):
        for (region, workload, gpu, capacity), allocs in _pools(doc, cloud).items():
            peak = max(sum(a.instances_by_slot[t] * a.gpus_per_instance for a in allocs) for t in slots)
            out[pool_name(region, workload, gpu, capacity)] = peak
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class Patch:
    """One merge patch of a cluster-scoped custom object."""

    group: str
    version: str
    plural: str
    name: str
    body: dict[str, Any]


def find_window(doc: PlanDocument, window: str) -> Window | None:
    """The period named ``window`` exactly, else the one whose key it is (never one whose name
    merely normalises alike: ``night`` does not find ``Night!``)."""
    found = periods(doc)
    keys = window_keys(doc)
    return next((w for w in found if w.name == window), None) or next(
        (w for w in found if keys[w.name] == window), None
    )


def window_patches(doc: PlanDocument, w: Window, p: Params) -> list[Patch]:
    """The patches that put one window's values in force: each ClusterQueue's ``resourceGroups``
    (the whole list: a JSON merge patch replaces lists) and each NodePool's GPU limit (a map: the
    merge keeps any other limit set by hand)."""
    out: list[Patch] = []
    if p.queues:
        for q in cluster_queues(doc, w.start_slot % doc.horizon_hours):
            body = {"spec": {"resourceGroups": q["spec"]["resourceGroups"]}}
            out.append(Patch("kueue.x-k8s.io", "v1beta2", "clusterqueues", q["metadata"]["name"], body))
    if p.nodes:
        for pool, limit in window_limits(doc, w).items():
            body = {"spec": {"limits": {GPU_RESOURCE: limit}}}
            out.append(Patch("karpenter.sh", "v1", "nodepools", pool, body))
    return out


def _cronjob_name(window: str) -> str:
    """A CronJob name (at most 52 characters: the controller appends a suffix to its Jobs)."""
    return f"gpuprov-window-{window_key(window)}"


def window_rbac(p: Params, namespace: str) -> list[dict[str, Any]]:
    """The rights ``apply-window`` uses (``k8s/apply.py``: one JSON merge patch per ClusterQueue
    and NodePool, by name; it reads nothing), for the window CronJobs' ServiceAccount only: a
    ClusterRole (both kinds are cluster-scoped) and its ClusterRoleBinding. A kind the output
    leaves out (``--nodes none``, ``--queues none``) is not granted."""
    rules = []
    if p.queues:
        rules.append({"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["patch"]})
    if p.nodes:
        rules.append({"apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["patch"]})
    api = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": f"{api}/v1", "kind": "ClusterRole", "metadata": {"name": WINDOW_SA}, "rules": rules},
        {
            "apiVersion": f"{api}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": WINDOW_SA},
            "roleRef": {"apiGroup": api, "kind": "ClusterRole", "name": WINDOW_SA},
            "subjects": [{"kind": "ServiceAccount", "name": WINDOW_SA, "namespace": namespace}],
        },
    ]


def window_cronjobs(
    doc: PlanDocument,
    image: str,
    p: Params,
    annotations: dict[str, str] | None = None,
    namespace: str = WINDOW_NAMESPACE,
) -> dict[str, list[dict[str, Any]]]:
    """``windows-serviceaccount.yaml``, ``windows-rbac.yaml`` and ``windows-cronjobs.yaml``: a
    CronJob per window edge, in ``namespace`` with its ServiceAccount, which the ClusterRoleBinding
    names. The Job reads the plan from gpuprov's database (the ``gpuprov`` Secret's
    ``database-url`` in that namespace, as the rebalancer's CronJob does) and patches ClusterQueues
    and NodePools (``window_rbac``)."""
    window_keys(doc)  # two windows that would share a CronJob are refused here, naming both
    flags = []
    if not p.nodes:
        flags += ["--nodes", "none"]
    if not p.queues:
        flags += ["--queues", "none"]
    jobs = []
    for w in edges(doc):
        container = {
            "name": "apply-window",
            "image": image,
            "args": ["k8s", "apply-window", doc.plan_id, "--window", w.name, *flags],
            "env": [
                {
                    "name": "GPUPROV_DATABASE_URL",
                    "valueFrom": {"secretKeyRef": {"name": "gpuprov", "key": "database-url"}},
                },
                {"name": "HOME", "value": "/tmp"},
            ],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
            "securityContext": {
                "runAsNonRoot": True,
                "readOnlyRootFilesystem": True,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        }
        jobs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {
                    "name": _cronjob_name(w.name),
                    "namespace": namespace,
                    "labels": {f"{LABEL}/plan": label_value(doc.plan_id), f"{LABEL}/window": window_key(w.name)},
                },
                "spec": {
                    "schedule": cron(w.start_slot, doc.slot_origin),
                    "timeZone": doc.timezone,
                    "concurrencyPolicy": "Replace",  # a newer edge wins over a stuck older one
                    "startingDeadlineSeconds": 3600,  # missed (controller down): still apply within the hour
                    "successfulJobsHistoryLimit": 3,
                    "failedJobsHistoryLimit": 3,
                    "jobTemplate": {
                        "spec": {
                            "backoffLimit": 3,
                            "activeDeadlineSeconds": 600,
                            "template": {
                                "spec": {
                                    "serviceAccountName": WINDOW_SA,
                                    "restartPolicy": "Never",
                                    "securityContext": {
                                        "runAsNonRoot": True,
                                        "runAsUser": 10001,
                                        "fsGroup": 10001,
                                        "seccompProfile": {"type": "RuntimeDefault"},
                                    },
                                    "containers": [container],
                                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                                }
                            },
                        }
                    },
                },
            }
        )
    account: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": WINDOW_SA, "namespace": namespace},
    }
    if annotations:
        account["metadata"]["annotations"] = dict(sorted(annotations.items()))
    return {
        "windows-cronjobs.yaml": jobs,
        "windows-rbac.yaml": window_rbac(p, namespace),
        "windows-serviceaccount.yaml": [account],
    }
