"""Planning a policy whose demand is work (tokens or samples a second), not GPUs.

Composition only, beside ``planning`` (which it calls): from a policy whose workloads name a
model, the GPU types to consider and the offers of those types to a plan document with a work
report (``plandoc.WorkReport``):

1. Each type's replica rates for each workload (``sizing.work.rates_for``: the throughput table,
   or the user's benchmark CSV, with the memory fit); a type without a row, that does not fit,
   or whose rows need more GPUs than any of its instances holds is left out and says why.
2. The request is the policy's (same rules: spot ceilings on work, spread, gangs, caps, markets)
   over every type that has a rate; the optimizer covers the work with instances of any of them
   (``optimizer.problem.work``).
3. The baseline: the same request on each type alone, solved the same way; the best of them is
   what a one-type picker buys. The plan is the mix, or — should the mix's solve have stopped
   within its gap above a single-type plan — that plan, with the mix's proven bound.
4. Per type: USD per million units of work at its cheapest on-demand and spot offer, and why the
   plan uses it or not (does not fit, slower per dollar, its capacity cap).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuprov import plandoc as pd
from gpuprov import planning
from gpuprov.errors import ConfigError, PlanningError
from gpuprov.models import Market, Offer, Plan, SnapshotInfo
from gpuprov.optimizer.problem import PlanRequest, eligible, work
from gpuprov.sizing import throughput
from gpuprov.sizing.work import TypeRates, WorkSpec, rates_for, usd_per_million

CENT = Decimal("0.01")
UNIT_WORD = {"tokens_per_s": "tokens", "samples_per_s": "samples"}


def is_work_policy(policy: object) -> bool:
    return any(getattr(w, "work", None) is not None for w in getattr(policy, "workloads", {}).values())


def types_considered(gpu: str | None) -> tuple[str, ...]:
    """The GPU types a work-unit policy may use: those its ``gpu`` (or ``--type``) names, comma-
    separated, families expanded; every whole-GPU type gpuprov knows when it names none."""
    from pricing.gpus import GPUS, resolve

    if gpu is None or not gpu.strip():
        return tuple(g.name for g in GPUS if g.name not in ("MI25",))
    names: list[str] = []
    for part in gpu.split(","):
        if part.strip():
            names.extend(resolve(part.strip()))
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Setup:
    """The policy's spec with replica rates, and each work workload's rates per type."""

    spec: pd.RequestSpec
    rates: dict[str, list[TypeRates]]  # workload -> per type considered
    types: tuple[str, ...]


def setup(
    policy: object,
    types: Sequence[str],
    offers: Sequence[Offer],
    user_rows: Sequence[throughput.Row],
    solver: str,
    gap: float,
    time_limit_s: float,
) -> Setup:
    from policies.model import Policy

    assert isinstance(policy, Policy)
    gpu_workloads = [name for name, w in policy.workloads.items() if w.work is None]
    if gpu_workloads:
        raise ConfigError(
            f"policy {policy.name!r}: {', '.join(gpu_workloads)} counts GPUs while another workload counts work; "
            "give every workload a model and its demand in tokens_per_s or samples_per_s, or plan them apart"
        )
    base = _spec(policy, tuple(types), solver, gap, time_limit_s)
    allowed = [o for o in offers if planning.allowed(base, o)]
    largest: dict[str, int] = {}
    for o in allowed:
        if o.gpu_fraction is None:
            largest[o.gpu] = max(largest.get(o.gpu, 0), o.gpus_per_instance)
    rows = throughput.table(user_rows)
    rates: dict[str, list[TypeRates]] = {}
    specs = []
    for ws in base.workloads:
        wp = policy.workloads[ws.name]
        assert wp.work is not None
        demand = WorkSpec(
            unit=wp.work.unit,
            model=wp.work.model,
            precisions=wp.work.precisions,
            input_tokens=wp.work.input_tokens,
            output_tokens=wp.work.output_tokens,
            dataset=wp.work.dataset,
            sequences=wp.work.sequences,
        )
        found = rates_for(demand, types, rows, largest_instance=largest)
        found = [
            t if t.gpu in largest else replace(t, rates=(), rows=(), reason=t.reason or _no_offer(t.gpu)) for t in found
        ]
        rates[ws.name] = found
        replicas = tuple(
            pd.ReplicaSpec(r.gpu, r.tensor_parallel, r.work_per_s, r.source) for t in found for r in t.rates
        )
        specs.append(replace(ws, unit=wp.work.unit, replicas=replicas))  # type: ignore[arg-type]
    usable = tuple(dict.fromkeys(g for found in rates.values() for t in found if t.rates for g in [t.gpu]))
    if not usable:
        lines = "; ".join(f"{t.gpu}: {t.reason}" for found in rates.values() for t in found[:8])
        raise PlanningError(
            "no GPU type considered can serve this work: " + lines,
            hint="give your own figure with --throughput FILE (gpu,model,precision,tensor_parallel,"
            "input_tokens,output_tokens,tokens_per_s_per_gpu)",
        )
    spec = replace(base, gpu_names=usable, workloads=tuple(specs))
    return Setup(spec, rates, tuple(types))


def _spec(policy: Any, types: tuple[str, ...], solver: str, gap: float, time_limit_s: float) -> pd.RequestSpec:
    """planning.policy_spec's request, with the demand read as work a second (policies.schedule)."""
    from policies import constraints
    from policies.schedule import demand_slots

    return pd.RequestSpec(
        gpu_names=types,
        workloads=tuple(pd.WorkloadSpec.of(w) for w in constraints.workloads(policy)),
        demand={k: tuple(v) for k, v in demand_slots(policy, 0).items()},
        clouds_allow=tuple(policy.clouds_allow),
        clouds_deny=tuple(policy.clouds_deny),
        regions_allow=tuple(policy.regions_allow),
        regions_deny=tuple(policy.regions_deny),
        markets=None if policy.markets is None else tuple(policy.markets),
        offer_caps=tuple(
            pd.OfferCapSpec(c.cloud, c.region, c.zone, c.instance_type, c.market, c.max_instances)
            for c in policy.offer_caps
        ),
        region_caps=tuple(pd.RegionCapSpec(c.cloud, c.region, c.max_instances) for c in policy.region_caps),
        budget_per_hour=policy.budget_per_hour,
        interruptions_per_hour=dict(policy.interruptions_per_hour),
        solver=solver,  # type: ignore[arg-type]
        gap=gap,
        time_limit_s=time_limit_s,
    )


