"""plan --policy P where P asks for tokens a second over several GPU types, as a user runs it: a
day/night serving policy over H100, A100-80GB, L40S and L4 on the bundled catalog, checked
against single-type plans solved independently here; types without a figure are left out and say
so; a user's benchmark CSV brings one in; bad input is one line."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.commands import common
from gpuprov.errors import InfeasibleError
from gpuprov.models import ReplicaRate, Workload
from gpuprov.optimizer.problem import PlanRequest
from gpuprov.optimizer.solve import solve
from gpuprov.plandoc import PlanDocument, from_json, to_json
from gpuprov.planning import without_alternative
from pricing.quality import is_suspect

runner = CliRunner()

POLICY = """
name: serve-70b
timezone: UTC
horizon_hours: 24
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
# a user's own figure for L4 (the test's number, standing for a genai-perf run; not a measurement)
BENCH = """gpu,model,precision,tensor_parallel,input_tokens,output_tokens,tokens_per_s_per_gpu,source
L4,llama-3.1-70b,fp8,8,128,2048,150,my genai-perf run
"""


def plan(tmp_path: Path, *extra: str, policy: str = POLICY) -> PlanDocument:
    path = tmp_path / "serve.yaml"
    path.write_text(policy)
    r = runner.invoke(app, ["plan", "--policy", str(path), "--output", "json", *extra])
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = from_json(r.stdout)
    assert from_json(to_json(doc)) == doc
    return doc


def alone(doc: PlanDocument, gpu: str) -> Decimal | None:
    """The same work on one GPU type, solved here from the catalog's offers of that type and the
    document's rates for it (the rules of the policy: spot ceiling 30% of the work, two zones;
    quotes flagged suspect left out, as every plan does by default, and reserved offers whose type
    has no on-demand price in their region, which no plan takes)."""
    spec = doc.request.workloads[0]
    rates = tuple(ReplicaRate(r.gpu, r.tensor_parallel, r.work_per_s) for r in spec.replicas if r.gpu == gpu)
    catalog, _snaps = common.open_catalog()
    every = common.read_offers(catalog, [gpu])  # flagged as the catalog's reader flags them
    lone = set(without_alternative(every))
    offers = [o for o in every if o.gpu_fraction is None and not is_suspect(o) and o.key not in lone]
    w = Workload(
        name="inference",
        max_spot_fraction=Decimal("0.3"),
        spread_zones=2,
        lost_hours_per_interruption=spec.lost_hours_per_interruption,
        unit="tokens_per_s",
        replicas=rates,
    )
    request = PlanRequest(gpu=gpu, workloads=(w,), demand=dict(doc.request.demand), offers=offers, gap=0.001)
    try:
        p = solve(request)
    except InfeasibleError:
        return None
    return p.objective_usd


