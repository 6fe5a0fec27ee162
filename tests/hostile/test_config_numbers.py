"""A config with ``1e-999999999`` or ``1e999999999`` in any number field: one line, exit 2, and a
small process (before the one bounded parser, a Savings Plans share of 1e-999999999 made every
``plan`` take 3 GB and print 1 GB of JSON). The peak memory of each run is read from the kernel
(``wait4``); the wall time is measured by ``benchmarks/hostile_numbers.py``, not asserted here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "gpuprov"
FIELDS = {
    "limits.max_launch_per_run": "limits: {{max_launch_per_run: {v}}}",
    "limits.max_price_age_hours": "limits: {{max_price_age_hours: {v}}}",
    "limits.unavailable_ttl_minutes": "limits: {{unavailable_ttl_minutes: {v}}}",
    "limits.budget_per_hour": "limits: {{budget_per_hour: {v}}}",
    "discounts": 'discounts: {{aws: {v}, "aws:p4d": 0.9}}',
    "savings_plans": 'savings_plans: {{compute_1y: {{"*": {v}}}}}',
    "network.connect_timeout": "network: {{connect_timeout: {v}}}",
    "network.read_timeout": "network: {{read_timeout: {v}}}",
    "network.connect_retries": "network: {{connect_retries: {v}}}",
}
VALUES = ("1e-999999999", "1e999999999", "1.0e-999999999", "-1.5e999999999", "'1e-999999999'", ".nan")
MAX_RSS_MIB = 100


def _env(tmp: Path, config: str) -> dict[str, str]:
    (tmp / "config.yaml").write_text(config + "\n")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")},
        "GPUPROV_CONFIG": str(tmp / "config.yaml"),
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite'}",
    }


PLAN = [str(BIN), "plan", "--gpus", "8", "--type", "a100", "-o", "json"]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_an_absurd_number_in_any_config_field_is_one_line_exit_2(tmp_path: Path, field: str, value: str) -> None:
    r = subprocess.run(
        PLAN, env=_env(tmp_path, FIELDS[field].format(v=value)), capture_output=True, text=True, timeout=120
    )
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2, (field, value, r.stderr[-500:], len(r.stdout))
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert field.split(".")[-1] in errors[0], errors[0]
    assert r.stdout == ""


# Linux keeps a process's peak RSS across fork and exec, so a child forked from this (large)
# pytest process would report pytest's own size: a small launcher starts the command instead.
LAUNCHER = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "_pid, status, usage = os.wait4(p.pid, 0)\n"
    "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n"
)


def test_the_process_stays_small(tmp_path: Path) -> None:
    """Peak memory of a refused run, per wait4 of that very child (not the children's maximum)."""
    env = _env(tmp_path, FIELDS["savings_plans"].format(v="1e-999999999"))
    r = subprocess.run([sys.executable, "-c", LAUNCHER, *PLAN], env=env, capture_output=True, text=True, timeout=120)
    code, max_rss_kib = (int(x) for x in r.stdout.split())
    assert code == 2
    assert max_rss_kib / 1024 < MAX_RSS_MIB, max_rss_kib
