"""Check Terraform JSON-syntax documents against the bundled provider schemas, offline.

``check_document`` checks one document; ``check_files`` checks a module (several documents,
adding cross-file checks: duplicates, references, required providers); ``check_dir`` reads
``*.tf.json`` from a directory and runs ``check_files``. Every ``Problem`` names the file, the
JSON path of the offending place (``resource.aws_autoscaling_group.g.mixed_instances_policy[0]
.launch_template``) and what is wrong; ``kind`` is a stable tag for the kind of error.

What the schema cannot say (enums, conflicts between arguments, server-side rules) is not checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from terraform.module_check import Facts, Problem, module_problems
from terraform.provider_schemas import SCHEMA_SOURCES, SCHEMA_VERSIONS, Schemas, load_schemas
from terraform.tfsyntax import (
    IDENT,
    TypeExprError,
    admits,
    hint,
    interpolations,
    is_interpolation,
    join,
    parse_type,
    references,
    type_errors,
    value_kind,
)

__all__ = ["Problem", "check_dir", "check_document", "check_files"]

TOP_LEVEL = ("//", "terraform", "provider", "variable", "locals", "resource", "data", "output", "module")
LIFECYCLE = (
    "create_before_destroy",
    "prevent_destroy",
    "ignore_changes",
    "replace_triggered_by",
    "precondition",
    "postcondition",
)
VARIABLE_KEYS = ("type", "default", "description", "sensitive", "nullable", "ephemeral", "validation")
OUTPUT_KEYS = ("value", "description", "sensitive", "depends_on", "precondition", "ephemeral")
TERRAFORM_KEYS = ("required_version", "required_providers", "backend", "cloud", "experiments", "provider_meta")


def _objects(value: Any, path: str) -> Iterator[tuple[Any, str]]:
    """JSON syntax lets a block level be an object or an array of objects."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield item, join(path, i)
    else:
        yield value, path


