"""Bits of Terraform language the checker needs: interpolations, references, type expressions,
version constraints, and the JSON-path spelling of a location."""

from __future__ import annotations

import difflib
import re
from typing import Any

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_REF = re.compile(
    r"(?<![\w.\"-])(?:(var|local|module)\.([A-Za-z_][\w-]*)"
    r"|(data)\.([A-Za-z][\w]*)\.([A-Za-z_][\w-]*)"
    r"|([a-z][a-z0-9]*_[a-z0-9_]+)\.([A-Za-z_][\w-]*)(?:\.([A-Za-z_][\w]*))?)"
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def hint(word: str, choices: Any) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing."""
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def join(path: str, key: str | int) -> str:
    """``join("resource.x", "tags")`` → ``resource.x.tags``; odd keys are quoted; ints are indexes."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if IDENT.match(key):
        return f"{path}.{key}" if path else key
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'{path}["{quoted}"]'


def matching_brace(s: str, start: int) -> int:
    """Index of the ``}`` closing an interpolation whose body starts at ``start``, or -1."""
    depth, i = 1, start
    while i < len(s):
        ch = s[i]
        if ch == '"':
            i += 1
            while i < len(s) and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def interpolations(s: str) -> list[str] | None:
    """The expressions inside ``${…}`` in a template string; None when one is unterminated."""
    out: list[str] = []
    i = 0
    while True:
        j = s.find("${", i)
        if j < 0:
            return out
        if j > 0 and s[j - 1] == "$":  # "$${" is a literal "${"
            i = j + 2
            continue
        k = matching_brace(s, j + 2)
        if k < 0:
            return None
        out.append(s[j + 2 : k])
        i = k + 1


def is_interpolation(value: Any) -> bool:
    """True for a string that is exactly one ``${…}``: its value can have any type."""
    return isinstance(value, str) and value.startswith("${") and matching_brace(value, 2) == len(value) - 1


def references(expr: str) -> list[tuple[str, ...]]:
    """References in an expression: ``("var", name)``, ``("local", name)``, ``("module", name)``,
    ``("data", type, name)``, ``("resource", type, name, attr-or-"")``. String literals are skipped."""
    out: list[tuple[str, ...]] = []
    for m in _REF.finditer(_STRING.sub('""', expr)):
        if m.group(1):
            out.append((m.group(1), m.group(2)))
        elif m.group(3):
            out.append(("data", m.group(4), m.group(5)))
        else:
            out.append(("resource", m.group(6), m.group(7), m.group(8) or ""))
    return out


# ------------------------------------------------------------------------- types


def type_str(t: Any) -> str:
    """A schema type (``"string"``, ``["list", "string"]``…) in Terraform's own spelling."""
    if isinstance(t, str):
        return "any" if t == "dynamic" else t
    kind = t[0]
    if kind in ("list", "set", "map"):
        return f"{kind}({type_str(t[1])})"
    if kind == "object":
        return "object({" + ", ".join(f"{k} = {type_str(v)}" for k, v in sorted(t[1].items())) + "})"
    if kind == "tuple":
        return "tuple([" + ", ".join(type_str(x) for x in t[1]) + "])"
    return str(t)


class TypeExprError(ValueError):
    pass


def parse_type(expr: str) -> Any:
    """A variable's type expression (``list(string)``, ``object({a = number})``…) as a schema type."""
    tokens = re.findall(r"[A-Za-z_][\w-]*|[(){}\[\],=]|\S", expr)
    pos = 0

    def peek() -> str:
        return tokens[pos] if pos < len(tokens) else ""

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if not tok or (expected is not None and tok != expected):
            raise TypeExprError(f"expected {expected or 'a type'} at {tok or 'end'!r} in {expr!r}")
        pos += 1
        return tok

    def skip_balanced() -> None:
        depth = 0
        while peek() and not (depth == 0 and peek() == ")"):
            depth += peek() in "([{"
            depth -= peek() in ")]}"
            take()

    def one() -> tuple[Any, bool]:
        word = take()
        if word in ("string", "number", "bool"):
            return word, False
        if word == "any":
            return "dynamic", False
        if word in ("list", "set", "map"):
            take("(")
            inner = one()[0]
            take(")")
            return [word, inner], False
        if word == "optional":
            take("(")
            inner = one()[0]
            if peek() == ",":
                take(",")
                skip_balanced()
            take(")")
            return inner, True
        if word == "object":
            take("(")
            take("{")
            attrs: dict[str, Any] = {}
            optional: list[str] = []
            while peek() != "}":
                name = take()
                take("=")
                attrs[name], opt = one()
                if opt:
                    optional.append(name)
                if peek() == ",":
                    take(",")
            take("}")
            take(")")
            return (["object", attrs, optional] if optional else ["object", attrs]), False
        if word == "tuple":
            take("(")
            take("[")
            items = []
            while peek() != "]":
                items.append(one()[0])
                if peek() == ",":
                    take(",")
            take("]")
            take(")")
            return ["tuple", items], False
        raise TypeExprError(f"unknown type {word!r} in {expr!r}")

    text = expr.strip()
    if is_interpolation(text):
        return parse_type(text[2:-1])
    result, optional = one()
    if optional or pos != len(tokens):
        raise TypeExprError(f"not a type expression: {expr!r}")
    return result


def value_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    return "object"


def type_errors(t: Any, v: Any, path: str) -> list[tuple[str, str]]:
    """(path, message) for each place ``v`` cannot be converted to type ``t`` (Terraform's rules:
    numbers and bools convert to strings; numeric and "true"/"false" strings back; a string that
    is one interpolation is accepted for any type; null is accepted anywhere)."""
    if v is None or t == "dynamic" or is_interpolation(v):
        return []
    bad = [(path, f"expected {type_str(t)}, got {value_kind(v)}")]
    if t == "string":
        return bad if isinstance(v, list | dict) else []
    if t == "number":
        if isinstance(v, int | float) and not isinstance(v, bool):
            return []
        return [] if isinstance(v, str) and (_is_number(v) or "${" in v) else bad
    if t == "bool":
        if isinstance(v, bool):
            return []
        return [] if isinstance(v, str) and (v in ("true", "false") or "${" in v) else bad
    kind = t[0] if isinstance(t, list) else None
    if kind in ("list", "set"):
        if not isinstance(v, list):
            return bad
        return [e for i, x in enumerate(v) for e in type_errors(t[1], x, join(path, i))]
    if kind == "map":
        if not isinstance(v, dict):
            return bad
        return [e for k, x in sorted(v.items()) for e in type_errors(t[1], x, join(path, k))]
    if kind == "tuple":
        if not isinstance(v, list):
            return bad
        if len(v) != len(t[1]):
            return [(path, f"expected {type_str(t)} ({len(t[1])} elements), got {len(v)}")]
        return [e for i, (tt, x) in enumerate(zip(t[1], v, strict=True)) for e in type_errors(tt, x, join(path, i))]
    if kind == "object":
        if not isinstance(v, dict):
            return bad
        attrs: dict[str, Any] = t[1]
        optional = set(t[2]) if len(t) > 2 else set()
        out = [(join(path, k), f"unexpected attribute {k!r} for {type_str(t)}") for k in sorted(v) if k not in attrs]
        out += [
            (join(path, k), f"missing attribute {k!r} required by {type_str(t)}")
            for k in sorted(attrs)
            if k not in v and k not in optional
        ]
        out += [e for k in sorted(attrs) if k in v for e in type_errors(attrs[k], v[k], join(path, k))]
        return out
    return [(path, f"unknown schema type {t!r}")]


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------- versions


def _vtuple(text: str) -> tuple[int, ...]:
    parts = text.strip().lstrip("v").split("-")[0].split(".")
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in parts)


def admits(constraint: str, version: str) -> bool:
    """Whether a Terraform version constraint (``~> 6.0``, ``>= 4.1, < 5``…) admits ``version``."""
    have = _vtuple(version)
    for part in constraint.split(","):
        m = re.match(r"^\s*(~>|>=|<=|!=|>|<|=)?\s*(\S+)\s*$", part)
        if not m:
            raise ValueError(f"not a version constraint: {constraint!r}")
        op, want = m.group(1) or "=", _vtuple(m.group(2))
        n = max(len(want), len(have))
        w, h = want + (0,) * (n - len(want)), have + (0,) * (n - len(have))
        if op == "~>":
            upper = (want[0] + 1,) if len(want) == 1 else (*want[:-2], want[-2] + 1)
            ok = h >= w and have[: len(upper)] < upper
        else:
            ok = {"=": h == w, "!=": h != w, ">": h > w, ">=": h >= w, "<": h < w, "<=": h <= w}[op]
        if not ok:
            return False
    return True
