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


def interp(expr: str) -> str:
    """A Terraform JSON-syntax interpolation: ``interp("var.x")`` → ``"${var.x}"``."""
    return "${" + expr + "}"


def named(prefix_var: str, *parts: str, limit: int = 50) -> str:
    """A cloud resource name: the user's name prefix variable, a dash, then a slug of ``parts``."""
    return interp(f"var.{prefix_var}") + "-" + slug(*parts, limit=limit)
