#!/usr/bin/env python3
"""How long each cloud command takes to give up when the network fails, with the defaults.

    python benchmarks/network_faults.py [--faults refused,hung,garbage] [--commands status,destroy,...]

Every command that talks to a cloud (``status``, ``destroy --yes``, ``apply --yes``, ``rebalance
--once --yes``, ``commitments discover``, ``pricing refresh``, ``pricing spot-advisor refresh``)
runs as a user runs it, with all three clouds configured and every HTTP(S) request sent through a
loopback proxy that is refused, hung (accepts, never answers) or answers garbage
(``tests/hostile/faults.py``): the default network policy (connect 5 s, read 20 s, 2 connection
retries) and each command's default ``--deadline`` (``gpuprov/commands/common.py`` DEADLINES).
Prints, per case, the wall time from the process's start to its exit, the exit code and the
``error:`` line. Target: every case ends with exit 4 and one line within 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.hostile.faults import endpoint  # noqa: E402

BIN = Path(sys.executable).parent / "gpuprov"
COMMANDS = {
    "status": ["status"],
    "destroy": ["destroy", "--yes"],
    "apply": ["apply", "{plan}", "--yes", "--allow-stale", "--buy-later"],
    "rebalance": ["rebalance", "--once", "--yes", "--plan", "{plan}"],
    "commitments-discover": ["commitments", "discover"],
    "pricing-refresh": ["pricing", "refresh"],
    "spot-advisor-refresh": ["pricing", "spot-advisor", "refresh"],
}
CONFIG = """\
owner: netbench
aws: {regions: [us-east-1]}
gcp: {project: gpuprov-bench, zones: [us-central1-a]}
azure: {subscription_id: 00000000-0000-0000-0000-000000000000, resource_group: gpuprov-rg, regions: [eastus]}
"""


def environment(tmp: Path) -> dict[str, str]:
    (tmp / "config.yaml").write_text(CONFIG)
    (tmp / "gcp.json").write_text(
        json.dumps({"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"})
    )
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUPROV_", "AZURE_", "GOOGLE_"))},
        "GPUPROV_CONFIG": str(tmp / "config.yaml"),
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite'}",
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "GOOGLE_APPLICATION_CREDENTIALS": str(tmp / "gcp.json"),
        "AZURE_CLIENT_ID": "00000000-0000-0000-0000-000000000001",
        "AZURE_TENANT_ID": "00000000-0000-0000-0000-000000000002",
        "AZURE_CLIENT_SECRET": "bench",
        "COLUMNS": "160",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default="refused,hung,garbage")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        env = environment(tmp)
        made = subprocess.run(
            [str(BIN), "plan", "--gpus", "24", "--type", "a100", "--node-gpus", "8", "--save", "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        plan = json.loads(made.stdout)["plan_id"]
        worst = 0.0
        print(f"{'command':<22} {'fault':<8} {'seconds':>8} {'exit':>4}  error")
        for fault in args.faults.split(","):
            with endpoint(fault) as url:
                proxied = {**env, "HTTPS_PROXY": url, "HTTP_PROXY": url, "https_proxy": url, "http_proxy": url}
                proxied["NO_PROXY"] = ""
                for name in args.commands.split(","):
                    argv = [a.format(plan=plan) for a in COMMANDS[name]]
                    start = time.monotonic()
                    r = subprocess.run([str(BIN), *argv], env=proxied, capture_output=True, text=True, timeout=600)
                    seconds = time.monotonic() - start
                    worst = max(worst, seconds)
                    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
                    first = errors[0][:110] if errors else "(none)"
                    lines = "" if len(errors) == 1 else f"  [{len(errors)} error lines]"
                    print(f"{name:<22} {fault:<8} {seconds:8.1f} {r.returncode:>4}  {first}{lines}", flush=True)
        print(f"slowest: {worst:.1f} s (target: every case within 30 s, exit 4, one line)")


if __name__ == "__main__":
    main()
