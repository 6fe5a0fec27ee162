"""Azure GPU sizes as Microsoft's size tables give them: GPUs per size (a share of one where the
size is a partition) and GPU memory per GPU.

Catalogs get these wrong in both directions: anycloud lists NVv4 partitions (1/8 of an MI25) as
one GPU, NC A10 v4's smallest size (half an A10) as a whole one, and NC H100 v5 (H100 NVL, 94 GB)
with the 80 GB of the SXM part. Every reader of Azure rows (the bundled snapshot's builder, the
SkyPilot importer, the live Retail Prices source) puts an Azure size through ``size_of``.

Each row names its source: the "Accelerators" tab of the size series page on Microsoft Learn
(``MicrosoftDocs/azure-compute-docs``, ``articles/virtual-machines/sizes/gpu-accelerated/<page>``;
columns "Accelerators (Qty.)" and "Accelerator-Memory (GB)", the latter per size, divided here by
the GPUs of the size).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

from gpuprov.models import Cloud, Offer


@dataclass(frozen=True, slots=True)
class AzureSize:
    gpus: Decimal  # GPUs of the size: 1/8, 1/2, 1, 8 …
    gpu_memory_gib: int  # per whole GPU (a partition's share is gpus × this)
    source: str  # the size series page (and row) the figures come from


def _row(gpus: str, memory_per_size: int, page: str) -> AzureSize:
    share = Decimal(gpus.split("/")[0]) / Decimal(gpus.split("/")[1]) if "/" in gpus else Decimal(gpus)
    per_gpu = Decimal(memory_per_size) / share
    return AzureSize(share, int(per_gpu), f"{page}: Accelerators {gpus}, Accelerator-Memory {memory_per_size} GB")


_NVV4 = "nvv4-series.md"
_NVA10 = "nvadsa10v5-series.md"
_NCA10 = "nc-a10-v4-series (Microsoft Learn NC A10 v4 sizes)"
_NCH100 = "ncadsh100v5-series.md"
_NCCH100 = "nccadsh100v5-series.md"

SIZES: dict[str, AzureSize] = {
    # NVv4: AMD Radeon Instinct MI25 partitions (16 GB whole)
    "Standard_NV4as_v4": _row("1/8", 2, _NVV4),
    "Standard_NV8as_v4": _row("1/4", 4, _NVV4),
    "Standard_NV16as_v4": _row("1/2", 8, _NVV4),
    "Standard_NV32as_v4": _row("1", 16, _NVV4),
    # NVads A10 v5: NVIDIA A10 partitions (24 GB whole)
    "Standard_NV6ads_A10_v5": _row("1/6", 4, _NVA10),
    "Standard_NV12ads_A10_v5": _row("1/3", 8, _NVA10),
    "Standard_NV18ads_A10_v5": _row("1/2", 12, _NVA10),
    "Standard_NV36ads_A10_v5": _row("1", 24, _NVA10),
    "Standard_NV36adms_A10_v5": _row("1", 24, _NVA10),
    "Standard_NV72ads_A10_v5": _row("2", 48, _NVA10),
    # NC A10 v4: the 8-vCPU size holds half an A10 (its price is half the 16-vCPU size's in every
    # region the bundle has it: 1.10/2.20 westus3, 1.32/2.64 southcentralus, 1.43/2.86 westeurope)
    "Standard_NC8ads_A10_v4": _row("1/2", 12, _NCA10),
    "Standard_NC16ads_A10_v4": _row("1", 24, _NCA10),
    "Standard_NC32ads_A10_v4": _row("2", 48, _NCA10),
    # NC H100 v5: H100 NVL, 94 GB
    "Standard_NC40ads_H100_v5": _row("1", 94, _NCH100),
    "Standard_NC80adis_H100_v5": _row("2", 188, _NCH100),
    "Standard_NCC40ads_H100_v5": _row("1", 94, _NCCH100),
}


def size_of(instance_type: str) -> AzureSize | None:
    return SIZES.get(instance_type)


def fractional() -> dict[str, Decimal]:
    """Sizes that hold a share of one GPU -> that share."""
    return {name: s.gpus for name, s in SIZES.items() if s.gpus < 1}


def corrected(offer: Offer) -> Offer:
    """An Azure offer with the GPUs and GPU memory of its size's row (other offers unchanged)."""
    size = size_of(offer.instance_type) if offer.cloud is Cloud.AZURE else None
    if size is None:
        return offer
    if size.gpus < 1:
        changes: dict[str, object] = {"gpus_per_instance": 0, "gpu_fraction": size.gpus}
    else:
        changes = {"gpus_per_instance": int(size.gpus), "gpu_fraction": None}
    changes["gpu_memory_gib"] = size.gpu_memory_gib
    if all(getattr(offer, k) == v for k, v in changes.items()):
        return offer
    return replace(offer, **changes)  # type: ignore[arg-type]
