"""Reading YAML that a user (or an attacker) wrote: bounded, UTF-8, and errors that quote nothing.

``load_file``/``load_text`` refuse, with one ``ConfigError`` line:

* files over ``MAX_BYTES`` (read at most that much plus one byte, so a huge file is not slurped);
* bytes that are not UTF-8;
* YAML that does not parse (the line and column are named, the offending text is not echoed);
* a key given twice in one mapping, and values that cannot be built (a date such as 2026-02-30);
* documents whose expansion (aliases counted each time they are used) exceeds ``MAX_NODES``
  nodes, that nest deeper than ``MAX_DEPTH``, or that refer to themselves: the "billion
  laughs" and deep-nesting attacks are stopped on the composed node graph, before any Python
  object is built.

``describe(value)`` names a value's kind for error messages ("a string of 12 characters"),
so that an error about a file never prints what the file holds.

Floats come back as :class:`YamlFloat`, a ``float`` that keeps the text it was written as, so the
number parser (``gpuprov/numbers.py``) judges ``1.0e-999999999`` by what was written, not by the
0.0 PyYAML rounds it to.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from gpuprov.errors import ConfigError

MAX_BYTES = 1 << 20  # 1 MiB: policies and configs are a few hundred lines
MAX_NODES = 10_000
MAX_DEPTH = 50


class YamlFloat(float):
    """A YAML float and the text it was written as (copies and dumps are plain floats)."""

    text: str

    def __new__(cls, value: float, text: str = "") -> YamlFloat:
        made = super().__new__(cls, value)
        made.text = text
        return made

    def __reduce__(self) -> tuple[type[float], tuple[float]]:
        return float, (float(self),)


@functools.cache
def _loader_class() -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def construct_float(loader: Any, node: Any) -> YamlFloat:
        return YamlFloat(yaml.SafeLoader.construct_yaml_float(loader, node), str(node.value)[:100])

    Loader.add_constructor("tag:yaml.org,2002:float", construct_float)
    yaml.SafeDumper.add_representer(YamlFloat, yaml.SafeDumper.represent_float)
    return Loader


def _loader(text: str) -> Any:
    return _loader_class()(text)


def read_text(path: Path, where: str, max_bytes: int = MAX_BYTES) -> str:
    """A file's text: at most ``max_bytes``, UTF-8, or one clear error."""
    try:
        if path.is_dir():
            raise ConfigError(f"{where}: is a directory, not a file")
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{where}: larger than {max_bytes // 1024} KiB; not read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte {exc.start})") from None


def check_nesting(text: str, where: str, max_depth: int = MAX_DEPTH, max_indent: int = 4 * MAX_DEPTH) -> None:
    """Refuse a document nested deeper than ``max_depth`` brackets (JSON, YAML flow style) or
    indented more than ``max_indent`` columns (YAML block style) before any recursive parser
    sees it: a scan of the text, one pass, nothing built. Quoted strings are skipped."""
    depth = 0
    quote = ""
    escaped = False
    indent = 0
    at_start = True
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch == "\n":
            at_start, indent = True, 0
            continue
        if at_start:
            if ch == " ":
                indent += 1
                if indent > max_indent:
                    raise ConfigError(f"{where}: indented deeper than {max_indent} columns; not read")
                continue
            at_start = False
        if ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                raise ConfigError(f"{where}: nested deeper than {max_depth} levels; not read")
        elif ch in "]}":
            depth = max(0, depth - 1)


def load_file(path: Path, where: str) -> Any:
    return load_text(read_text(path, where), where)


def load_text(text: str, where: str) -> Any:
    import yaml

    if len(text) > MAX_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_BYTES // 1024} KiB; not read")
    check_nesting(text, where)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: not valid YAML{at}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    if node is None:
        return None
    _check(node, where)
    loader = _loader(text)
    try:
        return loader.construct_document(node)
    except (yaml.YAMLError, ValueError, OverflowError, TypeError):
        # a date such as 2026-02-30 or a "!!int abc" fails while the value is built
        raise ConfigError(f"{where}: a value cannot be read (e.g. a malformed date or number)") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def _check(root: Any, where: str) -> None:
    """Count the nodes of the document as constructed (aliases expanded) and its depth, without
    expanding anything: each node's expanded size is computed once."""
    import yaml

    size: dict[int, int] = {}
    busy: set[int] = set()

    def children(n: Any) -> list[Any]:
        if isinstance(n, yaml.SequenceNode):
            return list(n.value)
        if isinstance(n, yaml.MappingNode):
            _unique_keys(n, where)
            return [x for pair in n.value for x in pair]
        return []

    # iterative post-order walk; depth is the longest path, aliases included
    depth: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        n, done = stack.pop()
        key = id(n)
        if done:
            busy.discard(key)
            kids = children(n)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[key] > MAX_NODES:
                raise ConfigError(f"{where}: expands to more than {MAX_NODES:,} values (aliases counted where used)")
            if depth[key] > MAX_DEPTH:
                raise ConfigError(f"{where}: nested deeper than {MAX_DEPTH} levels")
            continue
        if key in size:
            continue
        if key in busy:
            raise ConfigError(f"{where}: an alias refers to the value that contains it")
        busy.add(key)
        stack.append((n, True))
        for k in children(n):
            if id(k) not in size:
                stack.append((k, False))


def _unique_keys(node: Any, where: str) -> None:
    """A key given twice in one mapping is refused (YAML says keys are unique; PyYAML keeps the
    last silently, so ``{id: a, id: b}`` would quietly become b)."""
    import yaml

    seen: set[tuple[str, str]] = set()
    for key, _value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        k = (key.tag, key.value)
        if k in seen:
            line = key.start_mark.line + 1 if key.start_mark is not None else 0
            raise ConfigError(f"{where}: key {key.value[:40]!r} is given twice in one mapping (line {line})")
        seen.add(k)


def describe(value: Any) -> str:
    """What kind of value this is, for an error message that must not echo it."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number out of range" if isinstance(value, int) else "a decimal number"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
