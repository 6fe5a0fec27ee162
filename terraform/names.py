"""Names: Terraform identifiers (resource labels, variables) and cloud-side name slugs."""

from __future__ import annotations

import re


def ident(*parts: str) -> str:
    """A Terraform identifier from free text: ``("training", "use1-az4")`` → ``training_use1_az4``."""
    text = "_".join(p for p in parts if p)
    out = re.sub(r"_+", "_", re.sub(r"[^a-z0-9]+", "_", text.lower())).strip("_")
    if not out or not out[0].isalpha():
        out = "x_" + out
    return out


def slug(*parts: str, limit: int = 50) -> str:
    """A cloud-side name fragment: lower case letters, digits and single dashes."""
    text = "-".join(p for p in parts if p)
    out = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")
    return out[:limit].rstrip("-") or "x"


class Expr(str):
    """A string gpuprov wrote as a Terraform expression on purpose. Every other string in the
    output is data and is escaped (``escape_literals``) so that nothing from a policy, a price
    file or a plan is ever evaluated by Terraform."""

    __slots__ = ()


def interp(expr: str) -> Expr:
    """A Terraform JSON-syntax interpolation: ``interp("var.x")`` → ``"${var.x}"``."""
    return Expr("${" + expr + "}")


def named(prefix_var: str, *parts: str, limit: int = 50) -> Expr:
    """A cloud resource name: the user's name prefix variable, a dash, then a slug of ``parts``
    (lower-case letters, digits and dashes only: no template sequence can survive it)."""
    return Expr(interp(f"var.{prefix_var}") + "-" + slug(*parts, limit=limit))


def literal(text: str) -> str:
    """Data as a Terraform template string: ``${`` and ``%{`` become ``$${`` and ``%%{``."""
    return text.replace("${", "$${").replace("%{", "%%{")


def escape_literals(value: object) -> object:
    """Escape every string of a document that is not an ``Expr`` (keys included)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return literal(value)
    if isinstance(value, dict):
        return {
            (k if isinstance(k, Expr) else literal(k)) if isinstance(k, str) else k: escape_literals(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [escape_literals(v) for v in value]
    return value
