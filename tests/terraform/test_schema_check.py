"""The schema checker on broken documents: one test per kind of error, each expecting exactly it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from terraform.provider_schemas import Schemas, load_schemas
from terraform.schema_check import Problem, check_dir, check_document, check_files

F = "t.tf.json"
ASG = "resource.aws_autoscaling_group.g"


def asg(**extra: Any) -> dict[str, Any]:
    """A minimal valid aws_autoscaling_group with a mixed instances policy."""
    body: dict[str, Any] = {
        "min_size": 0,
        "max_size": 2,
        "mixed_instances_policy": {
            "launch_template": {
                "launch_template_specification": {"launch_template_id": "lt-123", "version": "$Latest"},
                "override": [{"instance_type": "p5.48xlarge"}],
            }
        },
    }
    body.update(extra)
    return {"resource": {"aws_autoscaling_group": {"g": body}}}


def problems(doc: dict[str, Any], schemas: Schemas | None = None) -> list[tuple[str, str]]:
    return [(p.path, p.kind) for p in check_document(doc, schemas, file=F)]


def only(doc: dict[str, Any], path: str, kind: str, words: str = "", schemas: Schemas | None = None) -> Problem:
    found = check_document(doc, schemas, file=F)
    assert [(p.path, p.kind) for p in found] == [(path, kind)], [str(p) for p in found]
    assert words in found[0].message, found[0].message
    assert found[0].file == F
    return found[0]


def test_baseline_is_clean() -> None:
    assert problems(asg()) == []


def test_unknown_resource_type() -> None:
    doc = {"resource": {"aws_autoscaling_grop": {"g": {"min_size": 1}}}}
    only(doc, "resource.aws_autoscaling_grop", "unknown-type", "did you mean 'aws_autoscaling_group'")


def test_unknown_argument() -> None:
    only(asg(desired_capacty=3), f"{ASG}.desired_capacty", "unknown-argument", "did you mean 'desired_capacity'")


def test_missing_required_argument() -> None:
    doc = asg()
    del doc["resource"]["aws_autoscaling_group"]["g"]["max_size"]
    only(doc, f"{ASG}.max_size", "missing-argument", "'max_size'")


def test_null_required_argument_counts_as_missing() -> None:
    only(asg(max_size=None), f"{ASG}.max_size", "missing-argument")


def test_computed_only_argument_set() -> None:
    only(asg(arn="arn:aws:autoscaling:x"), f"{ASG}.arn", "computed-only", "computed by the provider")


def test_optional_computed_argument_may_be_set() -> None:
    assert problems(asg(desired_capacity=1, name="x")) == []


def test_nested_unknown_argument() -> None:
    doc = asg()
    spec = doc["resource"]["aws_autoscaling_group"]["g"]["mixed_instances_policy"]["launch_template"]
    spec["launch_template_specification"]["verison"] = "1"
    only(
        doc,
        f"{ASG}.mixed_instances_policy[0].launch_template[0].launch_template_specification[0].verison",
        "unknown-argument",
        "did you mean 'version'",
    )


def test_nested_missing_block() -> None:
    doc = asg()
    del doc["resource"]["aws_autoscaling_group"]["g"]["mixed_instances_policy"]["launch_template"]
    only(doc, f"{ASG}.mixed_instances_policy[0].launch_template", "missing-block", "at least 1")


def test_nested_missing_required_argument_in_set_block() -> None:
    doc = asg(tag=[{"key": "team", "value": "ml"}])
    only(doc, f"{ASG}.tag[0].propagate_at_launch", "missing-argument")


def test_deeply_nested_type_error() -> None:
    doc = asg()
    lt = doc["resource"]["aws_autoscaling_group"]["g"]["mixed_instances_policy"]["launch_template"]
    lt["override"][0]["instance_requirements"] = {"vcpu_count": {"min": "lots"}}
    only(
        doc,
        f"{ASG}.mixed_instances_policy[0].launch_template[0].override[0].instance_requirements[0].vcpu_count[0].min",
        "type",
        "expected number, got string",
    )


def test_list_block_max_items() -> None:
    policy = asg()["resource"]["aws_autoscaling_group"]["g"]["mixed_instances_policy"]
    only(
        asg(mixed_instances_policy=[policy, copy.deepcopy(policy)]),
        f"{ASG}.mixed_instances_policy",
        "block-count",
        "at most 1",
    )


def test_list_block_min_items() -> None:
    doc = asg()
    doc["resource"]["aws_autoscaling_group"]["g"]["mixed_instances_policy"]["launch_template"] = []
    only(doc, f"{ASG}.mixed_instances_policy[0].launch_template", "block-count", "at least 1")


def test_single_block_given_twice() -> None:
    only(asg(timeouts=[{"delete": "5m"}, {"delete": "6m"}]), f"{ASG}.timeouts", "block-count", "allows one")


def test_single_block_is_not_indexed() -> None:
    only(asg(timeouts={"delete": 5, "create": "1m"}), f"{ASG}.timeouts.create", "unknown-argument")


def test_block_given_a_scalar() -> None:
    only(
        asg(mixed_instances_policy="spot please"),
        f"{ASG}.mixed_instances_policy",
        "block-shape",
        "expected an object or a list of objects",
    )


def test_block_items_must_be_objects() -> None:
    only(asg(tag=["team=ml"]), f"{ASG}.tag[0]", "block-shape")


@pytest.mark.parametrize(
    ("arg", "value", "expected"),
    [
        ("max_size", [2], "expected number, got list"),
        ("min_size", "many", "expected number, got string"),
        ("capacity_rebalance", "yes", "expected bool, got string"),
        ("name", ["a"], "expected string, got list"),
        ("termination_policies", "OldestInstance", "expected list(string), got string"),
        ("suspended_processes", {"a": "b"}, "expected set(string), got object"),
    ],
)
def test_value_types(arg: str, value: Any, expected: str) -> None:
    only(asg(**{arg: value}), f"{ASG}.{arg}", "type", expected)


def test_collection_element_type() -> None:
    only(
        asg(termination_policies=["Default", ["nested"]]),
        f"{ASG}.termination_policies[1]",
        "type",
        "expected string, got list",
    )


def test_map_value_type() -> None:
    doc = {
        "resource": {
            "aws_placement_group": {"p": {"name": "p", "strategy": "cluster", "tags": {"team": {"nested": 1}}}}
        }
    }
    only(doc, "resource.aws_placement_group.p.tags.team", "type", "expected string, got object")


def test_terraform_conversions_are_accepted() -> None:
    # numbers and bools convert to strings; numeric and boolean strings convert back
    assert problems(asg(max_size="3", capacity_rebalance="true", name=5, wait_for_capacity_timeout=0)) == []


def test_interpolation_accepted_for_any_type() -> None:
    doc = asg(
        max_size="${var.n * 2}",
        capacity_rebalance="${var.spot}",
        termination_policies="${var.tp}",
        suspended_processes="${toset(var.sp)}",
        tag="${var.tags_are_not_blocks}",
    )
    found = problems(doc)
    # a block is not a value: an interpolation cannot stand for a block (use `dynamic`); and the
    # checker flags expressions gpuprov never writes (arithmetic, function calls)
    assert sorted(found) == sorted(
        [
            (f"{ASG}.tag", "block-shape"),
            (f"{ASG}.max_size", "interpolation"),
            (f"{ASG}.suspended_processes", "interpolation"),
        ]
    )


@pytest.mark.parametrize(
    "text", ['${file("/etc/hostname")}', "x ${path.module} y", "%{ if true }x%{ endif }", "${var.a}${local.b[0]}"]
)
def test_interpolations_gpuprov_does_not_write_are_flagged(text: str) -> None:
    assert (f"{ASG}.name", "interpolation") in problems(asg(name=text))


@pytest.mark.parametrize("text", ['$${file("/etc/hostname")}', "%%{ if true }x%%{ endif }", "${var.name_prefix}-x"])
def test_escaped_data_and_own_references_pass(text: str) -> None:
    assert [p for p in problems(asg(name=text)) if p[1] == "interpolation"] == []


def test_mixed_template_is_not_a_list() -> None:
    only(asg(termination_policies="${var.a}-x"), f"{ASG}.termination_policies", "type")


def test_unterminated_interpolation() -> None:
    only(asg(name="${var.prefix-asg"), f"{ASG}.name", "syntax", "unterminated interpolation")


def test_unknown_top_level_key() -> None:
    only({"resources": {}}, "resources", "top-level", "did you mean 'resource'")


def test_comment_keys_are_allowed_everywhere() -> None:
    doc = asg(**{"//": "a comment"})
    doc["//"] = "top comment"
    assert problems(doc) == []


def test_count_and_for_each_together() -> None:
    only(asg(count=2, for_each={"a": 1}), f"{ASG}.for_each", "shape")


def test_meta_arguments_are_accepted() -> None:
    doc = asg(
        count=2,
        depends_on=["aws_placement_group.p"],
        provider="aws.east",
        lifecycle={"ignore_changes": ["desired_capacity", "tag"], "create_before_destroy": True},
    )
    assert problems(doc) == []


def test_ignore_changes_unknown_argument() -> None:
    only(
        asg(lifecycle={"ignore_changes": ["desired_capacty"]}), f"{ASG}.lifecycle.ignore_changes[0]", "unknown-argument"
    )


def test_lifecycle_unknown_key() -> None:
    only(asg(lifecycle={"prevent_destory": True}), f"{ASG}.lifecycle.prevent_destory", "unknown-argument")


def test_dynamic_block() -> None:
    doc = asg(
        dynamic={
            "tag": {
                "for_each": "${var.tags}",
                "content": {"key": "${tag.key}", "value": "v", "propagate_at_launch": True},
            }
        }
    )
    # the shape is right; the iterator reference is flagged only because gpuprov writes no dynamic blocks
    assert problems(doc) == [(f"{ASG}.dynamic.tag.content.key", "interpolation")]
    doc = asg(dynamic={"tags": {"for_each": "${var.tags}", "content": {}}})
    only(doc, f"{ASG}.dynamic.tags", "unknown-argument")


# ------------------------------------------------------------------ nesting modes not in the bundled schemas


def synthetic() -> Schemas:
    base = load_schemas()
    thing = {
        "attributes": {
            "name": {"type": "string", "required": True},
            "shape": {"type": ["object", {"a": "number", "b": "string"}], "optional": True},
            "loose": {"type": ["object", {"a": "number", "b": "string"}, ["b"]], "optional": True},
            "pair": {"type": ["tuple", ["string", "number"]], "optional": True},
            "nested": {
                "nested_type": {"nesting_mode": "list", "attributes": {"x": {"type": "number", "required": True}}},
                "optional": True,
            },
        },
        "block_types": {
            "rule": {
                "nesting_mode": "map",
                "max_items": 2,
                "block": {"attributes": {"port": {"type": "number", "required": True}}},
            },
            "group": {"nesting_mode": "group", "block": {"attributes": {"on": {"type": "bool", "optional": True}}}},
        },
    }
    return Schemas(resources={**base.resources, "aws_thing": thing}, providers=base.providers)


def thing(**extra: Any) -> dict[str, Any]:
    return {"resource": {"aws_thing": {"t": {"name": "t", **extra}}}}


T = "resource.aws_thing.t"


def test_map_nesting_mode() -> None:
    s = synthetic()
    assert problems(thing(rule={"http": {"port": 80}, "https": {"port": 443}}), s) == []
    only(thing(rule={"http": {"port": 80, "host": "a"}}), f"{T}.rule.http.host", "unknown-argument", schemas=s)
    only(thing(rule=[{"port": 80}]), f"{T}.rule", "block-shape", "map of blocks", schemas=s)
    only(thing(rule={"a": {"port": 1}, "b": {"port": 2}, "c": {"port": 3}}), f"{T}.rule", "block-count", schemas=s)


def test_group_nesting_mode() -> None:
    s = synthetic()
    assert problems(thing(group={"on": True}), s) == []
    only(thing(group={"on": "maybe"}), f"{T}.group.on", "type", schemas=s)


def test_object_types() -> None:
    s = synthetic()
    assert problems(thing(shape={"a": 1, "b": "x"}, loose={"a": 2}), s) == []
    only(thing(shape={"a": 1}), f"{T}.shape.b", "type", "missing attribute 'b'", schemas=s)
    only(thing(shape={"a": 1, "b": "x", "c": 0}), f"{T}.shape.c", "type", "unexpected attribute", schemas=s)
    only(thing(pair=["x", "y"]), f"{T}.pair[1]", "type", schemas=s)
    only(thing(pair=["x"]), f"{T}.pair", "type", "2 elements", schemas=s)


def test_nested_type_attribute() -> None:
    s = synthetic()
    assert problems(thing(nested=[{"x": 1}]), s) == []
    only(thing(nested=[{}]), f"{T}.nested[0].x", "missing-argument", schemas=s)


# ------------------------------------------------------------------ provider, variable, output, terraform


def test_provider_block() -> None:
    assert (
        problems({"provider": {"aws": {"region": "us-east-1", "alias": "east", "default_tags": {"tags": {"a": "b"}}}}})
        == []
    )
    only({"provider": {"aws": {"regoin": "us-east-1"}}}, "provider.aws.regoin", "unknown-argument")
    only({"provider": {"awss": {}}}, "provider.awss", "unknown-type", "unknown provider")
    only(
        {"provider": {"azurerm": [{"features": {}}, {"features": "all", "alias": "b"}]}},
        "provider.azurerm[1].features",
        "block-shape",
    )


def test_variable_blocks() -> None:
    assert (
        problems(
            {
                "variable": {
                    "ids": {"type": "list(string)", "default": [], "description": "d"},
                    "img": {"type": "object({a = string, b = optional(number, 3)})", "default": {"a": "x"}},
                }
            }
        )
        == []
    )
    only({"variable": {"v": {"type": "list(strng)"}}}, "variable.v.type", "type", "unknown type")
    only({"variable": {"v": {"type": "map(number)", "default": {"a": "x"}}}}, "variable.v.default.a", "type")
    only({"variable": {"v": {"type": "string", "defualt": "x"}}}, "variable.v.defualt", "unknown-argument")
    only(
        {"variable": {"v": {"type": "string", "sensitive": True, "default": "hunter2"}}}, "variable.v.default", "secret"
    )
    only(
        {"variable": {"v": {"validation": {"condition": "${var.v}"}}}},
        "variable.v.validation.error_message",
        "missing-argument",
    )


def test_output_blocks() -> None:
    only({"output": {"o": {"description": "no value"}}}, "output.o.value", "missing-argument")
    only({"output": {"o": {"value": 1, "sensitiv": True}}}, "output.o.sensitiv", "unknown-argument")


def test_terraform_block() -> None:
    ok: dict[str, Any] = {
        "terraform": {
            "required_version": ">= 1.5.0",
            "required_providers": {
                "aws": {"source": "hashicorp/aws", "version": "~> 6.0"},
                "google": {"source": "hashicorp/google", "version": ">= 6.1, < 7.0"},
                "azurerm": {"source": "hashicorp/azurerm", "version": "~> 4.0"},
            },
        }
    }
    assert problems(ok) == []
    bad = copy.deepcopy(ok)
    bad["terraform"]["required_providers"]["aws"]["version"] = "~> 5.0"
    only(bad, "terraform.required_providers.aws.version", "version", "does not admit aws 6.47.0")
    bad = copy.deepcopy(ok)
    bad["terraform"]["required_providers"]["google"]["source"] = "hashicorp/google-beta"
    only(bad, "terraform.required_providers.google.source", "version")
    only({"terraform": {"backed": {}}}, "terraform.backed", "unknown-argument", "did you mean 'backend'")


def test_locals_and_data() -> None:
    assert problems({"locals": {"a": 1, "b": "${local.a}"}}) == []
    only({"data": {"aws_ami": {"gpu": {"most_recent": True}}}}, "data.aws_ami", "unknown-type", "data source")


def test_document_must_be_an_object() -> None:
    assert [(p.path, p.kind) for p in check_document([], file=F)] == [("", "shape")]  # type: ignore[arg-type]


# ------------------------------------------------------------------ module-level (several files)


def module(**files: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(p.file, p.path, p.kind) for p in check_files({f"{k}.tf.json": v for k, v in files.items()})]


VERSIONS = {"terraform": {"required_providers": {"aws": {"source": "hashicorp/aws", "version": "~> 6.0"}}}}


def test_references() -> None:
    main = {
        "variable": {"n": {"type": "number"}},
        "resource": {"aws_placement_group": {"p": {"name": "${var.n}", "strategy": "cluster"}}},
        "output": {
            "ok": {"value": "${aws_placement_group.p.arn}"},
            "novar": {"value": "${var.m}"},
            "nores": {"value": "${aws_placement_group.q.id}"},
            "noattr": {"value": "${aws_placement_group.p.arnn}"},
            "quoted": {"value": '${lookup(var.n, "aws_placement_group.q.id", 0)}'},
        },
    }
    assert module(main=main, versions=VERSIONS) == [
        ("main.tf.json", "output.noattr.value", "reference"),
        ("main.tf.json", "output.nores.value", "reference"),
        ("main.tf.json", "output.novar.value", "reference"),
        ("main.tf.json", "output.quoted.value", "interpolation"),  # a function call gpuprov never writes
    ]


def test_depends_on_reference() -> None:
    main = {
        "resource": {
            "aws_placement_group": {"p": {"name": "a", "strategy": "cluster", "depends_on": ["aws_placement_group.q"]}}
        }
    }
    assert module(main=main, versions=VERSIONS) == [
        ("main.tf.json", "resource.aws_placement_group.p.depends_on[0]", "reference")
    ]


def test_duplicates_across_files() -> None:
    pg = {"resource": {"aws_placement_group": {"p": {"name": "a", "strategy": "cluster"}}}}
    assert module(a=pg, b=pg, versions=VERSIONS) == [("b.tf.json", "resource.aws_placement_group.p", "duplicate")]
    assert module(a=VERSIONS, b=VERSIONS) == [("b.tf.json", "terraform.required_providers", "duplicate")]


def test_provider_must_be_required() -> None:
    main = {
        "resource": {
            "google_compute_autoscaler": {
                "a": {"name": "a", "target": "x", "autoscaling_policy": {"min_replicas": 0, "max_replicas": 1}}
            }
        }
    }
    assert module(main=main, versions=VERSIONS) == [
        ("main.tf.json", "resource.google_compute_autoscaler.a", "reference")
    ]


def test_provider_alias_must_exist() -> None:
    main = {
        "provider": {"aws": {"region": "us-east-1", "alias": "east"}},
        "resource": {"aws_placement_group": {"p": {"name": "a", "strategy": "cluster", "provider": "aws.west"}}},
    }
    assert module(main=main, versions=VERSIONS) == [
        ("main.tf.json", "resource.aws_placement_group.p.provider", "reference")
    ]


def test_check_dir_reports_invalid_json(tmp_path: Path) -> None:
    (tmp_path / "good.tf.json").write_text(json.dumps(VERSIONS), encoding="utf-8")
    (tmp_path / "bad.tf.json").write_text('{"resource": {,}}', encoding="utf-8")
    found = check_dir(tmp_path)
    assert [(p.file, p.kind) for p in found] == [("bad.tf.json", "syntax")]
    assert "not valid JSON" in str(found[0])


def test_check_dir_empty(tmp_path: Path) -> None:
    assert [p.kind for p in check_dir(tmp_path)] == ["syntax"]


def test_problem_str() -> None:
    p = Problem("aws.tf.json", f"{ASG}.max_size", "missing required argument 'max_size'", "missing-argument")
    assert str(p) == f"aws.tf.json: {ASG}.max_size: missing required argument 'max_size'"
