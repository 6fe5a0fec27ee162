"""Validate Kubernetes manifests offline against the real schemas shipped in ``k8s/schemas``.

The schemas (Karpenter v1 NodePool and EC2NodeClass, the Azure provider's NodePool and
AKSNodeClass, Kueue v1beta2 ResourceFlavor, ClusterQueue and LocalQueue, Kubernetes 1.35 core v1,
batch v1 and rbac.authorization.k8s.io v1) are byte-for-byte copies; ``schemas/PROVENANCE.md``
says where from. Validation follows that file's recipe: the CRD version matching ``apiVersion`` (served), its
``openAPIV3Schema``; ``x-kubernetes-*`` keys dropped, ``nullable`` turned into a ``null`` type,
properties with a ``default`` not required (the API server defaults them first), and — strict, as
``kubectl --validate=strict`` is — ``additionalProperties: false`` on every object schema that
lists properties and neither allows extra ones nor preserves unknown fields. CEL rules
(``x-kubernetes-validations``) are not checked.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

CRDS = {
    ("karpenter.sh/v1", "NodePool"): "karpenter/karpenter.sh_nodepools.yaml",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "karpenter/karpenter.k8s.aws_ec2nodeclasses.yaml",
    ("karpenter.azure.com/v1beta1", "AKSNodeClass"): "karpenter-azure/karpenter.azure.com_aksnodeclasses.yaml",
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): "kueue/kueue.x-k8s.io_resourceflavors.yaml",
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): "kueue/kueue.x-k8s.io_clusterqueues.yaml",
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): "kueue/kueue.x-k8s.io_localqueues.yaml",
}
CORE = {
    ("batch/v1", "CronJob"): ("kubernetes/apis__batch__v1_openapi.json", "io.k8s.api.batch.v1.CronJob"),
    ("v1", "ServiceAccount"): ("kubernetes/api__v1_openapi.json", "io.k8s.api.core.v1.ServiceAccount"),
    ("v1", "ConfigMap"): ("kubernetes/api__v1_openapi.json", "io.k8s.api.core.v1.ConfigMap"),
    **{
        ("rbac.authorization.k8s.io/v1", kind): (
            "kubernetes/apis__rbac.authorization.k8s.io__v1_openapi.json",
            f"io.k8s.api.rbac.v1.{kind}",
        )
        for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    },
}


def _read(rel: str) -> str:
    return (resources.files("k8s") / "schemas" / rel).read_text(encoding="utf-8")


def strict(schema: Any) -> Any:
    """The recipe of schemas/PROVENANCE.md applied to one (sub)schema, recursively."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    out = {k: strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if out.get("format") == "int-or-string":
        out.pop("format")
    props = out.get("properties")
    if isinstance(props, dict):
        defaulted = {k for k, v in props.items() if isinstance(v, dict) and "default" in v}
        if "required" in out:
            out["required"] = [r for r in out["required"] if r not in defaulted]
        if "additionalProperties" not in out and not preserve:
            out["additionalProperties"] = False
    return out


@cache
def _crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    import yaml

    crd = yaml.safe_load(_read(CRDS[(api_version, kind)]))
    group, _, version = api_version.partition("/")
    if crd["spec"]["group"] != group:
        raise KeyError(api_version)
    for v in crd["spec"]["versions"]:
        if v["name"] == version and v.get("served"):
            schema: dict[str, Any] = strict(v["schema"]["openAPIV3Schema"])
            return schema
    raise KeyError(api_version)


@cache
def _core_file(rel: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_read(rel))
    return doc


@cache
def _core_schema(api_version: str, kind: str) -> dict[str, Any]:
    rel, name = CORE[(api_version, kind)]
    components = strict(copy.deepcopy(_core_file(rel)["components"]))
    return {"$ref": f"#/components/schemas/{name}", "components": components}


def problems(doc: Any, where: str = "<document>") -> list[str]:
    """Every schema violation of one manifest, as '<where>: <path>: <message>' lines."""
    import jsonschema

    if not isinstance(doc, dict):
        return [f"{where}: a manifest is a mapping"]
    key = (str(doc.get("apiVersion")), str(doc.get("kind")))
    try:
        schema = _crd_schema(*key) if key in CRDS else _core_schema(*key)
    except KeyError:
        return [f"{where}: no schema for apiVersion {key[0]!r} kind {key[1]!r}"]
    validator = jsonschema.Draft7Validator(schema)
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) for p in err.absolute_path) or "(top)"
        out.append(f"{where}: {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}: {path}: {err.message[:200]}")
    return out


MAX_MANIFEST_BYTES = 16 << 20
MAX_MANIFEST_DEPTH = 100


def documents(path: Path) -> Iterator[tuple[str, Any]]:
    """The YAML documents of one file: read bounded (16 MiB, UTF-8), refused before parsing when
    nested deeper than 100 levels, never quoted in an error."""
    import yaml

    from gpuprov.errors import ConfigError
    from gpuprov.names import show_path
    from gpuprov.safeyaml import check_nesting, read_text

    where = show_path(str(path))
    text = read_text(path, where, MAX_MANIFEST_BYTES)
    check_nesting(text, where, MAX_MANIFEST_DEPTH, 4 * MAX_MANIFEST_DEPTH)
    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: not valid YAML{at}") from None
    except (RecursionError, ValueError, TypeError, OverflowError):
        raise ConfigError(f"{where}: a document cannot be read (too deep, or a malformed value)") from None
    for i, doc in enumerate(loaded):
        if doc is not None:
            yield f"{path.name}[{i}]", doc


def check_dir(folder: Path) -> list[str]:
    found: list[str] = []
    files = sorted(folder.rglob("*.yaml"))
    if not files:
        return [f"{folder}: no .yaml files"]
    for file in files:
        for where, doc in documents(file):
            found += problems(doc, where)
    return found
