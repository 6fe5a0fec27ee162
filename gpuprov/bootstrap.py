"""VM bootstrap: the config's user data / startup script / custom data per cloud, and the node
labels and taint gpuprov gives the Kubernetes nodes it launches.

Config (``bootstrap`` section; paths relative to the config file's directory)::

    bootstrap:
      aws: bootstrap/eks-join.sh      # EC2 RunInstances UserData (launch template user_data)
      gcp: bootstrap/gke-join.sh      # instance metadata startup-script
      azure: bootstrap/aks-join.sh    # os_profile.custom_data (base64)
      kubelet: true                   # prepend the node labels and taint (below); default false

Each file is read once, at config load: it must exist, be UTF-8 text without NUL bytes, and fit
its cloud's limit — AWS user data 16 KiB before base64, a GCP metadata value 256 KiB, Azure
custom data 64 KiB once base64-encoded — with room for the kubelet line when ``kubelet`` is on.

``kubelet: true`` inserts, after the script's ``#!`` line (so every file must be a shell script
then, not cloud-init YAML), one line::

    export KUBELET_EXTRA_ARGS='--node-labels=gpuprov.io/workload=W,gpuprov.io/market=M,gpuprov.io/plan=P \
    --register-with-taints=nvidia.com/gpu=true:NoSchedule'

(one line: shown broken here), which a node-join script (the EKS AMI's bootstrap, a kubeadm
drop-in) passes to the kubelet. The values are the launch's workload, market (``spot`` or
``on-demand``, as Karpenter's capacity type and the Kueue ResourceFlavors name it) and plan id,
each checked as a Kubernetes label value and the whole argument shell-quoted (``shlex.quote``):
nothing from input reaches the shell unquoted.

The same three facts are also the instance's cloud tags (GCE labels): ``tag_key`` maps the node
label key ``gpuprov.io/workload`` to the tag key ``gpuprov-workload`` (GCE label keys allow no
``.`` or ``/``), and the drivers' tag names (``provisioner.base``) are made with it.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprov.errors import ConfigError
from gpuprov.names import show

LABEL_DOMAIN = "gpuprov.io"
CLOUDS = ("aws", "gcp", "azure")
KEYS = (*CLOUDS, "kubelet")
# the cloud's limit, in bytes of what it measures: AWS the raw user data (before base64),
# GCP the metadata value, Azure the base64 of custom data
LIMITS = {"aws": 16 * 1024, "gcp": 256 * 1024, "azure": 64 * 1024}
LIMIT_TEXT = {
    "aws": "16 KiB (EC2 user data, before base64)",
    "gcp": "256 KiB (a GCE metadata value)",
    "azure": "64 KiB once base64-encoded (Azure custom data)",
}
GPU_TAINT = "nvidia.com/gpu=true:NoSchedule"
# a Kubernetes label value: at most 63 characters, alphanumeric at both ends, [-._A-Za-z0-9] inside
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# room for the kubelet line: fixed text plus three label values of at most 63 characters, quoted
KUBELET_RESERVE = 512


def tag_key(label_key: str) -> str:
    """A node label key as a cloud tag / GCE label key: ``gpuprov.io/workload`` → ``gpuprov-workload``."""
    prefix = f"{LABEL_DOMAIN}/"
    if not label_key.startswith(prefix) or not re.fullmatch(r"[a-z][a-z0-9_-]{0,40}", label_key[len(prefix) :]):
        raise ValueError(f"not a gpuprov node label key: {label_key!r}")
    return "gpuprov-" + label_key[len(prefix) :]


def capacity_type(market: str) -> str:
    """The market as node label value: ``spot``, else ``on-demand`` (reserved instances are a
    billing discount on on-demand capacity), as Karpenter's capacity type names it."""
    return "spot" if market == "spot" else "on-demand"


