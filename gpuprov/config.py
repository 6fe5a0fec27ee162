"""gpuprov's config file: cloud settings for the drivers, limits, negotiated discounts.

Found at ``$GPUPROV_CONFIG`` or ``<user config dir>/gpuprov/config.yaml``; optional. Example::

    owner: research-fleet
    aws: {image: ami-0abc…, subnets: {use1-az4: subnet-0123…}, key_name: ops}
    gcp: {project: my-project, image: projects/deeplearning-platform-release/global/images/family/common-cu124}
    azure: {subscription_id: …, resource_group: gpuprov, ssh_public_key: "ssh-ed25519 …", subnet_id: /subscriptions/…}
    limits: {max_launch_per_run: 100, max_price_age_hours: 72, unavailable_ttl_minutes: 3, budget_per_hour: 500}
    discounts: {aws: 0.9, "aws:p4d": 0.8}
    savings_plans: {compute_1y: {"*": 0.15, p4d: 0.2}, ec2_instance_3y: {p5: 0.45}}
    bootstrap: {aws: eks-join.sh, gcp: join.sh, azure: join.sh, kubelet: true}

``network`` sets the one network policy of every cloud and price call (sdk/net.py):
``{connect_timeout: 5, read_timeout: 20, connect_retries: 2}`` (seconds; the defaults).
``gcp.endpoint`` and ``azure.endpoint`` point the GCP Compute API and Azure Resource Manager at
another address (Private Service Connect, a sovereign cloud, a proxy); AWS reads its own
``AWS_ENDPOINT_URL``.

``bootstrap`` names a user data / startup script / custom data file per cloud (relative paths from
this file's directory), read and checked here (see gpuprov/bootstrap.py); ``kubelet: true`` adds
the node labels and the GPU taint to each.

``savings_plans`` gives, per AWS Savings Plan kind and term (``compute_1y``, ``compute_3y``,
``ec2_instance_1y``, ``ec2_instance_3y``), the share off on-demand its rates give for an instance
family (``*``: any family): held Savings Plans are priced with it, and the plan may recommend
buying one of each kind given (see gpuprov/optimizer/problem.py).

Environment variables override single keys: GPUPROV_OWNER, GPUPROV_AWS_IMAGE, GOOGLE_CLOUD_PROJECT,
GPUPROV_GCP_IMAGE, AZURE_SUBSCRIPTION_ID, GPUPROV_AZURE_RESOURCE_GROUP. No secret belongs here:
credentials come from each SDK's own chain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpuprov.bootstrap import Bootstrap
from gpuprov.bootstrap import load as load_bootstrap
from gpuprov.errors import ConfigError
from gpuprov.safeyaml import describe
from sdk.net import Network

HOURS_PER_YEAR = 8760
KEYS = (
    "owner",
    "aws",
    "gcp",
    "azure",
    "limits",
    "discounts",
    "savings_plans",
    "bootstrap",
    "pricing",
    "network",
)
PRICING_KEYS = ("include_suspect",)  # pricing.include_suspect: plans use suspect quotes too
SAVINGS_PLAN_KINDS = ("compute_1y", "compute_3y", "ec2_instance_1y", "ec2_instance_3y")
LIMIT_KEYS = ("max_launch_per_run", "max_price_age_hours", "unavailable_ttl_minutes", "budget_per_hour")
NETWORK_KEYS = ("connect_timeout", "read_timeout", "connect_retries")


@dataclass(frozen=True)
class Limits:
    max_launch_per_run: int = 100
    max_price_age_hours: Decimal = Decimal(72)
    unavailable_ttl_minutes: Decimal = Decimal(3)
    budget_per_hour: Decimal | None = None


@dataclass(frozen=True)
class Config:
    path: Path | None
    owner: str = "default"
    aws: dict[str, Any] = field(default_factory=dict)
    gcp: dict[str, Any] = field(default_factory=dict)
    azure: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    discounts: dict[str, Decimal] = field(default_factory=dict)
    savings_plans: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    bootstrap: Bootstrap = field(default_factory=Bootstrap)
    include_suspect: bool = False  # pricing.include_suspect (plan --include-suspect)
    network: Network = field(default_factory=Network)


def config_path() -> Path:
    env = os.environ.get("GPUPROV_CONFIG")
    if env:
        return Path(env)
    from platformdirs import user_config_dir

    return Path(user_config_dir("gpuprov", appauthor=False)) / "config.yaml"


def _number(value: Any, where: str, key: str) -> Decimal:
    """A number of the config file, through the one bounded parser (gpuprov/numbers.py: its
    table gives each key's range)."""
    from gpuprov import numbers

    try:
        return numbers.parse(value, key)
    except numbers.NumberError as exc:
        raise ConfigError(f"{where}: {exc.reason}") from None


CLOUD_KEYS: dict[str, dict[str, str]] = {
    "aws": {"image": "str", "key_name": "str", "subnets": "map", "regions": "list", "security_groups": "list"},
    "gcp": {
        "project": "str",
        "image": "str",
        "network": "str",
        "subnetwork": "str",
        "zones": "list",
        "endpoint": "str",
    },
    "azure": {
        "subscription_id": "str",
        "resource_group": "str",
        "admin_username": "str",
        "ssh_public_key": "str",
        "subnet_id": "str",
        "image_reference": "any",
        "regions": "list",
        "endpoint": "str",
    },
}


def _cloud(raw: dict[str, Any], cloud: str, path: Path) -> dict[str, Any]:
    """One cloud's driver settings, each of the kind its driver expects (strings stay short and
    single-line: they reach API calls and logs)."""
    spec = CLOUD_KEYS[cloud]
    found = dict(raw.get(cloud) or {})
    for key, value in found.items():
        where = f"{path}: {cloud}.{key}"
        kind = spec.get(str(key))
        if kind is None:
            raise ConfigError(f"{where}: unknown key (expected one of: {', '.join(spec)})")
        if kind == "str":
            _text(value, where)
        elif kind == "list":
            if not isinstance(value, list):
                raise ConfigError(f"{where}: must be a list of names, got {describe(value)}")
            for item in value:
                _text(item, where)
        elif kind == "map":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: must be a mapping of names, got {describe(value)}")
            for k, v in value.items():
                _text(k, where)
                _text(v, where)
    return found


def _text(value: Any, where: str) -> None:
    if not isinstance(value, str) or not value or len(value) > 4096 or any(c in value for c in "\r\n\0"):
        raise ConfigError(f"{where}: must be a non-empty single-line string, got {describe(value)}")


def load() -> Config:
    path = config_path()
    raw: dict[str, Any] = {}
    if path.exists():
        from gpuprov.safeyaml import load_file

        loaded = load_file(path, str(path))
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the config must be a mapping")
        raw = loaded or {}
        unknown = sorted(set(raw) - set(KEYS))
        if unknown:
            raise ConfigError(f"{path}: {unknown[0]}: unknown key (expected one of: {', '.join(KEYS)})")
    for key in ("aws", "gcp", "azure", "limits", "discounts", "savings_plans", "pricing", "network"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise ConfigError(f"{path}: {key}: must be a mapping")
    pricing = raw.get("pricing") or {}
    unknown = sorted(set(pricing) - set(PRICING_KEYS))
    if unknown:
        raise ConfigError(f"{path}: pricing.{unknown[0]}: unknown key (expected one of: {', '.join(PRICING_KEYS)})")
    include_suspect = pricing.get("include_suspect", False)
    if not isinstance(include_suspect, bool):
        raise ConfigError(f"{path}: pricing.include_suspect: must be true or false, got {describe(include_suspect)}")
    lim = raw.get("limits") or {}
    unknown = sorted(set(lim) - set(LIMIT_KEYS))
    if unknown:
        raise ConfigError(f"{path}: limits.{unknown[0]}: unknown key")
    limits = Limits(
        max_launch_per_run=int(
            _number(
                lim.get("max_launch_per_run", 100), f"{path}: limits.max_launch_per_run", "limits.max_launch_per_run"
            )
        ),
        max_price_age_hours=_number(
            lim.get("max_price_age_hours", 72), f"{path}: limits.max_price_age_hours", "limits.max_price_age_hours"
        ),
        unavailable_ttl_minutes=_number(
            lim.get("unavailable_ttl_minutes", 3),
            f"{path}: limits.unavailable_ttl_minutes",
            "limits.unavailable_ttl_minutes",
        ),
        budget_per_hour=None
        if lim.get("budget_per_hour") is None
        else _number(lim["budget_per_hour"], f"{path}: limits.budget_per_hour", "limits.budget_per_hour"),
    )
    network = _network(raw.get("network") or {}, path)
    aws, gcp, azure = (_cloud(raw, "aws", path), _cloud(raw, "gcp", path), _cloud(raw, "azure", path))
    env = os.environ
    if env.get("GPUPROV_AWS_IMAGE"):
        aws["image"] = env["GPUPROV_AWS_IMAGE"]
    if env.get("GOOGLE_CLOUD_PROJECT"):
        gcp["project"] = env["GOOGLE_CLOUD_PROJECT"]
    if env.get("GPUPROV_GCP_IMAGE"):
        gcp["image"] = env["GPUPROV_GCP_IMAGE"]
    if env.get("AZURE_SUBSCRIPTION_ID"):
        azure["subscription_id"] = env["AZURE_SUBSCRIPTION_ID"]
    if env.get("GPUPROV_AZURE_RESOURCE_GROUP"):
        azure["resource_group"] = env["GPUPROV_AZURE_RESOURCE_GROUP"]
    discounts = {
        str(k): _number(v, f"{path}: discounts.{str(k)[:40]}", "discounts")
        for k, v in (raw.get("discounts") or {}).items()
    }
    savings_plans = _savings_plans(raw.get("savings_plans") or {}, path)
    bootstrap = load_bootstrap(raw.get("bootstrap"), path.parent, str(path))
    from gpuprov.names import owner as valid_owner

    who = env.get("GPUPROV_OWNER") or raw.get("owner") or "default"
    if not isinstance(who, str):
        raise ConfigError(f"{path}: owner: must be a name, got {describe(who)}")
    valid_owner(who, "GPUPROV_OWNER" if env.get("GPUPROV_OWNER") else f"{path}: owner", config=True)
    return Config(
        path=path if path.exists() else None,
        owner=who,
        aws=aws,
        gcp=gcp,
        azure=azure,
        limits=limits,
        discounts=discounts,
        include_suspect=include_suspect,
        savings_plans=savings_plans,
        bootstrap=bootstrap,
        network=network,
    )


def _network(raw: dict[str, Any], path: Path) -> Network:
    """The ``network`` section: the one network policy's timeouts and retries (sdk/net.py),
    in force for every client made from now on."""
    from sdk import net

    unknown = sorted(str(k) for k in raw if k not in NETWORK_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: network.{unknown[0][:40]}: unknown key (expected one of: {', '.join(NETWORK_KEYS)})"
        )
    found = {k: _number(raw[k], f"{path}: network.{k}", f"network.{k}") for k in NETWORK_KEYS if k in raw}
    default = Network()
    network = Network(
        connect_timeout=float(found.get("connect_timeout", default.connect_timeout)),
        read_timeout=float(found.get("read_timeout", default.read_timeout)),
        connect_retries=int(found.get("connect_retries", default.connect_retries)),
    )
    net.configure(network)
    return network


def _savings_plans(raw: dict[str, Any], path: Path) -> dict[str, dict[str, Decimal]]:
    out: dict[str, dict[str, Decimal]] = {}
    for kind, families in raw.items():
        where = f"{path}: savings_plans.{str(kind)[:40]}"
        if kind not in SAVINGS_PLAN_KINDS:
            raise ConfigError(f"{where}: unknown kind (expected one of: {', '.join(SAVINGS_PLAN_KINDS)})")
        if not isinstance(families, dict) or not families:
            raise ConfigError(f"{where}: must map instance families (or '*') to a share off on-demand")
        out[kind] = {}
        for family, share in families.items():
            name = str(family)
            if name != "*" and not (name.isascii() and name.isalnum() and len(name) <= 20):
                raise ConfigError(f"{where}: {name[:40]!r} is not an instance family such as p4d (or '*')")
            out[kind][name] = _number(share, f"{where}.{name}", "savings_plans")
    return out
