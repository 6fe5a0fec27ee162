"""Module-level checks over several checked documents: duplicates, references, providers.

``schema_check`` records what each document declares and references (``Facts``) while it
checks it; ``module_problems`` then judges the documents together, as Terraform loads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from terraform.provider_schemas import Schemas
from terraform.tfsyntax import hint


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    path: str
    message: str
    kind: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.file}: {self.path or '(document)'}: {self.message}"


@dataclass
class Facts:
    """What a document declares and references, for the module-level checks."""

    declared: dict[tuple[str, ...], str] = field(default_factory=dict)  # key → path
    duplicates: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    refs: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    provider_refs: list[tuple[str, str]] = field(default_factory=list)  # ("aws.alias", path)
    used_providers: dict[str, str] = field(default_factory=dict)
    required: dict[str, str] = field(default_factory=dict)  # local name → path
    required_blocks: list[str] = field(default_factory=list)

    def declare(self, key: tuple[str, ...], path: str) -> None:
        if key in self.declared:
            self.duplicates.append((key, path))
        else:
            self.declared[key] = path


def module_problems(docs: list[tuple[str, Facts]], schemas: Schemas) -> list[Problem]:
    """Cross-file problems: duplicates, one required_providers, undeclared references, providers."""
    out: list[Problem] = []
    declared: dict[tuple[str, ...], tuple[str, str]] = {}
    for file, facts in docs:
        for key, path in facts.duplicates:
            out.append(Problem(file, path, f"duplicate {_what(key)} (declared earlier in this file)", "duplicate"))
        for key, path in facts.declared.items():
            if key in declared:
                out.append(
                    Problem(file, path, f"duplicate {_what(key)} (also declared in {declared[key][0]})", "duplicate")
                )
            else:
                declared[key] = (file, path)
    blocks = [(file, p) for file, facts in docs for p in facts.required_blocks]
    for file, path in blocks[1:]:
        out.append(
            Problem(
                file,
                path,
                f"a module may have only one required_providers block (the first is in {blocks[0][0]})",
                "duplicate",
            )
        )
    required = {name for _, facts in docs for name in facts.required}
    for file, facts in docs:
        for provider, path in sorted(facts.used_providers.items()):
            if blocks and provider not in required:
                out.append(
                    Problem(file, path, f"provider {provider!r} is used but not in required_providers", "reference")
                )
        for pref, path in facts.provider_refs:
            name, _, alias = pref.partition(".")
            if alias and ("provider", name, alias) not in declared:
                out.append(Problem(file, path, f"no provider configuration {pref!r}", "reference"))
        for ref, path in facts.refs:
            msg = _bad_reference(ref, declared, schemas)
            if msg:
                out.append(Problem(file, path, msg, "reference"))
    return out


def _what(key: tuple[str, ...]) -> str:
    if key[0] in ("resource", "data"):
        return f"{key[0]} {key[1]}.{key[2]}"
    if key[0] == "provider":
        return f"provider configuration {key[1]}" + (f" (alias {key[2]})" if key[2] else "")
    return {"var": "variable", "local": "local value"}.get(key[0], key[0]) + f" {key[1]}"


def _bad_reference(ref: tuple[str, ...], declared: Mapping[tuple[str, ...], Any], schemas: Schemas) -> str:
    kind = ref[0]
    if kind in ("var", "local", "module"):
        return "" if (kind, ref[1]) in declared else f"reference to undeclared {_what(ref)}"
    if kind == "data":
        return "" if ref in declared else f"reference to undeclared data {ref[1]}.{ref[2]}"
    rtype, name, attr = ref[1], ref[2], ref[3]
    block = schemas.resources.get(rtype)
    if block is None and ("resource", rtype, name) not in declared:
        return ""  # not a resource reference we can judge (e.g. an unknown function-like name)
    if ("resource", rtype, name) not in declared:
        return f"reference to undeclared resource {rtype}.{name}"
    if (
        block is not None
        and attr
        and attr not in block.get("attributes", {})
        and attr not in block.get("block_types", {})
    ):
        return f"{rtype} has no attribute {attr!r}{hint(attr, block.get('attributes', {}))}"
    return ""
