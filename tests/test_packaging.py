"""The wheel holds exactly the project's packages and the data files they read at run time."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def test_the_wheel_has_our_packages_and_data_only(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [wheel] = tmp_path.glob("gpuprov-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("gpuprov-")}
    assert tops == {"gpuprov", "pricing", "policies", "provisioner", "terraform", "k8s", "commitments", "sdk"}
    for needed in (
        "pricing/data/offers.csv.gz",
        "pricing/data/snapshot.json",
        "pricing/data/spot-advisor.json",
        "policies/presets/day-night.yaml",
        "terraform/schemas/aws/aws_autoscaling_group.json",
        "terraform/schemas/PROVENANCE.md",
        "provisioner/drivers/aws.py",
        "gpuprov/commands/plan.py",
        "commitments/records.py",
        "gpuprov/billing/spec/focus_columns_v1.2.csv",
        "gpuprov/billing/spec/PROVENANCE.md",
        "k8s/schemas/kueue/kueue.x-k8s.io_clusterqueues.yaml",
        "k8s/schemas/kubernetes/apis__batch__v1_openapi.json",
        "k8s/schemas/kubernetes/apis__rbac.authorization.k8s.io__v1_openapi.json",
        "k8s/schemas/PROVENANCE.md",
    ):
        assert needed in names, needed
    assert not any(n.startswith(("tests/", "benchmarks/", "data/", "scripts/")) for n in names)