def test_day_night_tokens_over_four_types_beats_every_single_type(tmp_path: Path) -> None:
    doc = plan(tmp_path)
    assert doc.solve.status == "Optimal" and doc.costs.gap <= Decimal("0.001")
    assert doc.request.demand == {"inference": tuple([5000] * 8 + [20000] * 12 + [5000] * 4)}
    work = doc.work
    assert work is not None
    status = {t.gpu: t for t in work.types}
    assert set(status) == {"H100", "A100-80GB", "L40S", "L4"}
    assert status["L4"].status == "left out" and "no throughput row" in status["L4"].reason
    assert {s.gpu for s in work.single_type} == {"H100", "A100-80GB", "L40S"}
    for s in work.single_type:
        mine = alone(doc, s.gpu)
        assert mine is not None and s.objective_usd is not None
        assert s.objective_usd == pytest.approx(mine, rel=Decimal("0.002"))  # both within the 0.1% gap
        assert doc.costs.objective_usd <= mine * Decimal("1.001")  # never above a type alone
    best = min(work.single_type, key=lambda s: s.objective_usd or Decimal("Infinity"))
    assert work.best_single_type == best.gpu
    assert doc.costs.objective_usd <= (best.objective_usd or 0)
    assert work.saving_usd == (best.horizon_usd or 0) - doc.costs.horizon_usd.quantize(Decimal("0.01"))
    # the work is covered in every slot, spot at most 30% of it, at the document's own rates
    rates = {(r.gpu, r.tensor_parallel): r.work_per_s for r in doc.request.workloads[0].replicas}

    def per_instance(gpu: str, g: int) -> Decimal:
        return max((g // t * v for (m, t), v in rates.items() if m == gpu and t <= g), default=Decimal(0))

    for t, need in enumerate(doc.request.demand["inference"]):
        got = sum(per_instance(a.gpu, a.gpus_per_instance) * a.instances_by_slot[t] for a in doc.placements())
        spot = sum(per_instance(a.gpu, a.gpus_per_instance) * a.instances_by_slot[t] for a in doc.allocations if a.spot)
        assert got >= need and spot <= Decimal("0.3") * need
    # $ per million tokens of every type considered, with the row it rests on
    for t in work.types:
        if t.status != "left out":
            assert t.on_demand_usd_per_million is not None and t.source is not None and t.work_per_gpu
            price, rate = t.on_demand_usd_per_gpu_hour, t.work_per_gpu
            assert price is not None
            expected = price / (rate * 3600) * 1_000_000  # both shown rounded: compare to a 0.1%
            assert abs(t.on_demand_usd_per_million - expected) <= expected * Decimal("0.001")
        if t.status == "used":
            assert t.peak_gpus > 0
        if t.status == "not used":
            assert "per $" in t.reason or "dearer" in t.reason
    total_tokens = sum(doc.request.demand["inference"]) * 3600
    assert work.usd_per_million["inference"] == (doc.costs.horizon_usd / total_tokens * 1_000_000).quantize(
        Decimal("0.0001")
    )
    for b in doc.baselines:
        assert b.horizon_usd is None and b.reason and "work units" in b.reason


def test_a_users_benchmark_brings_a_type_in(tmp_path: Path) -> None:
    bench = tmp_path / "bench.csv"
    bench.write_text(BENCH)
    # on demand and spot only: with reservations and a 2-zone spread over four types CBC needs more
    # than its time limit to prove the optimum (README: "Demand in tokens a second")
    doc = plan(tmp_path, "--throughput", str(bench), "--markets", "on_demand", "--markets", "spot")
    assert doc.work is not None
    l4 = next(t for t in doc.work.types if t.gpu == "L4")
    assert l4.status != "left out" and l4.source == "user:my genai-perf run:2" and l4.work_per_gpu == Decimal(150)
    assert "L4" in {s.gpu for s in doc.work.single_type}
    assert any(r.gpu == "L4" for r in doc.request.workloads[0].replicas)


def test_the_table_for_people(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(POLICY)
    r = runner.invoke(app, ["plan", "--policy", str(path), "--type", "h100,l4", "--clouds", "aws"])
    assert r.exit_code == 0, r.stderr
    assert "GPU types considered" in r.stdout and "left out" in r.stdout and "best single type" in r.stdout


@pytest.mark.parametrize(
    ("args", "policy", "code", "message"),
    [
        (["--demand", "x.csv"], POLICY, 2, "this policy's demand is in work units"),
        (["--what-if-demand", "0.7"], POLICY, 2, "--what-if-demand is not available"),
        ([], POLICY.replace("[h100, a100-80gb, l40s, l4]", "[l4, t4]"), 3, "no GPU type considered can serve"),
        ([], POLICY.replace("  inference:\n", "  training: {}\n  inference:\n"), 2, "training counts GPUs"),
        (["--throughput", "missing.csv"], POLICY, 2, "cannot read"),
    ],
)
def test_bad_work_plans_are_one_line(tmp_path: Path, args: list[str], policy: str, code: int, message: str) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(policy)
    r = runner.invoke(
        app, ["plan", "--policy", str(path), *[str(tmp_path / a) if a.endswith(".csv") else a for a in args]]
    )
    assert r.exit_code == code, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and message in r.stderr.splitlines()[0]


def test_throughput_needs_a_work_policy(tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", "--gpus", "8", "--type", "h100", "--throughput", "b.csv"])
    assert r.exit_code == 2 and "--throughput goes with --policy" in r.stderr
    r = runner.invoke(app, ["plan", "--policy", "day-night", "--gpus", "8", "--type", "h100", "--throughput", "b.csv"])
    assert r.exit_code == 2 and "tokens_per_s" in r.stderr


def test_json_schema_has_the_work_report() -> None:
    r = runner.invoke(app, ["schema", "plan"])
    schema = json.loads(r.stdout)
    assert "WorkReport" in schema["$defs"] and "ReplicaSpec" in schema["$defs"]


TRAIN = """
name: finetune-13b
gpu: [h100, a100-80gb]
workloads:
  training: {model: llama-2-13b, precision: bf16, gang: true, max_spot_fraction: 0.5}
schedule:
  default: {training: {samples_per_s: 40}}
"""
# the test's own figures, standing for a user's training benchmark (not measurements)
TRAIN_BENCH = """gpu,model,precision,tensor_parallel,samples_per_s_per_gpu
H100,llama-2-13b,bf16,8,2.5
A100-80GB,llama-2-13b,bf16,8,1.1
"""


def test_a_training_gang_in_samples_per_second(tmp_path: Path) -> None:
    bench = tmp_path / "train.csv"
    bench.write_text(TRAIN_BENCH)
    doc = plan(tmp_path, "--throughput", str(bench), "--clouds", "aws", "--clouds", "gcp", policy=TRAIN)
    sites = {(a.location, a.gpu) for a in doc.placements()}
    assert len(sites) == 1  # one zone, one GPU model
    [(_where, gpu)] = sites
    replicas = sum(a.instances_by_slot[0] * (a.gpus_per_instance // 8) for a in doc.placements())
    per_replica = {"H100": Decimal(20), "A100-80GB": Decimal("8.8")}[gpu]
    assert replicas * per_replica >= 40 > (replicas - 1) * per_replica  # the fewest 8-GPU replicas
    assert doc.work is not None and {t.gpu for t in doc.work.types if t.status == "used"} == {gpu}
    assert doc.request.workloads[0].unit == "samples_per_s"


def test_a_work_plan_short_of_its_gap_says_so_and_exits_7(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The work plan goes through plan's own output: a plan the solver did not prove within the
    gap is announced and exits 7 unless --accept-gap, as GPU plans do."""
    from gpuprov import work_planning
    from gpuprov.models import SolveStatus

    real = work_planning.solve

    def stopped(request: Any) -> Any:
        s = real(request)
        cut = replace(s.solved.plan, status=SolveStatus.FEASIBLE)
        return replace(s, solved=replace(s.solved, plan=cut))

    monkeypatch.setattr(work_planning, "solve", stopped)
    path = tmp_path / "serve.yaml"
    path.write_text(POLICY)
    r = runner.invoke(app, ["plan", "--policy", str(path), "--output", "json"])
    assert r.exit_code == 7, r.stderr
    assert "STOPPED BY THE TIME LIMIT" in r.stderr and from_json(r.stdout).solve.status == "Feasible"
    r = runner.invoke(app, ["plan", "--policy", str(path), "--accept-gap"])
    assert r.exit_code == 0, r.stderr
    assert "STOPPED BY THE TIME LIMIT" in r.stdout and "tokens" in r.stdout  # the notice, then the work report
