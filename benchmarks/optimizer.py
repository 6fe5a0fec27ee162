#!/usr/bin/env python3
"""Optimizer scaling on the bundled catalog.

    python benchmarks/optimizer.py [--quick]

Cases: offers of one GPU family (A100, both variants, all three clouds) and of every GPU
type in the catalog; 24 slots (the day-night preset) and 168 slots (weekday-weekend);
64, 1,024 and 10,000 GPUs at peak. Prints, per case, the offers before/after the exact
reductions, the wall time of ``solve`` (what ``gpuprov plan`` runs: CBC, one thread,
relative gap 0.5%, 60 s), the gap proven on the whole model, and whether the plan came from
the parts (decompose.py) or the whole model. Target: all types, 168 slots,
10,000 GPUs reaches <= 0.5% gap in <= 10 s on this 2-core machine.

    python benchmarks/optimizer.py --week [--week-sizes 1000,10000,100000] [--method auto|monolithic|decompose]

Weeks that never repeat (a seeded diurnal curve with noise, 168 hourly slots), each size in its
own process: distinct slots, wall time of ``solve`` (reductions, model builds and solves
interleave when solved by parts), the gap proven on the whole model, the peak memory of the
planner and of its CBC children, and how it was solved. Target: 10,000 GPUs within 0.5% in
<= 10 s and <= 500 MiB.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuprov.optimizer import solve as solver
from gpuprov.optimizer.reduce import prepare
from gpuprov.planning import policy_spec, request_from_spec
from policies import constraints, loader
from pricing.snapshot import load_bundled


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the largest case")
    parser.add_argument("--week", action="store_true", help="only the non-repeating weeks (issue: scale)")
    parser.add_argument("--week-sizes", default="1000,10000,100000")
    parser.add_argument("--gap", type=float, default=0.005)
    parser.add_argument("--time-limit", type=float, default=60.0, help="per plan, as gpuprov plan's default")
    parser.add_argument("--method", default="auto", choices=["auto", "monolithic", "decompose"])
    parser.add_argument("--week-one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.week_one:
        week_one(args.week_one, args.gap, args.time_limit, args.method)
        return
    offers = [o for s in load_bundled() for o in s.offers]
    families = {"A100 (all clouds)": [o for o in offers if o.gpu.startswith("A100")], "all types": offers}
    presets = {24: "day-night", 168: "weekday-weekend"}
    sizes = (64, 1024, 10_000)
    cases = [(f, h, n) for f in families for h in presets for n in sizes]
    if args.quick:
        cases = [("all types", 168, 10_000)]
    if args.week:
        weeks(args.gap, [int(n) for n in args.week_sizes.split(",")], args.time_limit, args.method)
        return
    print(f"{'offers':<18} {'slots':>5} {'GPUs':>6} {'offers in/kept':>15} {'wall s':>8} {'gap':>7}  status, how")
    for family, hours, gpus in cases:
        pol = constraints.apply(loader.load(presets[hours]), constraints.Overrides(gpus=gpus, gpu="any"))
        names = sorted({o.gpu for o in families[family]})
        request = request_from_spec(policy_spec(pol, names, "cbc", args.gap, 60.0), families[family])
        request = replace(request, method=args.method)
        kept = len(prepare(request).offers)
        t0 = time.perf_counter()
        plan = solver.solve(request)
        seconds = time.perf_counter() - t0
        objective, lower = plan.objective_usd or Decimal(0), plan.lower_bound_usd or Decimal(0)
        gap = (objective - lower) / objective if objective else Decimal(0)
        how = "by parts" if any(n.startswith("solved by parts") for n in plan.notes) else "whole"
        print(
            f"{family:<18} {hours:>5} {gpus:>6} {len(request.offers):>7}/{kept:<7} "
            f"{seconds:>8.2f} {float(gap):>7.3%}  {plan.status} {how}",
            flush=True,
        )


def diurnal(peak: int, seed: int = 7) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A week of hourly demand that repeats nothing: a diurnal curve with weekday/weekend levels
    and seeded noise; training takes what inference leaves, in 8-GPU nodes."""
    import math
    import random

    rng = random.Random(seed)
    train, infer = [], []
    for t in range(168):
        day, hour = divmod(t, 24)
        level = 0.55 + 0.35 * math.sin((hour - 8) / 24 * 2 * math.pi) + (0.0 if day < 5 else -0.15)
        total = max(8, min(peak, round(peak * (level + rng.uniform(-0.08, 0.08)))))
        i = max(1, round(total * (0.25 + 0.2 * math.sin((hour - 14) / 24 * 2 * math.pi) + rng.uniform(-0.03, 0.03))))
        infer.append(min(i, total - 8))
        train.append(((total - infer[-1]) // 8) * 8)
    return tuple(train), tuple(infer)


def week_request(peak: int, offers: list, gap: float, time_limit: float, method: str = "auto"):  # type: ignore[no-untyped-def,type-arg]
    """The issue's case: A100 family (all clouds, 1- and 3-year reservations), a training gang in
    8-GPU nodes and inference spread over 2 zones, 168 hourly slots that (nearly) never repeat."""
    from gpuprov.models import Workload
    from gpuprov.optimizer.problem import PlanRequest

    train, infer = diurnal(peak)
    return PlanRequest(
        gpu="A100",
        demand={"training": train, "inference": infer},
        offers=[o for o in offers if o.gpu.startswith("A100")],
        gap=gap,
        time_limit_s=time_limit,
        method=method,
        workloads=(
            Workload("training", Decimal("0.5"), 8, gang=True, lost_hours_per_interruption=Decimal(1)),
            Workload("inference", Decimal("0.3"), spread_zones=2, lost_hours_per_interruption=Decimal("0.05")),
        ),
    )


def week_one(peak: int, gap: float, time_limit: float, method: str) -> None:
    """One size, in its own process (so that its peak memory is its own): one line of figures."""
    import resource

    from gpuprov.optimizer.problem import profiles

    offers = [o for s in load_bundled() for o in s.offers]
    request = week_request(peak, offers, gap, time_limit, method)
    t0 = time.perf_counter()
    plan = solver.solve(request)
    seconds = time.perf_counter() - t0
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cbc = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    objective, lower = plan.objective_usd or Decimal(0), plan.lower_bound_usd or Decimal(0)
    g = (objective - lower) / objective if objective else Decimal(0)
    parts = next((n for n in plan.notes if n.startswith("solved by parts")), "the whole model at once")
    print(
        f"{peak:>7} {len(profiles(request)):>8} {seconds:>8.2f} {float(g):>7.3%} {own:>8.0f} {cbc:>8.0f}  "
        f"{plan.status:<8} ${objective:,.2f} (bound ${lower:,.2f}); {parts}",
        flush=True,
    )


def weeks(gap: float, sizes: list[int], time_limit: float, method: str) -> None:
    import subprocess

    print(f"{'GPUs':>7} {'distinct':>8} {'wall s':>8} {'gap':>7} {'MiB':>8} {'CBC MiB':>8}  status, cost, how")
    for peak in sizes:
        subprocess.run(
            [
                *(sys.executable, __file__, "--week-one", str(peak), "--gap", str(gap)),
                *("--time-limit", str(time_limit), "--method", method),
            ],
            check=True,
        )


if __name__ == "__main__":
    main()