class _Checker:
    def __init__(self, file: str, schemas: Schemas) -> None:
        self.file = file
        self.schemas = schemas
        self.problems: list[Problem] = []
        self.facts = Facts()

    def report(self, path: str, message: str, kind: str) -> None:
        self.problems.append(Problem(self.file, path, message, kind))

    def need_object(self, value: Any, path: str, what: str) -> bool:
        if isinstance(value, dict):
            return True
        self.report(path, f"{what} must be a JSON object, got {value_kind(value)}", "shape")
        return False

    # ------------------------------------------------------------------ document

    def document(self, doc: Any) -> None:
        if not self.need_object(doc, "", "a Terraform JSON file"):
            return
        for key in sorted(doc):
            value = doc[key]
            if key == "//":
                continue
            if key not in TOP_LEVEL:
                self.report(
                    key if IDENT.match(key) else join("", key),
                    f"unknown top-level key {key!r}{hint(key, TOP_LEVEL)}",
                    "top-level",
                )
                continue
            for obj, path in _objects(value, key):
                if self.need_object(obj, path, f"a {key} section"):
                    getattr(self, f"top_{key}")(obj, path)
        self.strings(doc, "")

    def top_resource(self, obj: dict[str, Any], path: str, data: bool = False) -> None:
        kind_word = "data source" if data else "resource"
        for rtype in sorted(obj):
            tpath = join(path, rtype)
            if rtype == "//":
                continue
            block = None if data else self.schemas.resources.get(rtype)
            if block is None:
                close = "" if data else hint(rtype, self.schemas.resources)
                self.report(tpath, f"unknown {kind_word} type {rtype!r}: no schema for it{close}", "unknown-type")
            for objs, opath in _objects(obj[rtype], tpath):
                if not self.need_object(objs, opath, f"{rtype} {kind_word}s"):
                    continue
                for name in sorted(objs):
                    if name == "//":
                        continue
                    npath = join(opath, name)
                    if not IDENT.match(name):
                        self.report(npath, f"invalid {kind_word} name {name!r}", "shape")
                    self.facts.declare(("data", rtype, name) if data else ("resource", rtype, name), npath)
                    self.facts.used_providers.setdefault(self.schemas.provider_of(rtype), npath)
                    for body, bpath in _objects(objs[name], npath):
                        if block is not None:
                            self.resource_body(rtype, body, block, bpath)
                        else:
                            self.need_object(body, bpath, f"a {kind_word} body")

    def top_data(self, obj: dict[str, Any], path: str) -> None:
        self.top_resource(obj, path, data=True)

    def top_provider(self, obj: dict[str, Any], path: str) -> None:
        for name in sorted(obj):
            if name == "//":
                continue
            block = self.schemas.providers.get(name)
            ppath = join(path, name)
            if block is None:
                self.report(
                    ppath,
                    f"unknown provider {name!r}: no schema for it{hint(name, self.schemas.providers)}",
                    "unknown-type",
                )
            for body, bpath in _objects(obj[name], ppath):
                if not self.need_object(body, bpath, "a provider block"):
                    continue
                alias = body.get("alias")
                if alias is not None and not (isinstance(alias, str) and IDENT.match(alias)):
                    self.report(join(bpath, "alias"), "alias must be an identifier", "type")
                self.facts.declare(("provider", name, alias if isinstance(alias, str) else ""), bpath)
                if block is not None:
                    self.body(body, block, bpath, meta={"alias": "string", "version": "string"})

    def top_variable(self, obj: dict[str, Any], path: str) -> None:
        for name in sorted(obj):
            if name == "//":
                continue
            vpath = join(path, name)
            self.facts.declare(("var", name), vpath)
            body = obj[name]
            if not self.need_object(body, vpath, "a variable block"):
                continue
            self.known_keys(body, VARIABLE_KEYS, vpath, "variable")
            vtype: Any = "dynamic"
            if "type" in body:
                try:
                    vtype = parse_type(body["type"]) if isinstance(body["type"], str) else None
                except TypeExprError as exc:
                    self.report(join(vpath, "type"), str(exc), "type")
                else:
                    if vtype is None:
                        self.report(join(vpath, "type"), "type must be a type expression string", "type")
            if vtype is not None and "default" in body:
                for p, msg in type_errors(vtype, body["default"], join(vpath, "default")):
                    self.report(p, msg, "type")
            for key in ("description",):
                self.check_type("string", body.get(key), join(vpath, key))
            for key in ("sensitive", "nullable", "ephemeral"):
                self.check_type("bool", body.get(key), join(vpath, key))
            if body.get("sensitive") is True and body.get("default") is not None:
                self.report(join(vpath, "default"), "a sensitive variable must not have a default value", "secret")
            self.conditions(body.get("validation"), join(vpath, "validation"))

    def top_output(self, obj: dict[str, Any], path: str) -> None:
        for name in sorted(obj):
            if name == "//":
                continue
            opath = join(path, name)
            self.facts.declare(("output", name), opath)
            body = obj[name]
            if not self.need_object(body, opath, "an output block"):
                continue
            self.known_keys(body, OUTPUT_KEYS, opath, "output")
            if "value" not in body:
                self.report(join(opath, "value"), "missing required argument 'value'", "missing-argument")
            self.check_type("string", body.get("description"), join(opath, "description"))
            self.check_type("bool", body.get("sensitive"), join(opath, "sensitive"))
            self.depends_on(body.get("depends_on"), join(opath, "depends_on"))
            self.conditions(body.get("precondition"), join(opath, "precondition"))

    def top_locals(self, obj: dict[str, Any], path: str) -> None:
        for name in sorted(obj):
            if name == "//":
                continue
            lpath = join(path, name)
            if not IDENT.match(name):
                self.report(lpath, f"invalid local name {name!r}", "shape")
            self.facts.declare(("local", name), lpath)

    def top_module(self, obj: dict[str, Any], path: str) -> None:
        for name in sorted(obj):
            mpath = join(path, name)
            self.facts.declare(("module", name), mpath)
            if self.need_object(obj[name], mpath, "a module block") and not isinstance(obj[name].get("source"), str):
                self.report(join(mpath, "source"), "missing required argument 'source'", "missing-argument")

    def top_terraform(self, obj: dict[str, Any], path: str) -> None:
        self.known_keys(obj, TERRAFORM_KEYS, path, "terraform block")
        self.check_type("string", obj.get("required_version"), join(path, "required_version"))
        if "required_providers" not in obj:
            return
        for rp, rpath in _objects(obj["required_providers"], join(path, "required_providers")):
            self.facts.required_blocks.append(rpath)
            if not self.need_object(rp, rpath, "required_providers"):
                continue
            for name in sorted(rp):
                if name == "//":
                    continue
                self.required_provider(name, rp[name], join(rpath, name))

    def required_provider(self, name: str, spec: Any, path: str) -> None:
        self.facts.required[name] = path
        if isinstance(spec, str):  # legacy: just a version constraint
            spec = {"version": spec}
        if not self.need_object(spec, path, "a required provider"):
            return
        self.known_keys(spec, ("source", "version", "configuration_aliases"), path, "required provider")
        source, version = spec.get("source"), spec.get("version")
        expected = SCHEMA_SOURCES.get(name)
        if source is not None and not isinstance(source, str):
            self.report(join(path, "source"), f"expected string, got {value_kind(source)}", "type")
        elif expected and isinstance(source, str) and source.lower().removeprefix("registry.terraform.io/") != expected:
            self.report(
                join(path, "source"),
                f"source {source!r} is not {expected!r}, the provider the bundled schema describes",
                "version",
            )
        if version is None:
            return
        if not isinstance(version, str):
            self.report(join(path, "version"), f"expected string, got {value_kind(version)}", "type")
            return
        have = SCHEMA_VERSIONS.get(name)
        try:
            ok = have is None or admits(version, have)
        except ValueError as exc:
            self.report(join(path, "version"), str(exc), "version")
            return
        if not ok:
            self.report(
                join(path, "version"),
                f"constraint {version!r} does not admit {name} {have}, the version the bundled schema comes from",
                "version",
            )

    # ------------------------------------------------------------------ bodies

    def resource_body(self, rtype: str, body: Any, block: dict[str, Any], path: str) -> None:
        if not self.need_object(body, path, "a resource body"):
            return
        if "count" in body and "for_each" in body:
            self.report(join(path, "for_each"), "count and for_each cannot both be set", "shape")
        self.body(
            body,
            block,
            path,
            meta={
                "count": "number",
                "for_each": "dynamic",
                "provider": "provider",
                "depends_on": "depends_on",
                "lifecycle": "lifecycle",
                "provisioner": "dynamic",
                "connection": "dynamic",
            },
        )
        self.facts.used_providers.setdefault(self.schemas.provider_of(rtype), path)

    def body(self, value: Any, block: Mapping[str, Any], path: str, meta: Mapping[str, str] | None = None) -> None:
        """Check a block body against a schema ``block`` (attributes and nested block types)."""
        if not self.need_object(value, path, "a block body"):
            return
        attrs: Mapping[str, Any] = block.get("attributes", {})
        blocks: Mapping[str, Any] = block.get("block_types", {})
        meta = meta or {}
        dynamic: set[str] = set()
        for key in sorted(value):
            v, p = value[key], join(path, key)
            if key == "//":
                continue
            if key in meta:
                self.meta(meta[key], v, p, attrs, blocks)
            elif key == "dynamic":
                dynamic |= self.dynamic(v, blocks, p)
            elif key in attrs:
                self.attribute(key, attrs[key], v, p)
            elif key in blocks:
                self.block(key, blocks[key], v, p)
            else:
                self.report(p, f"unsupported argument {key!r}{hint(key, [*attrs, *blocks])}", "unknown-argument")
        for name in sorted(attrs):
            if attrs[name].get("required") and value.get(name) is None:
                self.report(join(path, name), f"missing required argument {name!r}", "missing-argument")
        for name in sorted(blocks):
            need = blocks[name].get("min_items") or 0
            if need and value.get(name) is None and name not in dynamic:
                self.report(join(path, name), f"missing required block {name!r} (at least {need})", "missing-block")

    def attribute(self, name: str, schema: Mapping[str, Any], value: Any, path: str) -> None:
        if schema.get("computed") and not schema.get("optional") and not schema.get("required"):
            self.report(path, f"{name!r} is computed by the provider and cannot be set", "computed-only")
            return
        if value is None:
            return
        nested = schema.get("nested_type")
        if nested is not None:
            self.nested_attribute(nested, value, path)
            return
        self.check_type(schema.get("type", "dynamic"), value, path)

    def nested_attribute(self, nested: Mapping[str, Any], value: Any, path: str) -> None:
        if is_interpolation(value):
            return
        inner = {"attributes": nested.get("attributes", {})}
        mode = nested.get("nesting_mode", "single")
        if mode == "single":
            self.body(value, inner, path)
        elif mode in ("list", "set"):
            if not isinstance(value, list):
                self.report(path, f"expected a list of objects, got {value_kind(value)}", "type")
                return
            for i, item in enumerate(value):
                self.body(item, inner, join(path, i))
        elif mode == "map" and self.need_object(value, path, "a map of objects"):
            for k in sorted(value):
                self.body(value[k], inner, join(path, k))

    def block(self, name: str, bt: Mapping[str, Any], value: Any, path: str) -> None:
        mode = bt.get("nesting_mode", "list")
        inner = bt.get("block", {})
        if value is None:
            return
        if mode in ("single", "group"):
            if isinstance(value, list):
                if len(value) > 1:
                    self.report(path, f"{len(value)} {name!r} blocks: nesting mode {mode} allows one", "block-count")
                if not value:
                    return
                value = value[0]
            if not isinstance(value, dict):
                self.report(path, f"{name!r} is a block: expected an object, got {value_kind(value)}", "block-shape")
                return
            self.body(value, inner, path)
            return
        if mode == "map":
            if not isinstance(value, dict):
                self.report(
                    path,
                    f"{name!r} is a map of blocks: expected an object of labelled blocks, got {value_kind(value)}",
                    "block-shape",
                )
                return
            items = [(v, join(path, k)) for k, v in sorted(value.items())]
        elif isinstance(value, dict):
            items = [(value, join(path, 0))]
        elif isinstance(value, list):
            items = [(v, join(path, i)) for i, v in enumerate(value)]
        else:
            self.report(
                path,
                f"{name!r} is a block (nesting {mode}): expected an object or a list of objects, "
                f"got {value_kind(value)}",
                "block-shape",
            )
            return
        lo, hi = bt.get("min_items") or 0, bt.get("max_items") or 0
        if hi and len(items) > hi:
            self.report(path, f"too many {name!r} blocks: {len(items)} (at most {hi})", "block-count")
        if lo and len(items) < lo:
            self.report(path, f"too few {name!r} blocks: {len(items)} (at least {lo})", "block-count")
        for item, ipath in items:
            if not isinstance(item, dict):
                self.report(ipath, f"{name!r} block must be a JSON object, got {value_kind(item)}", "block-shape")
                continue
            self.body(item, inner, ipath)

    def dynamic(self, value: Any, blocks: Mapping[str, Any], path: str) -> set[str]:
        names: set[str] = set()
        for obj, opath in _objects(value, path):
            if not self.need_object(obj, opath, "a dynamic section"):
                continue
            for name in sorted(obj):
                npath = join(opath, name)
                if name not in blocks:
                    self.report(
                        npath, f"dynamic block for unknown block type {name!r}{hint(name, blocks)}", "unknown-argument"
                    )
                    continue
                names.add(name)
                for spec, spath in _objects(obj[name], npath):
                    if self.need_object(spec, spath, "a dynamic block") and "content" in spec:
                        self.body(spec["content"], blocks[name]["block"], join(spath, "content"))
        return names

    # ------------------------------------------------------------------ meta-arguments

    def meta(self, kind: str, value: Any, path: str, attrs: Mapping[str, Any], blocks: Mapping[str, Any]) -> None:
        if kind == "provider":
            if not (isinstance(value, str) and all(IDENT.match(p) for p in value.split("."))):
                self.report(path, "provider must be a provider reference such as 'aws' or 'aws.alias'", "type")
            else:
                self.facts.provider_refs.append((value, path))
        elif kind == "depends_on":
            self.depends_on(value, path)
        elif kind == "lifecycle":
            self.lifecycle(value, path, attrs, blocks)
        else:
            self.check_type(kind, value, path)

    def depends_on(self, value: Any, path: str) -> None:
        if value is None:
            return
        if not isinstance(value, list):
            self.report(path, f"depends_on must be a list of references, got {value_kind(value)}", "type")
            return
        for i, item in enumerate(value):
            refs = references(item) if isinstance(item, str) else []
            if not refs:
                self.report(join(path, i), f"not a reference: {item!r}", "type")
            self.facts.refs += [(r, join(path, i)) for r in refs]

    def lifecycle(self, value: Any, path: str, attrs: Mapping[str, Any], blocks: Mapping[str, Any]) -> None:
        for obj, opath in _objects(value, path):
            if not self.need_object(obj, opath, "a lifecycle block"):
                continue
            self.known_keys(obj, LIFECYCLE, opath, "lifecycle")
            for key in ("create_before_destroy", "prevent_destroy"):
                self.check_type("bool", obj.get(key), join(opath, key))
            ignore = obj.get("ignore_changes")
            ipath = join(opath, "ignore_changes")
            if ignore is None or ignore == "all":
                pass
            elif not isinstance(ignore, list):
                self.report(ipath, 'ignore_changes must be a list of argument names or "all"', "type")
            else:
                for i, item in enumerate(ignore):
                    first = item.split(".")[0].split("[")[0] if isinstance(item, str) else None
                    if first is None or (first not in attrs and first not in blocks):
                        self.report(
                            join(ipath, i), f"ignore_changes names unknown argument {item!r}", "unknown-argument"
                        )
            for key in ("precondition", "postcondition"):
                self.conditions(obj.get(key), join(opath, key))

    def conditions(self, value: Any, path: str) -> None:
        if value is None:
            return
        for obj, opath in _objects(value, path):
            if not self.need_object(obj, opath, "a condition block"):
                continue
            self.known_keys(obj, ("condition", "error_message"), opath, "condition block")
            for key in ("condition", "error_message"):
                if key not in obj:
                    self.report(join(opath, key), f"missing required argument {key!r}", "missing-argument")
                else:
                    self.check_type("bool" if key == "condition" else "string", obj[key], join(opath, key))

    # ------------------------------------------------------------------ helpers

    def check_type(self, t: Any, value: Any, path: str) -> None:
        for p, msg in type_errors(t, value, path):
            self.report(p, msg, "type")

    def known_keys(self, obj: Mapping[str, Any], allowed: tuple[str, ...], path: str, what: str) -> None:
        for key in sorted(obj):
            if key != "//" and key not in allowed:
                self.report(
                    join(path, key), f"unsupported argument {key!r} in a {what}{hint(key, allowed)}", "unknown-argument"
                )

    def strings(self, value: Any, path: str) -> None:
        """Find every interpolation: flag unterminated ones, collect references."""
        if isinstance(value, dict):
            for k in sorted(value):
                if k != "//":
                    self.strings(value[k], join(path, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.strings(v, join(path, i))
        elif isinstance(value, str) and ("${" in value or "%{" in value):
            if _directive(value):
                self.report(
                    path,
                    "template directive '%{' that gpuprov never writes (data must be escaped as '%%{')",
                    "interpolation",
                )
            exprs = interpolations(value)
            if exprs is None:
                self.report(path, "unterminated interpolation: '${' without its closing '}'", "syntax")
                return
            for expr in exprs:
                if not OWN_EXPRESSION.fullmatch(expr) and expr not in OWN_FUNCTIONS:
                    self.report(
                        path,
                        f"interpolation that gpuprov does not write (data must be escaped as '$${{'): ${{{expr[:60]}}}",
                        "interpolation",
                    )
                    continue
                self.facts.refs += [(r, path) for r in references(expr)]


# What gpuprov's renderers write inside ${…}: references to variables, locals and resource
# attributes, and the one validation function of var.name_prefix. Anything else in a file is
# either a hand edit or data that escaped escaping.
OWN_EXPRESSION = re.compile(
    r"(?:var|local)\.[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*"
    r"|(?:aws|google|azurerm)_[a-z0-9_]+\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+"
)
OWN_FUNCTIONS = frozenset({'can(regex("^[a-z][a-z0-9-]{0,19}$", var.name_prefix))'})


def _directive(s: str) -> bool:
    """A live template directive: '%{' not written as '%%{'."""
    i = s.find("%{")
    while i >= 0:
        if i == 0 or s[i - 1] != "%":
            return True
        i = s.find("%{", i + 2)
    return False


# ---------------------------------------------------------------------------- public API


def check_document(
    doc: Mapping[str, Any], schemas: Schemas | None = None, *, file: str = "<document>"
) -> list[Problem]:
    """Problems in one Terraform JSON document (no cross-file checks), sorted by path."""
    checker = _Checker(file, schemas or load_schemas())
    checker.document(doc)
    return sorted(checker.problems)


def check_files(files: Mapping[str, Mapping[str, Any]], schemas: Schemas | None = None) -> list[Problem]:
    """Problems in a module made of ``files`` (file name → document), including cross-file ones."""
    schemas = schemas or load_schemas()
    checkers = []
    for name in sorted(files):
        checker = _Checker(name, schemas)
        checker.document(files[name])
        checkers.append(checker)
    problems = [p for c in checkers for p in c.problems]
    problems += module_problems([(c.file, c.facts) for c in checkers], schemas)
    return sorted(problems)


MAX_FILE_BYTES = 64 << 20
MAX_JSON_DEPTH = 100


def check_dir(path: Path) -> list[Problem]:
    """Read every ``*.tf.json`` in ``path`` and check them as one module."""
    path = Path(path)
    docs: dict[str, Mapping[str, Any]] = {}
    problems: list[Problem] = []
    names = sorted(p.name for p in path.glob("*.tf.json") if p.is_file())
    if not names:
        return [Problem(str(path), "", "no *.tf.json files here", "syntax")]
    from gpuprov.errors import ConfigError
    from gpuprov.safeyaml import check_nesting, read_text

    for name in names:
        try:
            text = read_text(path / name, name, MAX_FILE_BYTES)
            check_nesting(text, name, MAX_JSON_DEPTH, 10**9)  # JSON: brackets, not indentation
            docs[name] = json.loads(text)
        except ConfigError as exc:  # unreadable, too large, too deep: said before any parser recursed
            problems.append(Problem(name, "", exc.message.removeprefix(f"{name}: "), "syntax"))
        except json.JSONDecodeError as exc:
            problems.append(Problem(name, "", f"not valid JSON at line {exc.lineno}, column {exc.colno}", "syntax"))
        except RecursionError:
            problems.append(Problem(name, "", f"nested deeper than {MAX_JSON_DEPTH} levels", "syntax"))
    return sorted(problems + check_files(docs))