def node_labels(workload: str, market: str | None, plan_id: str) -> dict[str, str]:
    """The node labels of a VM gpuprov launches; each value checked as a Kubernetes label value.
    ``market`` None: not known where the node boots (no market label)."""
    out = {f"{LABEL_DOMAIN}/workload": workload}
    if market is not None:
        out[f"{LABEL_DOMAIN}/market"] = capacity_type(market)
    out[f"{LABEL_DOMAIN}/plan"] = plan_id
    for key, value in out.items():
        if not value or not LABEL_VALUE.fullmatch(value):
            raise ConfigError(
                f"bootstrap: {show(value)} is not a valid Kubernetes label value for {key}",
                hint="at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            )
    return out


def kubelet_line(workload: str, market: str | None, plan_id: str) -> str:
    labels = ",".join(f"{k}={v}" for k, v in node_labels(workload, market, plan_id).items())
    return "export KUBELET_EXTRA_ARGS=" + shlex.quote(f"--node-labels={labels} --register-with-taints={GPU_TAINT}")


def encoded_size(cloud: str, text: str) -> int:
    """What the cloud counts against its limit."""
    raw = len(text.encode("utf-8"))
    return 4 * ((raw + 2) // 3) if cloud == "azure" else raw


def b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


@dataclass(frozen=True)
class Bootstrap:
    """The config's ``bootstrap`` section, files read: cloud → script text."""

    scripts: Mapping[str, str] = field(default_factory=dict)
    kubelet: bool = False
    paths: Mapping[str, str] = field(default_factory=dict)  # cloud → the file it was read from

    def __bool__(self) -> bool:
        return bool(self.scripts)

    def script(self, cloud: str) -> str | None:
        return self.scripts.get(cloud)

    def credential(self, cloud: str) -> str | None:
        """What in this cloud's file looks like a credential (gpuprov/secrets.py), or None: such a
        file is passed to the VMs but never copied into a manifest or a Terraform file."""
        from gpuprov.secrets import credential_like

        text = self.scripts.get(cloud)
        return None if text is None else credential_like(text)

    def user_data(self, cloud: str, workload: str, market: str | None, plan_id: str) -> str | None:
        """The text a VM of this cloud boots with (None: no bootstrap for this cloud)."""
        text = self.scripts.get(cloud)
        if text is None:
            return None
        if self.kubelet:
            first, sep, rest = text.partition("\n")
            text = f"{first}\n{kubelet_line(workload, market, plan_id)}\n{rest if sep else ''}"
        size = encoded_size(cloud, text)
        if size > LIMITS[cloud]:  # unreachable after load()'s check with the reserve; kept as the guard
            raise ConfigError(f"bootstrap.{cloud}: {size:,} bytes, over the limit of {LIMIT_TEXT[cloud]}")
        return text


def load(raw: Any, base: Path, where: str) -> Bootstrap:
    """The ``bootstrap`` section, validated; ``base`` is the directory relative paths start from."""
    if raw is None:
        return Bootstrap()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: bootstrap: must be a mapping of cloud to a file path")
    unknown = sorted(str(k) for k in raw if k not in KEYS)
    if unknown:
        raise ConfigError(f"{where}: bootstrap.{show(unknown[0])}: unknown key (expected one of: {', '.join(KEYS)})")
    kubelet = raw.get("kubelet", False)
    if not isinstance(kubelet, bool):
        raise ConfigError(f"{where}: bootstrap.kubelet: must be true or false")
    scripts: dict[str, str] = {}
    paths: dict[str, str] = {}
    for cloud in CLOUDS:
        if raw.get(cloud) is None:
            continue
        scripts[cloud] = _read(raw[cloud], base, cloud, kubelet, f"{where}: bootstrap.{cloud}")
        found = Path(raw[cloud]).expanduser()
        paths[cloud] = str(found if found.is_absolute() else base / found)
    if kubelet and not scripts:
        raise ConfigError(
            f"{where}: bootstrap.kubelet: no script to add the node labels to",
            hint="give bootstrap.aws, bootstrap.gcp or bootstrap.azure: the script that joins the node",
        )
    return Bootstrap(scripts=scripts, kubelet=kubelet, paths=paths)


def _read(value: Any, base: Path, cloud: str, kubelet: bool, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096 or any(c in value for c in "\r\n\0"):
        raise ConfigError(f"{where}: must be a file path")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base / path
    limit = LIMITS[cloud] if cloud != "azure" else LIMITS[cloud] * 3 // 4
    try:
        if path.is_dir():
            raise ConfigError(f"{where}: is a directory, not a file: {show(str(path), 80)}")
        if not path.is_file():
            raise ConfigError(f"{where}: no such file: {show(str(path), 80)}")
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {show(str(path), 80)}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if len(data) > limit:  # cut mid-character: too large anyway
            text = data.decode("utf-8", errors="replace")
        else:
            raise ConfigError(f"{where}: {show(str(path), 80)} is not UTF-8 text") from None
    if "\0" in text:
        raise ConfigError(f"{where}: {show(str(path), 80)} is not text (it holds NUL bytes)")
    if not text.strip():
        raise ConfigError(f"{where}: {show(str(path), 80)} is empty")
    room = LIMITS[cloud] - (KUBELET_RESERVE if kubelet else 0)
    size = encoded_size(cloud, text)
    if len(data) > limit or size > room:
        extra = f" with {KUBELET_RESERVE} bytes kept for the kubelet line" if kubelet else ""
        raise ConfigError(f"{where}: {show(str(path), 80)} is over the limit of {LIMIT_TEXT[cloud]}{extra}")
    if kubelet and not text.startswith("#!"):
        raise ConfigError(
            f"{where}: bootstrap.kubelet needs a shell script (starting with #!), {show(str(path), 80)} is not one",
            hint="the kubelet line is inserted after the #! line; cloud-init YAML cannot take it",
        )
    return text
