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
]

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
