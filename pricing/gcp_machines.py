"""GCP accelerator-optimized machine types: how GCP bills them and where it sells them.

GCP bills an accelerator-optimized machine type for its attached GPUs, its predefined vCPUs and
memory (the machine family's core and RAM SKUs) and its bundled Local SSD, in every market: on
demand, Spot and 1-/3-year committed use ("Accelerator-optimized machine family", Compute Engine
documentation, "Pricing and consumption options"). Two machine types with the same family SKUs,
GPU SKU and the same vCPUs, memory, GPUs and bundled Local SSD therefore cost the same in every
region and market: ``SAME_BILL`` names such pairs, so a type a price list leaves out is priced
from the listed type's composition (dstack's gpuhunt prices GCP machines the same way, family
core/RAM SKUs by name prefix plus the GPU SKU of the type's accelerator).

``MARKETS`` restricts the markets of sizes GCP does not sell on demand or under commitment:
a3-highgpu-1g, -2g and -4g are provisioned only as Spot VMs or through flex-start (Dynamic
Workload Scheduler), per the A3 High section of the machine-type documentation (the sizes with
fewer than 8 GPUs are not offered on demand or with committed-use discounts), the rule dstack's
gpuhunt applies too. Flex-start is not a market gpuprov prices, so they carry spot only.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprov.models import Market

ALL_MARKETS = frozenset(Market)

# machine type -> the markets GCP sells it in (types not named: every market)
MARKETS: dict[str, frozenset[Market]] = {
    "a3-highgpu-1g": frozenset({Market.SPOT}),
    "a3-highgpu-2g": frozenset({Market.SPOT}),
    "a3-highgpu-4g": frozenset({Market.SPOT}),
}
MARKETS_SOURCE = (
    "Compute Engine docs, accelerator-optimized machine family, A3 High: the 1-, 2- and 4-GPU sizes "
    "are provisioned only as Spot VMs or flex-start VMs (the rule dstack's gpuhunt applies too)"
)


@dataclass(frozen=True, slots=True)
class SameBill:
    """``machine`` is billed exactly as ``like``: same family SKUs, GPU SKU and quantities."""

    machine: str
    like: str
    why: str


SAME_BILL: tuple[SameBill, ...] = (
    SameBill(
        "a3-edgegpu-8g",
        "a3-highgpu-8g",
        "A3 Edge and A3 High: 208 vCPUs and 1,872 GB on the A3 core and RAM SKUs, 8 H100 80GB on the "
        "H100 80GB GPU SKU, 16 x 375 GiB bundled Local SSD",
    ),
)
SAME_BILL_BY_MACHINE = {s.machine: s for s in SAME_BILL}


def sold_in(machine: str, market: Market) -> bool:
    return market in MARKETS.get(machine, ALL_MARKETS)
