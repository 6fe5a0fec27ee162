"""Words the clouds use for GPUs, shared by the renderers and the purchase hints.

GCP names the accelerators it attaches (``nvidia-tesla-a100``) and the commitment types that
cover each machine family (``ACCELERATOR_OPTIMIZED_A3``): from the machine types of the Compute
Engine docs and ``google.cloud.compute_v1.types.Commitment.Type``.
"""

from __future__ import annotations

# Machine-family prefixes whose GPUs are fixed by the machine type, then GPUs by model (N1 hosts).
ACCELERATOR_BY_MACHINE = (
    ("a2-highgpu-", "nvidia-tesla-a100"),
    ("a2-megagpu-", "nvidia-tesla-a100"),
    ("a2-ultragpu-", "nvidia-a100-80gb"),
    ("a3-megagpu-", "nvidia-h100-mega-80gb"),
    ("a3-highgpu-", "nvidia-h100-80gb"),
    ("a3-edgegpu-", "nvidia-h100-80gb"),
    ("a3-ultragpu-", "nvidia-h200-141gb"),
    ("a4-highgpu-", "nvidia-b200"),
    ("g2-", "nvidia-l4"),
)
ACCELERATOR_BY_GPU = {
    "A100-40GB": "nvidia-tesla-a100",
    "A100-80GB": "nvidia-a100-80gb",
    "H100": "nvidia-h100-80gb",
    "H200": "nvidia-h200-141gb",
    "B200": "nvidia-b200",
    "L4": "nvidia-l4",
    "T4": "nvidia-tesla-t4",
    "V100": "nvidia-tesla-v100",
    "P100": "nvidia-tesla-p100",
    "P4": "nvidia-tesla-p4",
    "K80": "nvidia-tesla-k80",
}


def accelerator_type(machine_type: str, gpu: str) -> str | None:
    """GCP's name for the GPUs of a machine type (fixed by a2/a3/a4/g2), else for a GPU model
    attached to an N1 host; None where GCP has no such accelerator."""
    for prefix, name in ACCELERATOR_BY_MACHINE:
        if machine_type.startswith(prefix):
            return name
    return ACCELERATOR_BY_GPU.get(gpu)


# GCP commitment types by machine-type prefix (an N1 host with GPUs is general purpose)
COMMITMENT_TYPE_BY_MACHINE = (
    ("a2-", "ACCELERATOR_OPTIMIZED"),
    ("a3-megagpu-", "ACCELERATOR_OPTIMIZED_A3_MEGA"),
    ("a3-ultragpu-", "ACCELERATOR_OPTIMIZED_A3_ULTRA"),
    ("a3-", "ACCELERATOR_OPTIMIZED_A3"),
    ("a4-", "ACCELERATOR_OPTIMIZED_A4"),
    ("g2-", "GRAPHICS_OPTIMIZED"),
    ("n1-", "GENERAL_PURPOSE"),
)


def commitment_type(machine_type: str) -> str | None:
    for prefix, name in COMMITMENT_TYPE_BY_MACHINE:
        if machine_type.startswith(prefix):
            return name
    return None
