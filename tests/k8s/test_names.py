"""Names unique after normalisation: windows whose names normalise alike (``Night!``, ``night?``,
``...``, ``---``) get distinct CronJobs, directories and labels, each within Kubernetes' limits;
``--window night`` finds neither ``Night!`` nor ``night?``; a 40-character fleet's rebalancer
CronJob fits 52 characters; two sources that would still share a name are refused, naming both."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuprov import emit, names
from gpuprov.cli import app
from gpuprov.errors import UsageError
from gpuprov.plandoc import PlanDocument, Window, to_json
from k8s.check import problems
from k8s.render import Params, find_window, render, window_cronjobs, window_key
from tests.plans import planned

DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
TRICKY = ("Night!", "night?", "...", "---")


@pytest.fixture(scope="module")
def tricky() -> PlanDocument:
    doc = planned("day_night")
    windows = tuple(Window(name=n, start_slot=6 * i, end_slot=6 * (i + 1) % 24) for i, n in enumerate(TRICKY))
    return dataclasses.replace(doc, windows=windows)


def test_windows_that_normalise_alike_get_distinct_valid_names(tricky: PlanDocument) -> None:
    jobs = window_cronjobs(tricky, "ghcr.io/acme/gpuprov:1.2", Params())["windows-cronjobs.yaml"]
    cron_names = [j["metadata"]["name"] for j in jobs]
    assert len(cron_names) == len(set(cron_names)) == 4
    assert all(len(n) <= names.K8S_CRONJOB and DNS1123.fullmatch(n) for n in cron_names), cron_names
    labels = [j["metadata"]["labels"]["gpuprov.io/window"] for j in jobs]
    assert len(set(labels)) == 4 and all(len(v) <= 63 and DNS1123.fullmatch(v) for v in labels)
    assert sorted(j["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][4] for j in jobs) == (
        sorted(TRICKY)  # each CronJob applies its own window, by its exact name
    )
    for job in jobs:
        assert problems(job, "windows-cronjobs.yaml") == []
    files = render(tricky, Params(), datetime(2026, 6, 2, 12, tzinfo=UTC))
    dirs = sorted(f.split("/")[1] for f in files if f.startswith("windows/"))
    assert dirs == sorted(window_key(n) for n in TRICKY) and len(set(dirs)) == 4  # no window's quotas dropped


def test_a_name_is_kept_when_it_already_is_one_and_is_stable() -> None:
    assert window_key("night") == "night" and window_key("default-2") == "default-2"
    assert window_key("Night!") == window_key("Night!") == "night-" + window_key("Night!").rsplit("-", 1)[1]
    assert window_key("Night!") != window_key("night?")
    assert len(window_key("w" * 100)) <= 37


def test_window_night_finds_neither_night_bang_nor_night_question(tricky: PlanDocument, tmp_path: Path) -> None:
    assert find_window(tricky, "night") is None
    assert find_window(tricky, "Night!") is not None and find_window(tricky, "Night!").name == "Night!"  # type: ignore[union-attr]
    key = window_key("night?")
    assert find_window(tricky, key).name == "night?"  # type: ignore[union-attr]
    plan = tmp_path / "plan.json"
    plan.write_text(to_json(tricky))
    r = CliRunner().invoke(app, ["k8s", "apply-window", str(plan), "--window", "night", "--dry-run"])
    assert r.exit_code == 2 and "has no window 'night'" in r.stderr, r.output


def test_the_rebalancer_cronjob_of_a_40_character_fleet_fits() -> None:
    from datetime import timedelta

    owner = "a" * 19 + "-" + "b" * 20
    assert names.owner(owner) == owner and len(owner) == 40
    docs = emit.kubernetes(emit.Job(owner=owner, plan=None, every=timedelta(minutes=15), image="g:1"), "*/15 * * * *")
    cronjob = next(d for d in docs if d["kind"] == "CronJob")
    assert len(cronjob["metadata"]["name"]) <= 52 and DNS1123.fullmatch(cronjob["metadata"]["name"])
    assert {d["metadata"]["name"] for d in docs} == {cronjob["metadata"]["name"]}  # SA, CronJob: one name
    assert problems(cronjob, "rebalance.yaml") == []
    short = emit.kubernetes(emit.Job(owner="prod", plan=None, every=timedelta(minutes=15), image="g:1"), "* * * * *")
    assert short[-1]["metadata"]["name"] == "gpuprov-rebalance-prod"  # a name that fits is unchanged


def test_two_sources_that_would_still_share_a_name_are_refused_naming_both() -> None:
    with pytest.raises(UsageError) as err:
        names.unique(["Alpha", "alpha"], str.lower, "window")
    assert "'Alpha'" in err.value.message and "'alpha'" in err.value.message
    assert names.unique(["a", "a", "b"], str.lower, "window") == {"a": "a", "b": "b"}  # the same source twice


@given(st.text(min_size=1, max_size=120), st.integers(min_value=10, max_value=253))
def test_identifiers_are_valid_and_fit(text: str, limit: int) -> None:
    made = names.identifier(text, limit)
    assert len(made) <= limit and DNS1123.fullmatch(made), (text, made)
    if DNS1123.fullmatch(text) and len(text) <= limit:
        assert made == text
    else:
        assert made != names.identifier(text + "x", limit) or text + "x" == made  # the digest is of the whole text