def _no_offer(gpu: str) -> str:
    return f"no offer of {gpu} in the allowed clouds, regions and markets"


@dataclass(frozen=True)
class Solved:
    solved: planning.Solved
    single: tuple[tuple[str, Plan | None, str | None], ...]  # per usable type: plan or reason
    chose_single: str | None  # the type whose single-type plan became the plan


def solve(request: PlanRequest) -> Solved:
    """The mix, and each usable type alone under the same rules."""
    import time

    from gpuprov.optimizer.solve import solve as optimize

    types = request.gpu.split("/") if "/" in request.gpu else [request.gpu]

    def share(parts: int) -> float | None:
        """Of the time left to the request's deadline, one of ``parts`` equal shares."""
        if request.deadline is None:
            return None
        now = time.monotonic()
        return now + max(0.0, request.deadline - now) / parts

    mixed = planning.run(replace(request, deadline=share(2)))  # the mix half, each type alone a share of the rest
    single: list[tuple[str, Plan | None, str | None]] = []
    for n, gpu in enumerate(types):
        alone = replace(
            request, offers=[o for o in request.offers if o.gpu == gpu], gpu=gpu, deadline=share(len(types) - n)
        )
        try:
            single.append((gpu, optimize(alone), None))
        except PlanningError as exc:
            single.append((gpu, None, exc.message))
    best = min(((g, p) for g, p, _r in single if p is not None), key=lambda gp: _objective(gp[1]), default=None)
    chose = None
    if best is not None and _objective(best[1]) < _objective(mixed.plan) - Decimal("0.000001"):
        # a plan of one type is a plan of the mix; the mix's bound still bounds the mix's optimum
        plan = best[1]
        bound = min(mixed.plan.lower_bound_usd, _objective(plan))
        gap_ok = _objective(plan) - bound <= Decimal(str(request.gap)) * _objective(plan)
        plan = replace(
            plan,
            gpu=mixed.plan.gpu,
            lower_bound_usd=bound,
            status=mixed.plan.status if not gap_ok else "Optimal",
            notes=(
                *mixed.plan.notes,
                f"the {best[0]}-only plan was cheaper than the mixed solve's answer; it is the plan",
            ),
            offers_considered=mixed.plan.offers_considered,
            offers_dropped=mixed.plan.offers_dropped,
        )
        mixed = replace(mixed, plan=plan)
        chose = best[0]
    return Solved(mixed, tuple(single), chose)


