"""What runs the rebalancer on a schedule, as ``rebalance --emit`` writes it: deployable as emitted.

Kubernetes (``cronjob``): a ``ServiceAccount`` (cloud identity annotations — IRSA, GKE Workload
Identity, Azure workload identity — as given), a ``ConfigMap`` holding the local config file
(refused when it holds anything that looks like a secret: credentials come from the identity),
and a ``CronJob`` running ``gpuprov rebalance --once --yes`` with every tuning flag given, the
image pinned by tag or digest, a deadline (``activeDeadlineSeconds``: a hung pass cannot block
every later run under ``concurrencyPolicy: Forbid``), resources, a restricted security context and
history limits. The lease and journal must outlive each Job's filesystem, so a SQLite database
is refused (PostgreSQL through the ``gpuprov`` Secret's ``database-url``) unless allowed.

systemd (``systemd``): a oneshot service and its timer, running as a named user with a start
timeout, a required ``EnvironmentFile`` (written with mode 0600 by ``--out``: a missing file fails
the unit instead of silently pointing it at an empty default database; it names the database and
the config file the emitting user has, so the pass shares their plans, journal and lease),
hardening (``ProtectSystem=strict``, ``ProtectHome=read-only``) with ``ReadWritePaths=`` the
directory of a SQLite database (its journal files live beside it) so that the sandbox can still
write it, and the ``gpuprov`` binary of the interpreter that emitted it.

Every value goes through a YAML serializer or is validated and quoted for systemd; nothing from
a flag or a file is pasted into a template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from gpuprov.errors import UsageError

# An image reference in the Docker grammar (distribution/reference): an optional registry host
# with an optional port, lower-case path components, then a tag and/or a sha256 digest.
_HOST_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE = re.compile(
    rf"(?P<name>(?:{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]{{1,5}})?/)?{_PATH_PART}(?:/{_PATH_PART})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)
ANNOTATION_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
SECRET_WORDS = ("password", "secret", "token", "credential", "private", "access_key", "client_secret")
BOOTSTRAP_SECRET = "gpuprov-bootstrap"  # the Secret a credential-holding bootstrap file comes from
BOOTSTRAP_MOUNT = "/etc/gpuprov-bootstrap"
UNIT_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Job:
    owner: str
    plan: str | None
    every: timedelta
    tuning: Sequence[tuple[str, str]] = ()  # (flag, value) pairs given on the command line
    image: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    config_yaml: str | None = None  # the local config file's text, for the ConfigMap
    config_files: Mapping[str, str] = field(default_factory=dict)  # beside it: the bootstrap files
    secret_files: Sequence[str] = ()  # bootstrap files that look like they hold credentials: from a Secret
    deadline: timedelta = timedelta(minutes=30)


def args(job: Job) -> list[str]:
    out = ["rebalance", "--once", "--yes", "--owner", job.owner]
    if job.plan:
        out += ["--plan", job.plan]
    for flag, value in job.tuning:
        out += [flag, value]
    return out


def check_image(image: str | None, what: str = "--emit cronjob") -> str:
    if not image:
        raise UsageError(f"{what} needs --image (a gpuprov image you built: see the Dockerfile)")
    m = IMAGE.fullmatch(image)
    pinned = m is not None and (m["digest"] or (m["tag"] and m["tag"] != "latest"))
    if m is None or not pinned or len(m["name"]) > 255:
        raise UsageError(
            "--image must be an image reference pinned by a tag (not latest) or a digest",
            hint="e.g. ghcr.io/acme/gpuprov:0.2.0 or ...@sha256:<64 hex>",
        )
    return image


def check_config(
    text: str, where: str, bootstrap: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str], list[str]]:
    """The config file's text for a ConfigMap, refused if any key looks like a secret; the files
    to put beside it: the config's bootstrap files (``bootstrap``: cloud → text, as the config
    loaded them), as ``bootstrap-<cloud>.sh`` with the config's paths pointing there (a path of
    this machine means nothing in the pod); and the names of those that look like they hold a
    credential (an AWS key id, a private key, a password: gpuprov/secrets.py), which are not
    copied at all: the config points them at the ``gpuprov-bootstrap`` Secret's mount instead."""
    import yaml

    from gpuprov.safeyaml import load_text
    from gpuprov.secrets import credential_like

    doc = load_text(text, where)

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                key = str(k).lower()
                if any(word in key for word in SECRET_WORDS):
                    raise UsageError(
                        f"{where}: {path}{k}: looks like a secret; a ConfigMap is no place for it",
                        hint="credentials come from the workload identity; remove it from the config",
                    )
                walk(v, f"{path}{k}.")
        elif isinstance(node, list):
            for item in node:
                walk(item, path)

    walk(doc, "")
    found = credential_like(text)
    if found is not None:
        raise UsageError(
            f"{where}: holds what looks like {found}; a ConfigMap is no place for it",
            hint="credentials come from the workload identity; remove it from the config",
        )
    files: dict[str, str] = {}
    secret: list[str] = []
    section = doc.get("bootstrap") if isinstance(doc, dict) else None
    if isinstance(section, dict):
        for cloud, script in sorted((bootstrap or {}).items()):
            file = f"bootstrap-{cloud}.sh"
            if credential_like(script) is not None:
                secret.append(file)
                section[cloud] = f"{BOOTSTRAP_MOUNT}/{file}"  # the Secret's mount
            else:
                files[file] = script
                section[cloud] = file  # relative: beside config.yaml in the mount
    return (str(yaml.safe_dump(doc, sort_keys=True)) if doc is not None else ""), files, secret


