"""Names, schedules, Terraform syntax helpers, schema loading and atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from terraform import write
from terraform.names import ident, slug
from terraform.plan import Window
from terraform.provider_schemas import load_schemas
from terraform.schedule import azure_recurrence, cron, window_hours
from terraform.tfsyntax import TypeExprError, admits, interpolations, is_interpolation, join, parse_type, references
from terraform.write import dumps, write_files


def test_ident_and_slug() -> None:
    assert ident("training", "use1-az4") == "training_use1_az4"
    assert ident("inference_us_central1_a", "a2-ultragpu-1g", "spot") == "inference_us_central1_a_a2_ultragpu_1g_spot"
    assert ident("8gpu") == "x_8gpu"
    assert slug("Standard_NC24ads_A100_v4", "od") == "standard-nc24ads-a100-v4-od"
    assert slug("a" * 60, limit=10) == "a" * 10


def test_cron() -> None:
    assert cron(8, "day") == "0 8 * * *"
    assert cron(0, "week") == "0 0 * * 1"  # Monday
    assert cron(6 * 24 + 23, "week") == "0 23 * * 0"  # Sunday


def test_window_hours_wrap() -> None:
    assert window_hours(Window("day", 8, 20), "day") == 12
    assert window_hours(Window("night", 20, 8), "day") == 12
    assert window_hours(Window("all", 5, 5), "day") == 24
    assert window_hours(Window("weekend", 114, 9), "week") == 63


def test_azure_recurrence() -> None:
    r = azure_recurrence(8, "day", "America/New_York")
    assert (r.timezone, r.hour, r.minute, len(r.days)) == ("Eastern Standard Time", 8, 0, 7)
    r = azure_recurrence(24 + 9, "week", "Europe/Berlin")
    assert (r.timezone, r.days, r.hour) == ("W. Europe Standard Time", ("Tuesday",), 9)
    # an unmapped zone falls back to UTC at its standard offset (Nepal: +05:45)
    r = azure_recurrence(2, "week", "Asia/Kathmandu")
    assert (r.timezone, r.days, r.hour, r.minute) == ("UTC", ("Sunday",), 20, 15)


def test_interpolations() -> None:
    assert interpolations("${var.a}-${var.b}") == ["var.a", "var.b"]
    assert interpolations("$${literal}") == []
    assert interpolations("${var.a") is None
    assert interpolations('${format("%s}", var.a)}') == ['format("%s}", var.a)']
    assert is_interpolation("${var.a}") and not is_interpolation("${var.a}-${var.b}")
    assert not is_interpolation("var.a")


def test_references() -> None:
    assert references("aws_launch_template.lt.id == var.x ? local.y : data.aws_ami.a.id") == [
        ("resource", "aws_launch_template", "lt", "id"),
        ("var", "x"),
        ("local", "y"),
        ("data", "aws_ami", "a"),
    ]
    assert references('lookup(var.m, "aws_x.y")') == [("var", "m")]
    assert references("count.index + each.key") == []


def test_parse_type() -> None:
    assert parse_type("list(string)") == ["list", "string"]
    assert parse_type("map(object({a = number, b = optional(bool, true)}))") == [
        "map",
        ["object", {"a": "number", "b": "bool"}, ["b"]],
    ]
    assert parse_type("tuple([string, any])") == ["tuple", ["string", "dynamic"]]
    assert parse_type("${string}") == "string"
    for bad in ("lst(string)", "list(string", "string string", "optional(string)"):
        with pytest.raises(TypeExprError):
            parse_type(bad)


def test_admits() -> None:
    assert admits("~> 6.0", "6.47.0") and not admits("~> 6.0", "7.0.0")
    assert admits("~> 4.79.0", "4.79.3") and not admits("~> 4.79.0", "4.80.0")
    assert admits(">= 6.1, < 7.0", "6.50.0") and not admits("!= 6.50.0", "6.50.0")
    assert admits("6.47.0", "6.47.0") and not admits("= 6.47.1", "6.47.0")
    with pytest.raises(ValueError):
        admits("about six", "6.0.0")


def test_join() -> None:
    assert join("", "resource") == "resource"
    assert join("a", 0) == "a[0]"
    assert join("tags", "gpuprov:group") == 'tags["gpuprov:group"]'


def test_bundled_schemas_load() -> None:
    schemas = load_schemas()
    assert {"aws_autoscaling_group", "google_compute_autoscaler", "azurerm_monitor_autoscale_setting"} <= set(
        schemas.resources
    )
    assert set(schemas.providers) == {"aws", "google", "azurerm"}
    assert schemas.provider_of("azurerm_resource_group") == "azurerm"


def test_schemas_come_from_the_package_not_shared_storage() -> None:
    package = Path(write.__file__).resolve().parent / "schemas"
    assert (package / "PROVENANCE.md").is_file()
    assert (package / "aws" / "aws_autoscaling_group.json").is_file()
    assert "/work/shared" not in (package.parent / "provider_schemas.py").read_text(encoding="utf-8")


# ------------------------------------------------------------------ writing


def test_write_files_format(tmp_path: Path) -> None:
    paths = write_files({"b.tf.json": {"z": 1, "a": {"y": [1, 2], "x": "é"}}, "a.tf.json": {}}, tmp_path / "out")
    assert [p.name for p in paths] == ["a.tf.json", "b.tf.json"]
    text = (tmp_path / "out" / "b.tf.json").read_text(encoding="utf-8")
    assert text == '{\n  "a": {\n    "x": "é",\n    "y": [\n      1,\n      2\n    ]\n  },\n  "z": 1\n}\n'
    assert text == dumps(json.loads(text))
    assert sorted(os.listdir(tmp_path / "out")) == ["a.tf.json", "b.tf.json"]  # no temp files left


def test_write_files_replaces_atomically(tmp_path: Path) -> None:
    target = tmp_path / "aws.tf.json"
    target.write_text("old\n", encoding="utf-8")
    keep = tmp_path / "other.tf.json"
    keep.write_text("{}\n", encoding="utf-8")
    write_files({"aws.tf.json": {"new": True}}, tmp_path)
    assert json.loads(target.read_text(encoding="utf-8")) == {"new": True}
    assert keep.read_text(encoding="utf-8") == "{}\n"


def test_write_files_failure_leaves_old_file(tmp_path: Path) -> None:
    target = tmp_path / "aws.tf.json"
    target.write_text("old\n", encoding="utf-8")
    with pytest.raises(TypeError):
        write_files({"aws.tf.json": {"bad": object()}}, tmp_path)
    assert target.read_text(encoding="utf-8") == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["aws.tf.json"]


@pytest.mark.parametrize("name", ["../x.tf.json", "sub/x.tf.json", "x.tf"])
def test_write_files_refuses_odd_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError):
        write_files({name: {}}, tmp_path)
