"""The fast network an instance type has, from its specs: the ``interconnect`` column of offers.

AWS: ``efa`` for the GPU types that support the Elastic Fabric Adapter (AWS EC2 User Guide,
"Supported instance types" for EFA, accelerated computing). Azure: ``infiniband`` for the
RDMA-capable sizes, the ``r`` among the additive feature letters after the vCPU count
(Azure VM naming conventions: ``Standard_ND96isr_H100_v5``, ``Standard_NC24rs_v3``): those sizes
carry an InfiniBand NIC. GCP offers get theirs from the machine family (``GPUDirect-TCPX``,
``GPUDirect-TCPXO``, ``GPUDirect-RDMA``: pricing/skypilot.py). Anything else: None.

A policy asks for one with ``workloads.<name>.interconnect`` (policies/constraints.py):
``efa``, ``infiniband``, or ``rdma`` (any RDMA-capable fabric: EFA, InfiniBand, GPUDirect-RDMA).
"""

from __future__ import annotations

import re

AWS_EFA = frozenset(
    {
        "dl1.24xlarge",
        "g4dn.8xlarge",
        "g4dn.12xlarge",
        "g4dn.16xlarge",
        "g4dn.metal",
        "g5.8xlarge",
        "g5.12xlarge",
        "g5.16xlarge",
        "g5.24xlarge",
        "g5.48xlarge",
        "g6.8xlarge",
        "g6.12xlarge",
        "g6.16xlarge",
        "g6.24xlarge",
        "g6.48xlarge",
        "g6e.8xlarge",
        "g6e.12xlarge",
        "g6e.16xlarge",
        "g6e.24xlarge",
        "g6e.48xlarge",
        "gr6.8xlarge",
        "p3dn.24xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "p6-b300.48xlarge",
        "p6e-gb200.36xlarge",
    }
)
AZURE_SIZE = re.compile(r"^Standard_[A-Z]+\d+([a-z]*)(?:_|$)")

# what a policy's value accepts among the offers' values
ACCEPTS: dict[str, tuple[str, ...] | None] = {
    "any": None,
    "efa": ("efa",),
    "infiniband": ("infiniband",),
    "rdma": ("GPUDirect-RDMA", "efa", "infiniband"),
}


def of(cloud: str, instance_type: str) -> str | None:
    if cloud == "aws":
        return "efa" if instance_type in AWS_EFA else None
    if cloud == "azure":
        m = AZURE_SIZE.match(instance_type)
        return "infiniband" if m is not None and "r" in m.group(1) else None
    return None
