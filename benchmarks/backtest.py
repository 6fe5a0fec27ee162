#!/usr/bin/env python3
"""Backtests on the real price histories (tests/fixtures/history/), timed.

    python benchmarks/backtest.py [--days 40] [--seed 1] [--repeat] [--skip-p5]

1. Forty days (2026-04-02 16:00 UTC + ``--days``, the span of the stored history) of hourly
   rebalancing passes on a 64-GPU day-night A100 plan on GCP and Azure (on demand and spot), on the bundled
   catalog moved by the anycloud history; spot interrupted at the pools' rates (seeded). ``--repeat`` runs it twice
   and compares (the same seed must give the same result).
2. The AWS p5.48xlarge daily history around the June 2025 cut: a 32-GPU H100 gang (8-GPU
   nodes, on demand) on AWS us-east-1 and GCP us-east4, 2025-05-29 to 2025-06-12.

Prints wall and CPU seconds and the figures of each run. A throw-away database; nothing else is
touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HISTORY = ROOT / "tests" / "fixtures" / "history"


def load(names: list[str], clouds: list[str], markets: list[str], regions: list[str], **policy: object) -> tuple:
    from gpuprov import planning
    from gpuprov.commands import common
    from gpuprov.commands.common import from_tuples
    from gpuprov.store.history import HistoryStore
    from policies import constraints, loader
    from pricing.gpus import resolve

    pol = constraints.apply(
        loader.load(str(policy["policy"])),
        constraints.Overrides(
            gpu=str(policy["gpu"]),
            gpus=int(policy["gpus"]),  # type: ignore[call-overload]
            clouds=tuple(clouds),
            markets=tuple(markets),
            regions=tuple(regions) or None,
        ),
    )
    gpu_names = resolve(pol.gpu or "")
    spec = planning.policy_spec(pol, gpu_names, "cbc", 0.001, 60.0)
    catalog, snaps = common.open_catalog()
    base = common.read_offers(catalog, gpu_names)
    changes = from_tuples(HistoryStore().changes(clouds))
    return spec, planning.policy_context(pol), pol.gpus, base, {s.cloud: s.fetched_at for s in snaps}, changes


def show(label: str, r: object, wall: float, cpu: float) -> None:
    from gpuprov.backtest import Result

    assert isinstance(r, Result)
    adjusted = r.realized_usd + r.shortfall_usd
    vs_static = r.realized_usd / r.static_usd - 1
    print(f"\n== {label}")
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s; {r.passes} passes, {len(r.steps)} hourly steps")
    print(
        f"realized ${r.realized_usd:,.2f}  static ${r.static_usd:,.2f}  hindsight ${r.hindsight_usd:,.2f}  "
        f"(realized vs static {vs_static:+.2%})"
    )
    print(
        f"short {r.unmet_gpu_hours} GPU-hours, valued ${r.shortfall_usd:,.2f}; realized + shortfall ${adjusted:,.2f} "
        f"({adjusted / r.static_usd - 1:+.2%} vs static)"
    )
    print(
        f"migrations {r.migrations}, interruptions {r.interruptions}, replaced instances {r.replaced_instances}; "
        f"{r.catalogs} catalogs from {r.changes_applied} changes; {r.solves} solves, {r.solves_reused} reused"
    )
    print(
        f"realized >= hindsight: {r.realized_usd >= r.hindsight_usd}; "
        f"realized + shortfall >= hindsight: {adjusted >= r.hindsight_usd}; "
        f"realized within 1% of static or below: {r.realized_usd <= r.static_usd * 101 / 100}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", action="store_true", help="run the seven weeks twice and compare")
    ap.add_argument("--skip-p5", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gpuprov-bench-")
    os.environ["GPUPROV_DATABASE_URL"] = f"sqlite:///{tmp}/gpuprov.db"
    from gpuprov import backtest as bt
    from gpuprov.commands import history as cmd
    from gpuprov.models import Cloud
    from gpuprov.store.history import HistoryStore
    from pricing import history

    any_file = HISTORY / "anycloud-gcp-azure-gpu-price-history.csv"
    parsed = history.read_anycloud(any_file.read_bytes(), any_file.name)
    HistoryStore().add(cmd.to_tuples(parsed.changes), "anycloud")
    p5_file = HISTORY / "aws-p5-48xlarge-us-east-1-daily-price.csv"
    p5 = history.read_daily_price(p5_file.read_bytes(), p5_file.name, Cloud.AWS, "us-east-1", "p5.48xlarge")
    HistoryStore().add(cmd.to_tuples(p5.changes), "daily-price")
    print(f"history: {len(parsed.changes)} anycloud changes, {len(p5.changes)} p5 changes ({p5.skipped})")

    spec, ctx, gpus, base, as_of, changes = load(
        [], ["gcp", "azure"], ["on_demand", "spot"], [], policy="day-night", gpu="a100", gpus=64
    )
    start = datetime(2026, 4, 2, 16, tzinfo=UTC)
    cfg = bt.Config(spec, ctx, gpus, start, start + timedelta(days=args.days), seed=args.seed)
    runs = []
    for _ in range(2 if args.repeat else 1):
        w0, c0 = time.perf_counter(), time.process_time()
        r = bt.run(cfg, base, as_of, changes)
        runs.append(r)
        show(f"GCP/Azure {args.days} days, day-night 64 × A100, seed {args.seed}", r, *_since(w0, c0))
    if args.repeat:
        a, b = runs
        same = [(s.at, s.fleet, s.interrupted) for s in a.steps] == [(s.at, s.fleet, s.interrupted) for s in b.steps]
        print(f"same seed, same result: {same and a.realized_usd == b.realized_usd}")
    if args.skip_p5:
        return
    spec, ctx, gpus, base, as_of, changes = load(
        [], ["aws", "gcp"], ["on_demand"], ["us-east-1", "us-east4"], policy="constant", gpu="h100", gpus=32
    )
    cfg = bt.Config(
        spec, ctx, gpus, datetime(2025, 5, 29, tzinfo=UTC), datetime(2025, 6, 12, tzinfo=UTC), seed=args.seed
    )
    w0, c0 = time.perf_counter(), time.process_time()
    r = bt.run(cfg, base, as_of, changes)
    show("AWS p5 cut (2025-06-05), constant 32 × H100 gang, AWS us-east-1 + GCP us-east4", r, *_since(w0, c0))
    first = r.steps[0].fleet
    last = r.steps[-1].fleet
    print(f"first hour runs {sorted(set(first))}\nlast hour runs {sorted(set(last))}")
    print(f"saving against the day-one plan: ${r.static_usd - r.realized_usd:,.2f}")


def _since(w0: float, c0: float) -> tuple[float, float]:
    return time.perf_counter() - w0, time.process_time() - c0


if __name__ == "__main__":
    main()