def kubernetes(job: Job, cron: str) -> list[dict[str, Any]]:
    from gpuprov.names import K8S_CRONJOB, identifier

    # one name for the ServiceAccount, ConfigMap and CronJob: a CronJob's is at most 52 characters
    # (a 40-character owner would make 58); a longer one is cut with a hash of the whole
    name = identifier(f"gpuprov-rebalance-{job.owner}", K8S_CRONJOB)
    for key in job.annotations:
        if not ANNOTATION_KEY.fullmatch(key):
            raise UsageError(f"--service-account-annotation: {key[:60]!r} is not an annotation key")
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": name,
                **({"annotations": dict(sorted(job.annotations.items()))} if job.annotations else {}),
            },
        }
    ]
    mounts, volumes = [], []
    env: list[dict[str, Any]] = [
        {"name": "GPUPROV_DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": "gpuprov", "key": "database-url"}}},
        {"name": "HOME", "value": "/tmp"},
    ]
    if job.config_yaml is not None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"config.yaml": job.config_yaml, **dict(sorted(job.config_files.items()))},
            }
        )
        mounts.append({"name": "config", "mountPath": "/etc/gpuprov", "readOnly": True})
        volumes.append({"name": "config", "configMap": {"name": name}})
        env.append({"name": "GPUPROV_CONFIG", "value": "/etc/gpuprov/config.yaml"})
    if job.secret_files:
        mounts.append({"name": "bootstrap", "mountPath": BOOTSTRAP_MOUNT, "readOnly": True})
        volumes.append(
            {
                "name": "bootstrap",
                "secret": {
                    "secretName": BOOTSTRAP_SECRET,
                    "items": [{"key": f, "path": f} for f in sorted(job.secret_files)],
                },
            }
        )
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    volumes.append({"name": "tmp", "emptyDir": {}})
    container = {
        "name": "rebalance",
        "image": job.image,
        "args": args(job),
        "env": env,
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    docs.append(
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": name},
            "spec": {
                "schedule": cron,
                "concurrencyPolicy": "Forbid",  # the database lease also keeps a second run from acting
                "startingDeadlineSeconds": 300,
                "successfulJobsHistoryLimit": 3,
                "failedJobsHistoryLimit": 5,
                "jobTemplate": {
                    "spec": {
                        "backoffLimit": 0,
                        "activeDeadlineSeconds": int(job.deadline.total_seconds()),
                        "template": {
                            "spec": {
                                "serviceAccountName": name,
                                "restartPolicy": "Never",
                                "securityContext": {
                                    "runAsNonRoot": True,
                                    "runAsUser": 10001,
                                    "fsGroup": 10001,
                                    "seccompProfile": {"type": "RuntimeDefault"},
                                },
                                "containers": [container],
                                "volumes": volumes,
                            }
                        },
                    }
                },
            },
        }
    )
    return docs


def dump(docs: list[dict[str, Any]]) -> str:
    import yaml

    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)


def systemd_quote(word: str) -> str:
    """One argument of ExecStart, quoted per systemd.syntax: no control characters at all."""
    if any(ord(c) < 32 or ord(c) == 127 for c in word):
        raise UsageError("a value for a systemd unit holds a control character (a newline?)")
    if word and all(c.isalnum() or c in "-_./:=@+" for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$") + '"'


def env_value(value: str) -> str:
    """A value of an EnvironmentFile line (systemd.exec: double quotes, backslash escapes)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError("a value for the units' environment file holds a control character")
    return '"' + "".join("\\" + c if c in '\\"`$' else c for c in value) + '"'


def systemd(job: Job, exe: str, user: str, env_file: str, writable: Sequence[str] = ()) -> dict[str, str]:
    """File name → text of the service and the timer; ``writable``: directories the pass must
    write under the sandbox (a SQLite database's)."""
    if not UNIT_USER.fullmatch(user):
        raise UsageError(f"--user: {user[:40]!r} is not a user name")
    for path in writable:
        if not path.startswith("/") or any(c in path for c in "\n\r\0"):
            raise UsageError(f"a path for the units is not absolute: {path[:80]!r}")
    exec_start = " ".join(systemd_quote(a) for a in [exe, *args(job)])
    read_write = f"ReadWritePaths={' '.join(systemd_quote(p) for p in writable)}\n" if writable else ""
    unit = f"gpuprov-rebalance-{job.owner}"
    service = (
        "[Unit]\n"
        f"Description=gpuprov rebalancing pass for fleet {job.owner}\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"User={user}\n"
        f"ExecStart={exec_start}\n"
        f"EnvironmentFile={systemd_quote(env_file)}\n"
        f"TimeoutStartSec={int(job.deadline.total_seconds())}\n"
        "NoNewPrivileges=yes\n"
        "ProtectSystem=strict\n"
        "ProtectHome=read-only\n"
        f"{read_write}"
        "PrivateTmp=yes\n"
        "ProtectKernelTunables=yes\n"
        "ProtectControlGroups=yes\n"
        "RestrictSUIDSGID=yes\n"
    )
    timer = (
        "[Unit]\n"
        f"Description=Run the gpuprov rebalancing pass for fleet {job.owner} every {job.every}\n\n"
        "[Timer]\n"
        "OnBootSec=2min\n"
        f"OnUnitActiveSec={int(job.every.total_seconds())}s\n"
        "Persistent=true\n\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )
    return {f"{unit}.service": service, f"{unit}.timer": timer}
