#!/usr/bin/env python3
"""``gpuprov plan --policy P`` for demand in tokens a second, on the bundled catalog.

    python benchmarks/work_plan.py

P: Llama-3.1-70B at fp8 or bf16, 128 tokens in and 2,048 out, 20,000 tokens/s from 08:00 to
20:00 and 5,000 at night, spot at most 30% of the work, spread over 2 zones, every market, over
H100, A100-80GB, L40S and L4. Cases: the bundled table (L4 has no row: left out); with a user's
L4 figure (150 tokens/s per GPU at TP 8, a made-up figure standing for a benchmark file) under
CBC and under HiGHS. Each run is a fresh process (wall time includes start-up, the mixed solve
and one solve per type); prints status, gap, cost over the 24 h horizon and the best single type.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLICY = """
name: serve-70b
gpu: [h100, a100-80gb, l40s, l4]
workloads:
  inference:
    model: llama-3.1-70b
    precision: [fp8, bf16]
    input_tokens: 128
    output_tokens: 2048
    max_spot_fraction: 0.3
    spread_zones: 2
schedule:
  windows:
    - {name: day, start: "08:00", end: "20:00", demand: {inference: {tokens_per_s: 20000}}}
    - {name: night, start: "20:00", end: "08:00", demand: {inference: {tokens_per_s: 5000}}}
"""
BENCH = "gpu,model,precision,tensor_parallel,input_tokens,output_tokens,tokens_per_s_per_gpu\n"
BENCH += "L4,llama-3.1-70b,fp8,8,128,2048,150\n"


def main() -> None:
    gpuprov = shutil.which("gpuprov") or str(Path(sys.executable).with_name("gpuprov"))
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GPUPROV_DATABASE_URL": f"sqlite:///{tmp}/bench.db"}
        policy, bench = Path(tmp) / "serve.yaml", Path(tmp) / "l4.csv"
        policy.write_text(POLICY)
        bench.write_text(BENCH)
        base = [gpuprov, "plan", "--policy", str(policy), "--output", "json"]
        subprocess.run(base, env=env, check=True, capture_output=True)  # first use loads the catalog
        for name, extra in (
            ("bundled table (L4 left out)", []),
            ("+ a user's L4 figure, CBC", ["--throughput", str(bench)]),
            ("+ a user's L4 figure, HiGHS", ["--throughput", str(bench), "--solver", "highs"]),
        ):
            start = time.perf_counter()
            run = subprocess.run([*base, *extra], env=env, check=True, capture_output=True, text=True)
            wall = time.perf_counter() - start
            doc = json.loads(run.stdout)
            work = doc["work"]
            used = sorted(t["gpu"] for t in work["types"] if t["status"] == "used")
            print(
                f"{name}: {wall:.1f} s, {doc['solve']['status']}, gap {float(doc['costs']['gap']):.3%}, "
                f"${float(doc['costs']['horizon_usd']):,.2f} over 24 h on {'+'.join(used)}; best single type "
                f"{work['best_single_type']} ${work['best_single_type_horizon_usd']}"
            )


if __name__ == "__main__":
    main()