def _objective(p: Plan) -> Decimal:
    return p.objective_usd if p.objective_usd is not None else p.total_cost_usd


def peak_gpus(plan: Plan) -> int:
    """GPUs held at the busiest slot: instances running plus reservations held."""
    held = sum(r.instances * r.offer.gpus_per_instance for r in plan.reservations)
    slots = range(plan.horizon_hours)
    return max(
        (held + sum(a.instances_by_slot[t] * a.offer.gpus_per_instance for a in plan.allocations) for t in slots),
        default=0,
    )


def report(s: Solved, setup_: Setup, request: PlanRequest) -> pd.WorkReport:
    plan = s.solved.plan
    wl = {w.name: w for w in request.workloads}
    peaks: dict[tuple[str, str], int] = defaultdict(int)
    for slot in range(plan.horizon_hours):
        here: dict[tuple[str, str], int] = defaultdict(int)
        for a in plan.allocations:
            here[a.workload, a.offer.gpu] += a.instances_by_slot[slot] * a.offer.gpus_per_instance
        for r in plan.reservations:
            for user, gpus_used in r.gpus_used_by_slot.items():
                here[user, r.offer.gpu] += gpus_used[slot]
        for k, v in here.items():
            peaks[k] = max(peaks[k], v)
    capped = {
        (a.workload, a.offer.gpu)
        for a in plan.allocations
        if (cap := request.offer_caps.get(a.offer.key)) is not None and max(a.instances_by_slot) >= cap
    }
    types: list[pd.GpuTypeWork] = []
    for name, found in setup_.rates.items():
        w = wl[name]
        word = UNIT_WORD.get(w.unit, "units")
        prices: dict[str, dict[Market, tuple[Decimal, Decimal, Offer]]] = defaultdict(dict)
        for o in request.offers:
            if o.market not in (Market.ON_DEMAND, Market.SPOT) or not eligible(o, w):
                continue
            per_unit = o.hourly_usd / work(o, w)  # USD an hour per unit a second
            cur = prices[o.gpu].get(o.market)
            if cur is None or per_unit < cur[0]:
                prices[o.gpu][o.market] = (per_unit, o.hourly_usd / o.gpus_per_instance, o)
        per_m: dict[str, Decimal] = {
            g: usd_per_million(v[Market.ON_DEMAND][1], _per_gpu(v[Market.ON_DEMAND][2], w))
            for g, v in prices.items()
            if Market.ON_DEMAND in v
        }
        used = {g for (wn, g), n in peaks.items() if wn == name and n > 0}
        cheapest_used = min(((per_m[g], g) for g in used if g in per_m), default=None)
        for tr in found:
            best = tr.best
            row = {
                "workload": name,
                "gpu": tr.gpu,
                "tensor_parallel": best[0].tensor_parallel if best else None,
                "work_per_gpu": (best[0].work_per_s / best[0].tensor_parallel).quantize(CENT) if best else None,
                "source": best[0].source if best else None,
                "peak_gpus": peaks.get((name, tr.gpu), 0),
            }
            for market, key in ((Market.ON_DEMAND, "on_demand"), (Market.SPOT, "spot")):
                got = prices.get(tr.gpu, {}).get(market)
                if got is not None:
                    row[f"{key}_usd_per_gpu_hour"] = got[1].quantize(Decimal("0.0001"))
                    row[f"{key}_usd_per_million"] = usd_per_million(got[1], _per_gpu(got[2], w))
            if not tr.rates:
                status, reason = "left out", tr.reason or "no rate"
            elif tr.gpu in used:
                status = "used"
                reason = f"{row['peak_gpus']} GPUs at the busiest slot"
                if (name, tr.gpu) in capped:
                    reason += "; up to its capacity cap (more would have been cheaper)"
            else:
                status = "not used"
                mine = per_m.get(tr.gpu)
                if mine is None:
                    reason = "only spot offers, and spot is capped by the ceiling"
                elif cheapest_used is not None and mine > cheapest_used[0]:
                    reason = (
                        f"slower per $: ${mine}/M {word} on demand against ${cheapest_used[0]}/M on {cheapest_used[1]}"
                    )
                else:
                    alone = next((p for g, p, _r in s.single if g == tr.gpu), None)
                    cost = f"; alone it costs ${alone.total_cost_usd.quantize(CENT):,}" if alone else ""
                    reason = (
                        f"as cheap per token at full load (${mine}/M {word} on demand), but whole instances, the "
                        f"spread or the spot ceiling make it dearer for this demand{cost}"
                    )
            types.append(pd.GpuTypeWork(status=status, reason=reason, **row))  # type: ignore[arg-type]
    singles = tuple(
        pd.SingleType(
            gpu=g,
            horizon_usd=None if p is None else p.total_cost_usd.quantize(CENT),
            objective_usd=None if p is None else _objective(p).quantize(CENT),
            reason=r,
        )
        for g, p, r in s.single
    )
    ok = [x for x in singles if x.horizon_usd is not None]
    best_single = min(ok, key=lambda x: (x.objective_usd, x.gpu), default=None)
    total = plan.total_cost_usd
    per_million: dict[str, Decimal] = {}
    for name in setup_.rates:
        asked = sum(request.demand[name]) * 3600
        if asked:
            per_million[name] = (_workload_cost(plan, name, len(request.workloads)) / asked * 1_000_000).quantize(
                Decimal("0.0001")
            )
    notes = [f"baseline: each GPU type alone under the same rules; {len(ok)} of {len(singles)} can serve it"]
    if s.chose_single:
        notes.append(f"the {s.chose_single}-only plan beat the mixed solve's answer (within its gap) and is the plan")
    return pd.WorkReport(
        types=tuple(types),
        single_type=singles,
        best_single_type=best_single.gpu if best_single else None,
        best_single_type_horizon_usd=best_single.horizon_usd if best_single else None,
        saving_usd=(best_single.horizon_usd - total).quantize(CENT)
        if best_single and best_single.horizon_usd
        else None,
        usd_per_million=per_million,
        notes=tuple(notes),
    )


