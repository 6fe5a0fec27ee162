"""Every command against hostile input, as a user runs it (a subprocess of the installed CLI).

Each case must end with a non-zero exit, exactly one ``error:`` line on stderr (a ``hint:``
line may follow), no traceback, within 10 s, without echoing a secret or the file's
contents, and with nothing stored: no plan saved, no journal row, no instance mirrored.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "gpuprov"
SECRET = "s3cr3t-Pa55"
# a SkyPilot v8 AWS vms.csv with one good row, and the import options that go with it
VMS = (
    b"InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone\n"
    b"g5.xlarge,A10G,1.0,4.0,16.0,,1.006,1.006,us-east-1,use1-az1\n"
)
AS = ("--format", "skypilot", "--as-of", "2026-01-01T00:00:00+00:00")

# one good anycloud history row and one good daily-price row, and their options
WHEN = "2026-04-02T10:00:00+00:00"
HIST = (
    "cloud,commit,commit_date,key_a,key_b,key_c,price,spot_price,prev_price,prev_spot_price,change\n"
    f"gcp,c1,{WHEN},T4,1,us-central1-a,0.35,0.15,,,new\n"
)
DAILY = "timestamp,instance,price_usd\n2026-04-02T00:00:00,p5.48xlarge,55.04\n"
DAILY_ARGS = ("--format", "daily-price", "--cloud", "aws", "--region", "us-east-1")

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(8)
)
DEEP = "x: " + "[" * 5000 + "]" * 5000 + "\n"
POLICY_OK = (
    "workloads: {training: {max_spot_fraction: 0.5}}\nschedule: {default: {training: 100%}}\ngpu: a100\ngpus: 8\n"
)


def write(tmp: Path, name: str, data: str | bytes) -> str:
    path = tmp / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return str(path)


def plan_file(tmp: Path, body: object) -> str:
    return write(tmp, "plan.json", json.dumps(body))


PG = {"GPUPROV_DATABASE_URL": "postgresql+psycopg://u:pw@127.0.0.1:1/db"}  # past the CronJob's database check
# Each case: (id, argv builder taking the temp dir, extra environment)
Case = tuple[str, Callable[[Path], list[str]], dict[str, str]]
CASES: list[Case] = [
    # -- plan flags
    ("gpus-huge", lambda t: ["plan", "--gpus", "10000000000", "--type", "a100"], {}),
    ("gpus-over-limit", lambda t: ["plan", "--gpus", "1000001", "--type", "a100"], {}),
    ("gpus-word", lambda t: ["plan", "--gpus", "lots", "--type", "a100"], {}),
    ("node-gpus-zero", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--node-gpus", "0"], {}),
    ("node-gpus-huge", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--node-gpus", "100000"], {}),
    ("gap-nan", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--gap", "nan"], {}),
    ("gap-huge", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--gap", "1e308"], {}),
    ("time-limit-huge", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--time-limit", "1e308"], {}),
    ("time-limit-negative", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--time-limit", "-1"], {}),
    ("time-limit-nan", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--time-limit", "nan"], {}),
    ("budget-nan", lambda t: ["plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "--budget", "nan"], {}),
    ("budget-inf", lambda t: ["plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "--budget", "inf"], {}),
    (
        "budget-1e400",
        lambda t: ["plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "--budget", "1e400"],
        {},
    ),
    ("spot-fraction-nan", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--max-spot-fraction", "nan"], {}),
    ("type-empty", lambda t: ["plan", "--gpus", "8", "--type", ""], {}),
    ("type-huge", lambda t: ["plan", "--gpus", "8", "--type", "a" * 10000], {}),
    ("type-markup", lambda t: ["plan", "--gpus", "8", "--type", "[/]"], {}),
    ("clouds-empty-items", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--clouds", "aws,,ibm"], {}),
    (
        "hours-huge",
        lambda t: ["plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "--hours", "99999999999999999999"],
        {},
    ),
    (
        "timezone-huge",
        lambda t: [
            "plan",
            "--policy",
            "day-night",
            "--gpus",
            "8",
            "--type",
            "a100",
            "--timezone",
            "Europe/" + "x" * 5000,
        ],
        {},
    ),
    (
        "timezone-traversal",
        lambda t: [
            "plan",
            "--policy",
            "day-night",
            "--gpus",
            "8",
            "--type",
            "a100",
            "--timezone",
            "../../../etc/passwd",
        ],
        {},
    ),
    (
        "chart-into-missing-dir",
        lambda t: ["plan", "--gpus", "8", "--type", "a100", "--chart", str(t / "no" / "such" / "dir" / "x.png")],
        {},
    ),
    (
        "chart-onto-directory",
        lambda t: ["plan", "--gpus", "8", "--type", "a100", "--chart", str(Path(t / "d.png").mkdir() or t / "d.png")],
        {},
    ),
    # -- policy files
    ("policy-alias-bomb", lambda t: ["plan", "--policy", write(t, "p.yaml", ALIAS_BOMB)], {}),
    ("policy-deep", lambda t: ["plan", "--policy", write(t, "p.yaml", DEEP)], {}),
    ("policy-not-utf8", lambda t: ["plan", "--policy", write(t, "p.yaml", b"name: \xff\xfe\n")], {}),
    ("policy-empty", lambda t: ["plan", "--policy", write(t, "p.yaml", "")], {}),
    ("policy-directory", lambda t: ["plan", "--policy", str(t)], {}),
    ("policy-too-big", lambda t: ["plan", "--policy", write(t, "p.yaml", "# " + "x" * (2 << 20))], {}),
    (
        "policy-gpus-huge",
        lambda t: ["plan", "--policy", write(t, "p.yaml", POLICY_OK.replace("gpus: 8", "gpus: 1000000000000"))],
        {},
    ),
    (
        "policy-budget-nan",
        lambda t: ["plan", "--policy", write(t, "p.yaml", POLICY_OK + "budget_per_hour: .nan\n")],
        {},
    ),
    (
        "policy-age-huge",
        lambda t: ["plan", "--policy", write(t, "p.yaml", POLICY_OK + "max_price_age_hours: 1e30\n")],
        {},
    ),
    (
        "policy-node-gpus-huge",
        lambda t: [
            "plan",
            "--policy",
            write(
                t,
                "p.yaml",
                POLICY_OK.replace("max_spot_fraction: 0.5", "max_spot_fraction: 0.5, node_gpus: 99999999999"),
            ),
        ],
        {},
    ),
    ("policy-timezone-int", lambda t: ["plan", "--policy", write(t, "p.yaml", POLICY_OK + "timezone: 5\n")], {}),
    ("policy-name-newline", lambda t: ["plan", "--policy", write(t, "p.yaml", POLICY_OK + 'name: "a\\nb"\n')], {}),
    (
        "policy-lost-hours-inf",
        lambda t: [
            "plan",
            "--policy",
            write(
                t,
                "p.yaml",
                POLICY_OK.replace(
                    "max_spot_fraction: 0.5", "max_spot_fraction: 0.5, lost_hours_per_interruption: .inf"
                ),
            ),
        ],
        {},
    ),
    ("policy-recursive-alias", lambda t: ["plan", "--policy", write(t, "p.yaml", "a: &a [*a]\n")], {}),
    (
        "policy-check-shadow-like",
        lambda t: ["policy", "check", write(t, "shadow", f"root:{SECRET}:19000:0:99999\n")],
        {},
    ),
    ("policy-check-bomb", lambda t: ["policy", "check", write(t, "p.yaml", ALIAS_BOMB)], {}),
    (
        "policy-check-secret-value",
        lambda t: ["policy", "check", write(t, "p.yaml", f"gpus: {SECRET}\n" + POLICY_OK[: POLICY_OK.index("gpu:")])],
        {},
    ),
    # -- config
    ("config-not-utf8", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{not_utf8}"}),
    ("config-alias-bomb", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{bomb}"}),
    ("config-owner-glob", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{owner_glob}"}),
    ("config-owner-int", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{owner_int}"}),
    ("config-limits-huge", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{limits_huge}"}),
    ("config-budget-inf", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{budget_inf}"}),
    ("config-regions-string", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{regions_string}"}),
    ("config-discount-5", lambda t: ["plan", "--gpus", "8", "--type", "a100"], {"GPUPROV_CONFIG": "{discount}"}),
    ("config-is-directory", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{dir}"}),
    ("bootstrap-missing", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{bootstrap_missing}"}),
    ("bootstrap-over-16k", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{bootstrap_huge}"}),
    ("bootstrap-kubelet-yaml", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{bootstrap_kubelet_yaml}"}),
    ("bootstrap-kubelet-str", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{bootstrap_kubelet_str}"}),
    ("bootstrap-unknown-cloud", lambda t: ["status", "--cached"], {"GPUPROV_CONFIG": "{bootstrap_oci}"}),
    ("env-owner-newline", lambda t: ["status", "--cached"], {"GPUPROV_OWNER": "a\nb"}),
    # -- fleet commands
    ("apply-owner-glob", lambda t: ["apply", plan_file(t, []), "--owner", "prod-*"], {}),
    ("destroy-owner-glob", lambda t: ["destroy", "--yes", "--owner", "prod-*"], {}),
    ("destroy-owner-question", lambda t: ["destroy", "--yes", "--owner", "prod-?"], {}),
    ("status-owner-long", lambda t: ["status", "--owner", "a" * 300], {}),
    ("status-owner-newline", lambda t: ["status", "--owner", "a\nnamespace: kube-system"], {}),
    ("status-owner-empty", lambda t: ["status", "--owner", ""], {}),
    ("apply-missing-file", lambda t: ["apply", str(t / "missing.json")], {}),
    ("apply-json-list", lambda t: ["apply", plan_file(t, [1, 2, 3])], {}),
    ("apply-json-scalar", lambda t: ["apply", plan_file(t, "plan")], {}),
    ("apply-old-schema", lambda t: ["apply", plan_file(t, {"plan_id": "abc", "allocations": []})], {}),
    ("apply-newer-schema", lambda t: ["apply", plan_file(t, {"schema_version": 99})], {}),
    ("apply-not-utf8", lambda t: ["apply", write(t, "plan.json", b"\xff\xfe{}")], {}),
    ("apply-deep-json", lambda t: ["apply", write(t, "plan.json", "[" * 100000 + "]" * 100000)], {}),
    ("apply-bad-plan-id", lambda t: ["apply", "%_%"], {}),
    ("apply-wait-negative", lambda t: ["apply", "abc", "--wait", "-1"], {}),
    ("destroy-wait-huge", lambda t: ["destroy", "--wait", "1e30"], {}),
    (
        "terraform-out-is-file",
        lambda t: ["terraform", plan_file(t, {"schema_version": 2}), "--out", write(t, "f", "x")],
        {},
    ),
    ("terraform-out-empty", lambda t: ["terraform", plan_file(t, {"schema_version": 2}), "--out", ""], {}),
    ("k8s-out-foreign", lambda t: ["k8s", plan_file(t, {"schema_version": 2}), "--out", str(t)], {}),
    ("k8s-out-dot", lambda t: ["k8s", plan_file(t, {"schema_version": 2}), "--out", "."], {}),
    ("k8s-out-empty", lambda t: ["k8s", plan_file(t, {"schema_version": 2}), "--out", ""], {}),
    ("k8s-out-is-file", lambda t: ["k8s", plan_file(t, {"schema_version": 2}), "--out", write(t, "f", "x")], {}),
    (
        "k8s-image-latest-port",
        lambda t: ["k8s", "x", "--out", str(t / "o"), "--windows", "cronjob", "--image", "localhost:5000/g:latest"],
        {},
    ),
    ("emit-image-untagged-port", lambda t: ["rebalance", "--emit", "cronjob", "--image", "localhost:5000/gpuprov"], PG),
    ("emit-image-shell", lambda t: ["rebalance", "--emit", "cronjob", "--image", "reg:5000/g:1;rm -rf /"], PG),
    ("terraform-check-missing", lambda t: ["terraform", "--check", str(t / "nope")], {}),
    ("terraform-check-file", lambda t: ["terraform", "--check", write(t, "f.tf.json", "{}")], {}),
    # -- prices and pricing
    ("prices-limit-negative", lambda t: ["prices", "--type", "a100", "--limit", "-1"], {}),
    ("prices-limit-huge", lambda t: ["prices", "--type", "a100", "--limit", "100000000000000000000"], {}),
    ("import-missing", lambda t: ["pricing", "import", str(t / "nope.csv"), "--format", "skypilot"], {}),
    ("import-not-utf8", lambda t: ["pricing", "import", write(t, "v.csv", b"\xff\xfe,\n"), "--format", "skypilot"], {}),
    ("import-directory", lambda t: ["pricing", "import", str(t), "--format", "skypilot"], {}),
    (
        "import-not-utf8-late",
        lambda t: ["pricing", "import", write(t, "v.csv", VMS + b"g5.xlarge,A10G,\xff\n"), *AS],
        {},
    ),
    ("import-long-line", lambda t: ["pricing", "import", write(t, "v.csv", VMS + b"x" * (2 << 20)), *AS], {}),
    ("import-huge-field", lambda t: ["pricing", "import", write(t, "v.csv", VMS + b'a,"' + b"x" * 300_000), *AS], {}),
    ("import-nothing-valid", lambda t: ["pricing", "import", write(t, "v.csv", VMS.replace(b"1.006", b"0")), *AS], {}),
    ("export-to-directory", lambda t: ["pricing", "export", "--format", "gpuprov", "--out", str(t)], {}),
    ("export-bad-format", lambda t: ["pricing", "export", "--format", "xml", "--out", str(t / "x")], {}),
    # -- price history and backtest
    (
        "history-year-9999",
        lambda t: [
            "pricing",
            "history",
            "import",
            write(t, "h.csv", HIST.replace(WHEN, "9999-12-31T23:59:59-05:00")),
            "--format",
            "anycloud",
        ],
        {},
    ),
    (
        "history-daily-year-9999",
        lambda t: [
            "pricing",
            "history",
            "import",
            write(t, "d.csv", DAILY.replace("2026-04-02", "9999-12-31")),
            *DAILY_ARGS,
        ],
        {},
    ),
    (
        "history-price-tiny",
        lambda t: [
            "pricing",
            "history",
            "import",
            write(t, "h.csv", HIST.replace("0.35", "1e-999999999")),
            "--format",
            "anycloud",
        ],
        {},
    ),
    (
        "history-daily-price-tiny",
        lambda t: [
            "pricing",
            "history",
            "import",
            write(t, "d.csv", DAILY.replace("55.04", "1e-9999999")),
            *DAILY_ARGS,
        ],
        {},
    ),
    (
        "history-year-1969",
        lambda t: [
            "pricing",
            "history",
            "import",
            write(t, "h.csv", HIST.replace(WHEN, "1969-07-20T20:17:00+00:00")),
            "--format",
            "anycloud",
        ],
        {},
    ),
    (
        "history-region-dotdot",
        lambda t: ["pricing", "history", "import", write(t, "d.csv", DAILY), *DAILY_ARGS[:-1], "../x"],
        {},
    ),
    ("history-remove-unknown", lambda t: ["pricing", "history", "remove", "--source", "anycloud:nope.csv"], {}),
    (
        "backtest-year-9999",
        lambda t: ["backtest", "--gpus", "8", "--type", "a100", "--from", "9999-01-01", "--to", "9999-12-31"],
        {},
    ),
    # -- rebalance
    ("emit-image-newline", lambda t: ["rebalance", "--emit", "cronjob", "--image", "img\nnamespace: kube-system"], {}),
    ("emit-plan-injection", lambda t: ["rebalance", "--emit", "systemd", "--plan", "x\nExecStartPre=/bin/sh"], {}),
    ("emit-unknown", lambda t: ["rebalance", "--emit", "bogus"], {}),
    ("every-zero", lambda t: ["rebalance", "--every", "0s"], {}),
    ("every-huge", lambda t: ["rebalance", "--emit", "systemd", "--every", "99999999999h"], {}),
    ("rebalance-owner-glob", lambda t: ["rebalance", "--once", "--owner", "prod-*"], {}),
    ("disruption-share-2", lambda t: ["rebalance", "--once", "--disruption-share", "2"], {}),
    ("history-limit-negative", lambda t: ["rebalance", "history", "--limit", "-5"], {}),
    ("history-limit-huge", lambda t: ["rebalance", "history", "--limit", "1000000000000"], {}),
    # -- the database
    (
        "database-url-secret",
        lambda t: ["plan", "--gpus", "8", "--type", "a100"],
        {"GPUPROV_DATABASE_URL": f"postgresql+psycopg://u:{SECRET}@127.0.0.1:1/db"},
    ),
    ("database-url-bogus", lambda t: ["plan", "--gpus", "8", "--type", "a100"], {"GPUPROV_DATABASE_URL": "bogus://x"}),
    # -- round three: numbers bounded where they are parsed
    ("min-saving-1e309", lambda t: ["rebalance", "--once", "--min-saving", "1e309"], {}),
    ("min-saving-nan", lambda t: ["rebalance", "--once", "--min-saving", "nan"], {}),
    ("refresh-timeout-inf", lambda t: ["pricing", "refresh", "--timeout", "inf"], {}),
    ("refresh-timeout-nan", lambda t: ["pricing", "refresh", "--timeout", "nan"], {}),
    ("spot-advisor-timeout-inf", lambda t: ["pricing", "spot-advisor", "refresh", "--timeout", "inf"], {}),
    ("status-deadline-zero", lambda t: ["status", "--deadline", "0"], {}),
    ("destroy-deadline-inf", lambda t: ["destroy", "--yes", "--deadline", "inf"], {}),
    ("apply-deadline-nan", lambda t: ["apply", "abc", "--deadline", "nan"], {}),
    ("rebalance-deadline-word", lambda t: ["rebalance", "--once", "--deadline", "soon"], {}),
    ("backtest-seed-negative", lambda t: ["backtest", "--gpus", "8", "--type", "a100", "--seed", "-1"], {}),
    ("budget-1e-999999999", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--budget", "1e-999999999"], {}),
    ("env-fake-latency-inf", lambda t: ["status"], {"GPUPROV_FAKE_CLOUD": "{fake}", "GPUPROV_FAKE_LATENCY": "inf"}),
    (
        "demand-over-the-cap",
        lambda t: [
            "plan",
            "--policy",
            write(t, "p.yaml", TWO_WORKLOADS),
            "--demand",
            write(t, "d.csv", "hour,training,inference\n0,1000000,1000000\n"),
        ],
        {},
    ),
    # -- meaningless input: every minute is not every 90 s; a plan that is not there
    ("emit-cronjob-every-90s", lambda t: ["rebalance", "--emit", "cronjob", "--every", "90s", "--image", "g:1"], PG),
    ("emit-systemd-unknown-plan", lambda t: ["rebalance", "--emit", "systemd", "--plan", "abcdef123456"], {}),
    ("commitments-discover-nothing-configured", lambda t: ["commitments", "discover"], {"HOME": "{dir}"}),
    ("status-nothing-configured", lambda t: ["status"], {"HOME": "{dir}"}),
    ("destroy-nothing-configured", lambda t: ["destroy", "--yes"], {"HOME": "{dir}"}),
    # -- output paths: /, system directories, links, paths too long
    ("terraform-out-root", lambda t: ["terraform", "x", "--out", "/"], {}),
    ("terraform-out-etc", lambda t: ["terraform", "x", "--out", "/etc"], {}),
    ("terraform-out-symlink", lambda t: ["terraform", "x", "--out", _link(t)], {}),
    ("terraform-out-5000", lambda t: ["terraform", "x", "--out", str(t / ("a" * 5000))], {}),
    ("k8s-out-etc", lambda t: ["k8s", "x", "--out", "/etc"], {}),
    ("k8s-out-5000", lambda t: ["k8s", "x", "--out", str(t / ("a" * 5000))], {}),
    ("k8s-check-5000", lambda t: ["k8s", "--check", str(t / ("a" * 5000))], {}),
    ("terraform-check-5000", lambda t: ["terraform", "--check", str(t / ("a" * 5000))], {}),
    ("export-out-etc", lambda t: ["pricing", "export", "--out", "/etc/gpuprov-prices.csv"], {}),
    ("export-out-5000", lambda t: ["pricing", "export", "--out", str(t / ("a" * 5000))], {}),
    ("emit-out-etc", lambda t: ["rebalance", "--emit", "systemd", "--out", "/etc"], {}),
    ("emit-out-symlink", lambda t: ["rebalance", "--emit", "systemd", "--out", _link(t)], {}),
    ("chart-5000", lambda t: ["plan", "--gpus", "8", "--type", "a100", "--chart", str(t / ("a" * 5000)) + ".png"], {}),
    # -- documents too deep for a recursive parser, times out of the calendar, a broken kubeconfig
    ("k8s-check-deep-yaml", lambda t: ["k8s", "--check", _deep_dir(t, "x.yaml", DEEP_YAML)], {}),
    ("k8s-check-deep-block", lambda t: ["k8s", "--check", _deep_dir(t, "x.yaml", DEEP_BLOCK)], {}),
    ("terraform-check-deep-json", lambda t: ["terraform", "--check", _deep_dir(t, "main.tf.json", DEEP_JSON)], {}),
    ("k8s-at-year-0", lambda t: ["k8s", "x", "--out", str(t / "o"), "--at", "0001-01-01T00:00:00+14:00"], {}),
    ("k8s-at-year-9999", lambda t: ["k8s", "x", "--out", str(t / "o"), "--at", "9999-12-31T23:59:59-14:00"], {}),
    (
        "apply-window-bad-kubeconfig",
        lambda t: [
            "k8s",
            "apply-window",
            _plan_json(t),
            "--window",
            "night",
            "--kubeconfig",
            write(t, "kubeconfig", f"apiVersion: v1\nclusters: [{{name: {SECRET}, cluster: {{server: [\n"),
        ],
        {},
    ),
    # -- errors never quote a file: a planted secret on the first line of each kind of file
    ("history-import-passwd", lambda t: ["pricing", "history", "import", write(t, "h.csv", PASSWD), *ANY], {}),
    ("commitments-import-passwd", lambda t: ["commitments", "import", write(t, "x.csv", PASSWD)], {}),
    ("commitments-import-bad-kind", lambda t: ["commitments", "import", write(t, "c.yaml", BAD_KIND)], {}),
    (
        "demand-passwd",
        lambda t: ["plan", "--policy", "day-night", "--demand", write(t, "d.csv", "hour," + PASSWD)],
        {},
    ),
    ("policy-check-passwd", lambda t: ["policy", "check", write(t, "passwd", PASSWD)], {}),
    ("policy-check-secret-key", lambda t: ["policy", "check", write(t, "p.yaml", f'"{SECRET} x": 1\n')], {}),
    ("import-passwd", lambda t: ["pricing", "import", write(t, "v.csv", PASSWD), *AS], {}),
]

ANY = ("--format", "anycloud")
PASSWD = f"root:{SECRET}:0:0:root:/root:/bin/bash\n"
BAD_KIND = f"commitments:\n  - {{id: x, cloud: aws, kind: {SECRET}, count: 1, term: 1y, starts: 2026-01-01}}\n"
TWO_WORKLOADS = (
    "workloads: {training: {max_spot_fraction: 0.5}, inference: {max_spot_fraction: 0.5}}\n"
    "schedule: {default: {training: 50%, inference: 50%}}\ngpu: a100\ngpus: 8\n"
)
DEEP_YAML = "a: " + "[" * 200 + "]" * 200 + "\n"
DEEP_BLOCK = "".join(" " * i + f"k{i}:\n" for i in range(600)) + " " * 600 + "v: 1\n"
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def _link(tmp: Path) -> str:
    (tmp / "real").mkdir(exist_ok=True)
    link = tmp / "link"
    if not link.exists():
        link.symlink_to(tmp / "real")
    return str(link)


def _deep_dir(tmp: Path, name: str, text: str) -> str:
    folder = tmp / "deep"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return str(folder)


def _plan_json(tmp: Path) -> str:
    """A day-night plan document (printed, not saved: nothing may be stored by a case)."""
    r = subprocess.run(
        [str(BIN), "plan", "--policy", "day-night", "--gpus", "8", "--type", "a100", "-o", "json"],
        env={**os.environ, "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / 'scratch.db'}", "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return write(tmp, "plan.json", r.stdout)


CONFIGS = {
    "not_utf8": b"owner: \xff\n",
    "bomb": ALIAS_BOMB.encode(),
    "owner_glob": b"owner: 'prod-*'\n",
    "owner_int": b"owner: 123\n",
    "limits_huge": b"limits: {max_launch_per_run: 1e20}\n",
    "budget_inf": b"limits: {budget_per_hour: .inf}\n",
    "regions_string": b"aws: {regions: us-east-1}\n",
    "discount": b"discounts: {aws: 5}\n",
    # bootstrap files are read relative to the config file; some cases point at the config itself
    "bootstrap_missing": b"bootstrap: {aws: nope.sh}\n",
    "bootstrap_huge": b"bootstrap: {aws: bootstrap_huge.yaml}\n" + b"#" * 17000 + b"\n",
    "bootstrap_kubelet_yaml": b"bootstrap: {gcp: bootstrap_kubelet_yaml.yaml, kubelet: true}\n",
    "bootstrap_kubelet_str": b"bootstrap: {aws: bootstrap_kubelet_str.yaml, kubelet: 'yes'}\n",
    "bootstrap_oci": b"bootstrap: {oci: x.sh}\n",
}


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 60
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("name", "argv", "env"), CASES, ids=[c[0] for c in CASES])
def test_hostile_input_gets_one_line_and_a_non_zero_exit(
    name: str, argv: Callable[[Path], list[str]], env: dict[str, str], tmp_path: Path, _isolated_db: str
) -> None:
    extra = dict(env)
    for key, value in env.items():
        if value.startswith("{") and value.endswith("}"):
            label = value[1:-1]
            if label == "dir":
                extra[key] = str(tmp_path)
            elif label == "fake":
                extra[key] = str(tmp_path / "fake")
            else:
                extra[key] = write(tmp_path, f"{label}.yaml", CONFIGS[label])
    run_env = {**os.environ, "GPUPROV_CONFIG": str(tmp_path / "no-config.yaml"), "COLUMNS": "160", **extra}
    run_env.pop("GPUPROV_DEBUG", None)
    args = argv(tmp_path)
    start = time.monotonic()
    try:
        r = subprocess.run(
            [str(BIN), *args], env=run_env, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: no answer within 10 s")
    elapsed = time.monotonic() - start
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode not in (0, None), (name, r.stdout[-500:], r.stderr[-500:])
    assert "Traceback" not in r.stdout + r.stderr, (name, r.stderr[-2000:])
    assert len(errors) == 1, (name, r.stderr[-1000:])
    assert all(line.startswith(("error:", "hint:", "warning:")) for line in r.stderr.splitlines() if line), (
        name,
        r.stderr[-1000:],
    )
    assert SECRET not in r.stdout + r.stderr, name
    assert elapsed < 10
    db = Path(_isolated_db.removeprefix("sqlite:///"))
    if db.exists():
        con = sqlite3.connect(db)
        try:
            for table in ("gpuprov_plan", "gpuprov_journal", "gpuprov_instance", "gpuprov_price_change"):
                try:
                    assert con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, (name, table)
                except sqlite3.OperationalError:
                    pass  # the schema was never created: nothing stored
        finally:
            con.close()
