#!/usr/bin/env python3
"""Wall time and peak memory of ``gpuprov plan`` refusing an absurd number in each config field.

    python benchmarks/hostile_numbers.py

For every number field of the config file (tests/hostile/test_config_numbers.py FIELDS) and the
values ``1e-999999999`` and ``1e999999999``, runs ``gpuprov plan --gpus 8 --type a100`` in a child
process with that config and prints its exit code, wall time and peak RSS (``wait4``). Target:
exit 2 (one line), under 1 s and 100 MiB each. Before the bounded parser, a Savings Plans share of
1e-999999999 took 48.8 s and 2.9 GiB and printed about 1 GB of JSON.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.hostile.test_config_numbers import FIELDS  # noqa: E402

BIN = Path(sys.executable).parent / "gpuprov"


def main() -> None:
    worst_s, worst_mib = 0.0, 0.0
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")},
            "GPUPROV_CONFIG": str(tmp / "config.yaml"),
            "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite'}",
        }
        # the catalog is loaded on first use: do that once, so each case is a refusal and nothing else
        subprocess.run([str(BIN), "prices", "--type", "a100", "--limit", "1"], env=env, capture_output=True, check=True)
        print(f"{'field':<32} {'value':<14} {'exit':>4} {'seconds':>8} {'MiB':>6}")
        for field, template in sorted(FIELDS.items()):
            for value in ("1e-999999999", "1e999999999"):
                (tmp / "config.yaml").write_text(template.format(v=value) + "\n")
                start = time.monotonic()
                proc = subprocess.Popen(
                    [str(BIN), "plan", "--gpus", "8", "--type", "a100", "-o", "json"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                _pid, status, usage = os.wait4(proc.pid, 0)
                seconds = time.monotonic() - start
                mib = usage.ru_maxrss / 1024
                worst_s, worst_mib = max(worst_s, seconds), max(worst_mib, mib)
                print(f"{field:<32} {value:<14} {os.waitstatus_to_exitcode(status):>4} {seconds:8.2f} {mib:6.1f}")
    print(f"slowest {worst_s:.2f} s, largest {worst_mib:.1f} MiB (targets: < 1 s, < 100 MiB)")


if __name__ == "__main__":
    main()
