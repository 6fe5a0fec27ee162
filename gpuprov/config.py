"""gpuprov's config file: cloud settings for the drivers, limits, negotiated discounts.

Found at ``$GPUPROV_CONFIG`` or ``<user config dir>/gpuprov/config.yaml``; optional. Example::

    owner: research-fleet
    aws: {image: ami-0abc…, subnets: {use1-az4: subnet-0123…}, key_name: ops}
    gcp: {project: my-project, image: projects/deeplearning-platform-release/global/images/family/common-cu124}
    azure: {subscription_id: …, resource_group: gpuprov, ssh_public_key: "ssh-ed25519 …", subnet_id: /subscriptions/…}
    limits: {max_launch_per_run: 100, max_price_age_hours: 72, unavailable_ttl_minutes: 3, budget_per_hour: 500}
    discounts: {aws: 0.9, "aws:p4d": 0.8}

Environment variables override single keys: GPUPROV_OWNER, GPUPROV_AWS_IMAGE, GOOGLE_CLOUD_PROJECT,
GPUPROV_GCP_IMAGE, AZURE_SUBSCRIPTION_ID, GPUPROV_AZURE_RESOURCE_GROUP. No secret belongs here:
credentials come from each SDK's own chain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from gpuprov.errors import ConfigError

KEYS = ("owner", "aws", "gcp", "azure", "limits", "discounts")
LIMIT_KEYS = ("max_launch_per_run", "max_price_age_hours", "unavailable_ttl_minutes", "budget_per_hour")


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


def config_path() -> Path:
    env = os.environ.get("GPUPROV_CONFIG")
    if env:
        return Path(env)
    from platformdirs import user_config_dir

    return Path(user_config_dir("gpuprov", appauthor=False)) / "config.yaml"


def _number(value: Any, where: str) -> Decimal:
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        raise ConfigError(f"{where}: must be a number, got {value!r}") from None
    if not d.is_finite() or d < 0:
        raise ConfigError(f"{where}: must be a non-negative number, got {value!r}")
    return d


def load() -> Config:
    path = config_path()
    raw: dict[str, Any] = {}
    if path.exists():
        import yaml

        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read the config: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the config must be a mapping")
        raw = loaded or {}
        unknown = sorted(set(raw) - set(KEYS))
        if unknown:
            raise ConfigError(f"{path}: {unknown[0]}: unknown key (expected one of: {', '.join(KEYS)})")
    for key in ("aws", "gcp", "azure", "limits", "discounts"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise ConfigError(f"{path}: {key}: must be a mapping")
    lim = raw.get("limits") or {}
    unknown = sorted(set(lim) - set(LIMIT_KEYS))
    if unknown:
        raise ConfigError(f"{path}: limits.{unknown[0]}: unknown key")
    limits = Limits(
        max_launch_per_run=int(_number(lim.get("max_launch_per_run", 100), "limits.max_launch_per_run")),
        max_price_age_hours=_number(lim.get("max_price_age_hours", 72), "limits.max_price_age_hours"),
        unavailable_ttl_minutes=_number(lim.get("unavailable_ttl_minutes", 3), "limits.unavailable_ttl_minutes"),
        budget_per_hour=None if lim.get("budget_per_hour") is None
        else _number(lim["budget_per_hour"], "limits.budget_per_hour"))
    aws, gcp, azure = dict(raw.get("aws") or {}), dict(raw.get("gcp") or {}), dict(raw.get("azure") or {})
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
    discounts = {str(k): _number(v, f"discounts.{k}") for k, v in (raw.get("discounts") or {}).items()}
    for key, factor in discounts.items():
        if factor > 1 or factor == 0:
            raise ConfigError(f"{path}: discounts.{key}: a factor in (0, 1], got {factor}")
    return Config(path=path if path.exists() else None, owner=str(env.get("GPUPROV_OWNER") or raw.get("owner")
                                                                 or "default"),
                  aws=aws, gcp=gcp, azure=azure, limits=limits, discounts=discounts)
