"""Canonical GPU names, their aliases and the spellings each cloud uses.

A user may type a family (``a100`` means both A100 variants), a variant (``a100-80gb``)
or any cloud's spelling (``nvidia-tesla-a100``, ``nvidia-a100-80gb``, ``NVIDIA H100 80GB HBM3``).
Matching ignores case, spaces, underscores and dashes.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from gpuprov.errors import UnknownGpuError


@dataclass(frozen=True, slots=True)
class Gpu:
    name: str
    memory_gib: int
    aliases: tuple[str, ...] = ()


GPUS: tuple[Gpu, ...] = (
    Gpu("A100-40GB", 40, ("a100-40g", "a100-sxm4-40gb", "nvidia-tesla-a100", "nvidia a100 40gb")),
    Gpu("A100-80GB", 80, ("a100-80g", "a100-sxm4-80gb", "nvidia-a100-80gb", "nvidia a100 80gb")),
    Gpu(
        "H100",
        80,
        ("h100-80gb", "nvidia-h100-80gb", "h100-mega", "nvidia-h100-mega-80gb", "nvidia h100 80gb hbm3", "h100-sxm"),
    ),
    Gpu("H200", 141, ("h200-141gb", "nvidia-h200-141gb")),
    Gpu("B200", 180, ("nvidia-b200", "nvidia b200 blackwell")),
    Gpu("B300", 288, ("nvidia-b300", "nvidia b300 blackwell")),
    Gpu("L4", 24, ("nvidia-l4", "nvidia l4")),
    Gpu("L40S", 48, ("nvidia-l40s", "nvidia l40s")),
    Gpu("L40", 48, ("nvidia-l40", "nvidia l40")),
    Gpu("A10G", 24, ("nvidia-a10g", "nvidia a10g")),
    Gpu("A10", 24, ("nvidia-a10", "nvidia a10")),
    Gpu("T4", 16, ("nvidia-tesla-t4", "tesla-t4", "nvidia t4")),
    Gpu("V100", 16, ("nvidia-tesla-v100", "tesla-v100", "v100-16gb")),
    Gpu("V100-32GB", 32, ("v100-32g", "tesla-v100-32gb")),
    Gpu("P100", 16, ("nvidia-tesla-p100", "tesla-p100")),
    Gpu("P4", 8, ("nvidia-tesla-p4", "tesla-p4")),
    Gpu("K80", 12, ("nvidia-tesla-k80", "nvidia k80")),
    Gpu("M60", 8, ("nvidia-tesla-m60", "nvidia m60")),
    Gpu("MI300X", 192, ("amd-mi300x", "amd instinct mi300x")),
    Gpu("MI25", 16, ("amd-mi25", "radeon instinct mi25")),
)

# Families: a short name that stands for several canonical variants.
FAMILIES: dict[str, tuple[str, ...]] = {
    "a100": ("A100-40GB", "A100-80GB"),
    "v100": ("V100", "V100-32GB"),
}

# Cloud catalog spellings that mean one variant where the short name is a family.
CLOUD_SPELLINGS: dict[str, str] = {
    "A100": "A100-40GB",  # SkyPilot / AWS / GCP catalogs: 'A100' is the 40 GB part
    "H100-MEGA": "H100",  # GCP a3-megagpu: same GPU, faster interconnect
    "V100": "V100",  # catalogs: 'V100' is the 16 GB part
}


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.strip().lower())


def _build_index() -> dict[str, tuple[str, ...]]:
    index: dict[str, tuple[str, ...]] = {}
    for gpu in GPUS:
        for spelling in (gpu.name, *gpu.aliases):
            index[_norm(spelling)] = (gpu.name,)
    for family, members in FAMILIES.items():
        index[_norm(family)] = members
    return index


_INDEX = _build_index()
_BY_NAME = {gpu.name: gpu for gpu in GPUS}


def resolve(name: str) -> tuple[str, ...]:
    """Canonical GPU names that ``name`` stands for (one, or a family's several).

    Raises UnknownGpuError with a did-you-mean hint when nothing matches.
    """
    key = _norm(name)
    if key and key in _INDEX:
        return _INDEX[key]
    candidates = sorted({g.name.lower() for g in GPUS} | set(FAMILIES))
    close = difflib.get_close_matches(name.strip().lower(), candidates, n=4, cutoff=0.5)
    hint = f"did you mean: {', '.join(close)}?" if close else None
    known = ", ".join(sorted({g.name for g in GPUS}))
    raise UnknownGpuError(f"unknown GPU type {name!r}", hint or f"known types: {known}")


def canonical(cloud_spelling: str) -> str:
    """The one canonical name for a catalog's spelling of one GPU variant.

    Unlike ``resolve``, a family name is an error here: a catalog row names one part.
    """
    if cloud_spelling in CLOUD_SPELLINGS:
        return CLOUD_SPELLINGS[cloud_spelling]
    names = resolve(cloud_spelling)
    if len(names) != 1:
        raise UnknownGpuError(f"GPU spelling {cloud_spelling!r} names a family, not one part")
    return names[0]


def memory_gib(name: str) -> int:
    return _BY_NAME[name].memory_gib