def _per_gpu(o: Offer, w: object) -> Decimal:
    from gpuprov.models import Workload

    assert isinstance(w, Workload)
    return work(o, w) / o.gpus_per_instance


def _workload_cost(plan: Plan, name: str, workloads: int) -> Decimal:
    """What the plan spends on one workload over the horizon: all of it when there is one; else
    its instances, and its share (GPUs used) of the reserved ones."""
    if workloads == 1:
        return plan.total_cost_usd
    cost = sum(
        (a.offer.hourly_usd * sum(a.instances_by_slot) for a in plan.allocations if a.workload == name), Decimal(0)
    )
    for r in plan.reservations:
        used = r.gpus_used_by_slot.get(name, ())
        cost += r.offer.hourly_usd * Decimal(sum(used)) / r.offer.gpus_per_instance
    return cost


def document(
    s: Solved,
    setup_: Setup,
    request: PlanRequest,
    snapshots: Sequence[SnapshotInfo],
    context: planning.Context,
    created: datetime,
    extra: Mapping[str, object] | None = None,
) -> pd.PlanDocument:
    spec = setup_.spec
    pid = planning.plan_id(spec, snapshots, context, extra=dict(extra or {}) | {"work": 1})
    doc = planning.document(pid, s.solved, snapshots, max(1, peak_gpus(s.solved.plan)), spec, context, created)
    doc = replace(doc, work=report(s, setup_, request))
    pd.check(doc)
    return doc
