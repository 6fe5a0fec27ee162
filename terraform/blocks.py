"""Small builders for Terraform JSON-syntax blocks shared by the per-cloud renderers."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuprov.plandoc import Allocation

_NO_DEFAULT = object()


def variable(type_: str, description: str, default: Any = _NO_DEFAULT) -> dict[str, Any]:
    """A ``variable`` block. Without ``default`` the variable is required (Terraform asks for it)."""
    out: dict[str, Any] = {"type": type_, "description": description}
    if default is not _NO_DEFAULT:
        out["default"] = default
    return out


def output(value: Any, description: str) -> dict[str, Any]:
    return {"value": value, "description": description}


def money(value: Decimal) -> float:
    return float(value)


def reserved_entry(a: Allocation, group: str | None) -> dict[str, Any]:
    """One reservation as listed in outputs: a billing commitment, not a resource."""
    return {
        "region": a.region,
        "zone": a.zone,
        "instance_type": a.instance_type,
        "market": a.market,
        "instances": a.instances,
        "unit_hourly_usd": money(a.unit_hourly_usd),
        "runs_in_group": group,
    }


@dataclass
class CloudDoc:
    """What a per-cloud renderer produces; ``render.py`` adds the comment and the provider list."""

    provider: dict[str, Any]
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    shared_variables: set[str] = field(default_factory=set)

    def add(self, rtype: str, name: str, body: dict[str, Any]) -> None:
        bucket = self.resources.setdefault(rtype, {})
        if name in bucket:
            raise ValueError(f"duplicate resource {rtype}.{name}")
        bucket[name] = body

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"provider": self.provider, "resource": self.resources}
        if self.variables:
            doc["variable"] = self.variables
        if self.outputs:
            doc["output"] = self.outputs
        return doc
