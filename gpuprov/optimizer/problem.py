r"""The mixed-integer program behind ``gpuprov plan``.

Sets and data
    t ∈ T          hourly slots (1 for a constant plan, 24 for a day, 168 for a week)
    w ∈ W          workloads (e.g. ``training``, ``inference``), demand D[w,t] in GPUs
    o ∈ F          on-demand and spot offers: g_o GPUs per instance, p_o USD per instance-hour
    o ∈ R          reserved offers, p_o their effective hourly rate (commitment amortised)
    E(w) ⊆ F ∪ R   offers workload w may use: g_o equals w's node size n_w when one is set
    l(o)           the offer's location: its zone, or its region when it has no zone
    m(o)           the offer's GPU model (A100-40GB and A100-80GB are two models; a family
                   alias such as ``a100`` admits both and lets the solver choose)
    c_{o,w}        GPUs per unit of reserved use: g_o when w takes whole instances (w has a
                   node size or is a gang), 1 when it takes whole GPUs
    a_{o,w}        what one instance of o does for w (``work``): its g_o GPUs when w's demand is
                   in GPUs; when it is in work units (tokens or samples a second), the work of
                   the g_o // t replicas of the best tensor-parallel size t of o's GPU model the
                   throughput table gives for w: max_t ⌊g_o / t⌋·ρ_{m(o),t} (0: o is not in E(w)).
                   A work-unit workload takes reserved capacity in whole instances.

Variables
    x[o,w,t] ∈ ℤ≥0     instances of o ∈ F serving w in slot t
    y[o]     ∈ ℤ≥0     reserved instances of o ∈ R, held (and paid) in every slot
    r[o,w,t] ∈ ℤ≥0     reserved use of o by w in slot t, in units of c_{o,w} GPUs: whole
                       instances for a node-size or gang workload (a node is never split
                       between a gang and anything else), whole GPUs otherwise
    b[w,k]   ∈ {0,1}   gang workload w sits at site k = (location, GPU model)
    u[w,k,t] ∈ {0,1}   spread workload w uses location k in slot t (only where needed, below)

Constraints
    reserved use   Σ_w c_{o,w}·r[o,w,t] ≤ g_o·y[o]                         ∀ o∈R, t
    cover          Σ_{o∈E(w)∩F} a_{o,w}·x[o,w,t] + Σ_{o∈E(w)∩R} c_{o,w}·a_{o,w}/g_o·r[o,w,t] ≥ D[w,t]   ∀ w, t
    spot ceiling   Σ_{o∈E(w), spot} a_{o,w}·x[o,w,t] ≤ s_w·D[w,t]          ∀ w, t
                   (with demand in GPUs a_{o,w} = g_o and c_{o,w}·a_{o,w}/g_o = c_{o,w}: the rows
                   as they were; the spread, gang and big-M bounds below count a_{o,w} likewise)
    gang           Σ_k b[w,k] = 1;  x[o,w,t] ≤ M_{o,w}·b[w,(l(o),m(o))],  r[o,w,t] ≤ M_{o,w}·b[w,(l(o),m(o))]
                   with M_{o,w} = ⌈max_t D[w,t] / g_o⌉: all of w, every slot, in one location
                   and on one GPU model
    spread (k_w≥2) Σ_{o∈E(w)∩F, l(o)=k} g_o·x[o,w,t] + Σ_{o∈E(w)∩R, l(o)=k} c_{o,w}·r[o,w,t] ≤ C[w,t]   ∀ k, t
                   with C[w,t] = ⌈⌈D[w,t]/k_w⌉ / n_w⌉·n_w (n_w: the smallest usable instance when
                   unset), and, in the slots
                   where the caps alone do not force k_w locations (C·(k_w−1) ≥ D):
                   Σ_{o at k} (x[o,w,t] + r[o,w,t]) ≥ u[w,k,t],  Σ_k u[w,k,t] ≥ k_w
    offer cap      Σ_w x[o,w,t] ≤ u_o (o∈F);  y[o] ≤ u_o (o∈R)             ∀ t
    region cap     Σ_{o∈F in region} Σ_w x[o,w,t] + Σ_{o∈R in region} y[o] ≤ U_region   ∀ t
    budget         Σ_{o∈F} p_o·Σ_w x[o,w,t] + Σ_{o∈R} p_o·y[o] ≤ B        ∀ t

Objective
    min Σ_t Σ_{o∈F} Σ_w p_o·(1 + h_{o,w})·x[o,w,t] + |T|·Σ_{o∈R} p_o·y[o] + Σ_{o,w} m_w·p_o·n[o,w]
    where h_{o,w} = interruptions per hour (of o's cloud) × hours of w's work lost per
    interruption for spot offers — the expected interruption overhead — and 0 otherwise.
    The rates are the same whether the request came from flags or a policy
    (``DEFAULT_INTERRUPTIONS_PER_HOUR``; a policy may override them). The plan reports the
    billed cost (the first two terms), the expected interruption overhead and the objective
    separately; the proven lower bound is a bound on the objective and is compared with it.

Commitments held and Savings Plans
    h ∈ H          commitments already paid for: a_{h,t} ∈ {0,1} says whether slot t's hour falls
                   inside [starts, ends) (a commitment that expires inside the horizon counts
                   only until its end); K(h) ⊆ F the on-demand offers it covers
    counted h      (reservation, committed use, capacity reservation) n_h instances of one type
                   in one region (any of its zones) or one zone: ρ_{h,o} = 1 instance
    Savings Plan h L_h USD an hour at its rates: ρ_{h,o} = p_o·(1 − δ_{h,o}), δ the plan's share
                   off on-demand for o's instance type (a Compute Savings Plan: any type in any
                   region; an EC2 Instance Savings Plan: one family in one region)
    s ∈ S          Savings Plans the plan may buy (one per kind and term known to the config),
                   with the same ρ and a level L_s ≥ 0 (USD an hour) that is a variable
    v[h,o,t] ≥ 0   instance-hours of o in slot t billed against h (continuous: a Savings Plan
                   covers part of an hour's usage; for a counted h the optimum is whole anyway)

    link           Σ_{h ∋ o} v[h,o,t] ≤ Σ_w x[o,w,t]                        ∀ o∈F, t
    capacity       Σ_{o∈K(h)} ρ_{h,o}·v[h,o,t] ≤ n_h·a_{h,t}   (counted)     ∀ h, t
                   Σ_{o∈K(h)} ρ_{h,o}·v[h,o,t] ≤ L_h·a_{h,t}   (Savings Plan, L_s for s ∈ S)

    The objective subtracts Σ_{h,o,t} p_o·v[h,o,t] (covered usage is not billed at the on-demand
    rate: it is paid by the commitment) and adds |T|·Σ_{s∈S} L_s; held commitments cost
    Σ_{h,t} a_{h,t}·hourly_h whatever the plan does, a constant reported beside the plan's cost
    (``total`` includes it, ``marginal`` does not). Covered usage is on-demand usage: AWS applies
    reservations and Savings Plans to on-demand instances, never to spot. The model assigns
    coverage at least cost; AWS applies reservations first and then Savings Plans to the usage
    with the highest discount first, which for one plan's budget is the same greedy optimum (the
    fractional knapsack). Budgets count covered instances at their full price (conservative).
    A GCP committed-use discount is entered per machine type; an AWS regional reservation of a
    size-flexible family counts its own instance type only.

Rebalancing adds, for the current slot t0, n[o,w] ≥ x[o,w,t0] − c[o,w], n ≥ 0: instances
launched beyond the c[o,w] that run now, each paying m_w hours of its price once (boot time,
plus lost work for training); and fixes y to the reservations held. Slots with t0's demand
share its allocation, so the plan it yields is a steady state, not a one-hour detour.

Exact reductions before the model is built (``reduce.py``): regional reservations are
copied into each zone offering their instance type (so a gang can count them as in its
zone); offers dominated within (location, GPU model, market, GPUs per instance, interconnect)
are dropped; slots with the same demand vector share one set of variables, weighted by how
many slots they stand for (given y and b the problem separates by slot, and equal slots
have equal sub-problems); and, when no caps or budget apply, gang sites (location, model) whose
lower bound exceeds a feasible plan's cost are dropped, as are, for workloads with neither a
gang nor a spread, offers more expensive than another of the same market and size.

How it is solved (the same model either way): by parts (``decompose.py``, bound in
``lagrange.py``) when at most one workload is a gang; otherwise whole, from its LP relaxation
(a bound, or a proof that no plan exists) rounded to whole instances under every row
(``rounding.py``), the MILP's warm start, kept when the solver does not beat it. ``model.py``
builds the model, ``solve.py`` runs it; every step draws on one deadline (``clock.py``).

This module holds the request and its small pure helpers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from gpuprov.models import DEFAULT_INTERRUPTIONS_PER_HOUR, Market, Offer, PoolKey, Site, Workload, WorkloadSite

OfferKey = PoolKey


def family_of(instance_type: str) -> str:
    """An AWS instance family: ``p4d`` of ``p4d.24xlarge`` (a Savings Plan's scope)."""
    return instance_type.split(".", 1)[0]


@dataclass(frozen=True)
class Held:
    """A commitment already paid for (section "Commitments" above): ``count`` instances of one
    type in a region or zone, or (a Savings Plan, ``count`` None) ``usd_per_hour`` of usage at its
    rates; ``hourly_usd`` is what it costs every active hour, used or not."""

    id: str
    cloud: str
    hourly_usd: Decimal
    active: tuple[bool, ...]  # per slot: inside [starts, ends)
    count: int | None = None
    usd_per_hour: Decimal | None = None
    instance_type: str | None = None
    region: str | None = None
    zone: str | None = None
    family: str | None = None
    discounts: Mapping[str, Decimal] = field(default_factory=dict)  # Savings Plan: type -> share off

    @property
    def savings_plan(self) -> bool:
        return self.count is None

    def covers(self, o: Offer) -> bool:
        if o.market is not Market.ON_DEMAND or o.cloud.value != self.cloud:
            return False
        if self.savings_plan:
            if o.instance_type not in self.discounts:
                return False
            return self.family is None or (o.region == self.region and family_of(o.instance_type) == self.family)
        if (o.instance_type, o.region) != (self.instance_type, self.region):
            return False
        return self.zone is None or o.zone == self.zone

    def rate(self, o: Offer) -> Decimal:
        """USD of the commitment one covered instance-hour uses: 1 instance (counted kinds), or
        the plan's rate (a Savings Plan)."""
        if self.savings_plan:
            return o.hourly_usd * (1 - self.discounts[o.instance_type])
        return Decimal(1)


@dataclass(frozen=True)
class SavingsPlanOption:
    """A Savings Plan the plan may recommend buying: its level L (USD an hour) is a variable."""

    name: str  # e.g. compute_1y, ec2_instance_1y:p4d:us-east-1
    term_hours: int
    discounts: Mapping[str, Decimal]  # instance type -> share off on-demand
    family: str | None = None
    region: str | None = None

    def held(self, slots: int, level: Decimal) -> Held:
        return Held(
            id=self.name,
            cloud="aws",
            hourly_usd=level,
            active=(True,) * slots,
            usd_per_hour=level,
            family=self.family,
            region=self.region,
            discounts=self.discounts,
        )


@dataclass(frozen=True)
class PlanRequest:
    """Everything the optimizer needs; it never reads a database, a clock or the screen."""

    gpu: str
    workloads: tuple[Workload, ...]
    demand: Mapping[str, Sequence[int]]
    offers: Sequence[Offer]
    offer_caps: Mapping[OfferKey, int] = field(default_factory=dict)
    region_caps: Mapping[tuple[str, str], int] = field(default_factory=dict)
    budget_per_hour: Decimal | None = None
    interruptions_per_hour: Mapping[str, Decimal] = field(default_factory=dict)  # cloud -> rate: overrides
    gap: float = 0.001
    time_limit_s: float = 60.0
    # time.monotonic() by which the plan must be done (the whole command's time limit); None:
    # time_limit_s from when solve() starts
    deadline: float | None = None
    solver: str = "cbc"
    unavailable: frozenset[Site] = frozenset()
    # Rebalancing: what runs now, per (cloud, location, type, market, workload); launching beyond it in
    # the current slot costs migration_hours[w] × the new instance's price (boot time, and lost work
    # for training). Reservations held are fixed (a rebalancer buys no commitment).
    current_slot: int | None = None
    incumbent: Mapping[WorkloadSite, int] = field(default_factory=dict)
    migration_hours: Mapping[str, Decimal] = field(default_factory=dict)
    reserved_fixed: Mapping[Site, int] | None = None
    # Commitments held (paid whether used or not) and Savings Plans the plan may buy.
    held: tuple[Held, ...] = ()
    savings_plan_options: tuple[SavingsPlanOption, ...] = ()
    # False: build the model on the whole offer set, one set of variables per slot (no dominance,
    # no pruning, no shared slots): for checking that the reductions are exact.
    exact_reductions: bool = True
    # "auto": a long horizon of distinct profiles is solved by parts (decompose.py) when its shape
    # allows, else the whole model at once; "monolithic" or "decompose" force one.
    method: str = "auto"

    @property
    def slots(self) -> int:
        lengths = {len(self.demand[w.name]) for w in self.workloads}
        if len(lengths) != 1:
            raise ValueError("every workload needs a demand for every slot")
        return lengths.pop()

    @property
    def capped(self) -> bool:
        """Whether anything beyond price decides between offers (the pruning bounds then do not hold)."""
        return bool(
            self.offer_caps
            or self.region_caps
            or self.budget_per_hour is not None
            or self.current_slot is not None
            or self.reserved_fixed is not None
            or bool(self.held)
            or bool(self.savings_plan_options)
        )


def eligible(offer: Offer, workload: Workload) -> bool:
    """Whether w may use o: whole GPUs only (a fractional size is never counted as a GPU), of
    w's node size where it has one, with one of the interconnects w accepts where it names them."""
    if offer.gpu_fraction is not None or offer.gpus_per_instance < 1:
        return False
    if workload.interconnect is not None and offer.interconnect not in workload.interconnect:
        return False
    if workload.gpu_models is not None and offer.gpu not in workload.gpu_models:
        return False
    if workload.replicas and work(offer, workload) <= 0:
        return False
    return workload.node_gpus is None or offer.gpus_per_instance == workload.node_gpus


def whole_instances(workload: Workload) -> bool:
    """Whether w takes reserved capacity in whole instances (a node size, a gang, or demand in
    work units) or in GPUs."""
    return workload.node_gpus is not None or workload.gang or bool(workload.replicas)


def work(offer: Offer, workload: Workload) -> Decimal:
    """a_{o,w}: what one instance of o does for w: its GPUs when w's demand is in GPUs, else the
    work a second of the replicas it holds of the best (GPU model, tensor-parallel size)."""
    g = offer.gpus_per_instance
    if not workload.replicas:
        return Decimal(g)
    best = Decimal(0)
    for r in workload.replicas:
        if r.gpu == offer.gpu and r.tensor_parallel <= g:
            best = max(best, (g // r.tensor_parallel) * r.work_per_s)
    return best


def gang_site(offer: Offer) -> tuple[str, str]:
    """Where a gang can sit: one location and one GPU model (A100-40GB and -80GB are two)."""
    return offer.location, offer.gpu


def big_m(demand: Sequence[int], gpus_per_instance: int | Decimal) -> int:
    """Instances that cover the peak: ⌈max_t D / a⌉ (a: GPUs, or the work, of one instance)."""
    return max(1, math.ceil(max(demand, default=0) / gpus_per_instance))


def overhead(offer: Offer, workload: Workload, request: PlanRequest) -> Decimal:
    """h_{o,w}: the expected share of an hour of w lost to interruptions on offer o."""
    if offer.market is not Market.SPOT:
        return Decimal(0)
    rate = interruption_rate(offer, request)
    return rate * workload.lost_hours_per_interruption


def interruption_rate(offer: Offer, request: PlanRequest) -> Decimal:
    """Interruptions per hour of a spot pool: the request's override for its cloud (a policy's
    ``spot_interruption``), else the pool's own rate (the AWS Spot Advisor bucket of its type and
    region), else the documented default of its cloud."""
    override = request.interruptions_per_hour.get(offer.cloud.value)
    if override is not None:
        return override
    if offer.interruptions_per_hour is not None:
        return offer.interruptions_per_hour
    return DEFAULT_INTERRUPTIONS_PER_HOUR.get(offer.cloud.value, Decimal(0))


def effective_price(offer: Offer, workload: Workload, request: PlanRequest) -> Decimal:
    return offer.hourly_usd * (1 + overhead(offer, workload, request))


def spread_cap(demand: int, workload: Workload, smallest: int = 1) -> int:
    """C[w,t]: the most GPUs one location may carry for a spread workload; a whole node is the
    workload's node size, or (when it has none) the smallest instance it may use."""
    node = workload.node_gpus or smallest
    return math.ceil(math.ceil(demand / workload.spread_zones) / node) * node


def spread_cap_work(demand: int, workload: Workload, least: Decimal) -> Decimal:
    """C[w,t] for demand in work units: ⌈D/k⌉ rounded up to whole instances of the least work
    one instance of w does (the GPU rule with work in place of GPUs)."""
    return math.ceil(math.ceil(demand / workload.spread_zones) / least) * least


@dataclass(frozen=True)
class Profile:
    """One distinct demand vector and the slots that have it."""

    demand: tuple[int, ...]  # per workload, in request.workloads order
    slots: tuple[int, ...]

    @property
    def weight(self) -> int:
        return len(self.slots)


def profiles(request: PlanRequest) -> list[Profile]:
    """Slots grouped by demand vector (equal slots share one allocation)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for t in range(request.slots):
        key = tuple(int(request.demand[w.name][t]) for w in request.workloads)
        key = (*key, *(int(h.active[t]) for h in request.held))
        if not request.exact_reductions:
            key = (*key, t)
        groups.setdefault(key, []).append(t)
    n = len(request.workloads)
    return [Profile(k[:n], tuple(v)) for k, v in groups.items()]
