import pytest

from gpuprov.errors import UnknownGpuError
from pricing.gpus import canonical, resolve


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a100", ("A100-40GB", "A100-80GB")),
        ("A100", ("A100-40GB", "A100-80GB")),
        ("a100-80gb", ("A100-80GB",)),
        ("A100_80GB", ("A100-80GB",)),
        ("nvidia-tesla-a100", ("A100-40GB",)),
        ("nvidia-a100-80gb", ("A100-80GB",)),
        ("h100", ("H100",)),
        ("nvidia-h100-mega-80gb", ("H100",)),
        ("NVIDIA H100 80GB HBM3", ("H100",)),
        ("nvidia-l4", ("L4",)),
        ("t4", ("T4",)),
        ("v100", ("V100", "V100-32GB")),
        ("v100-32gb", ("V100-32GB",)),
        ("a10g", ("A10G",)),
        ("l40s", ("L40S",)),
        ("b200", ("B200",)),
    ],
)
def test_resolve(text: str, expected: tuple[str, ...]) -> None:
    assert resolve(text) == expected


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("A100", "A100-40GB"),
        ("A100-80GB", "A100-80GB"),
        ("H100-MEGA", "H100"),
        ("V100", "V100"),
        ("V100-32GB", "V100-32GB"),
        ("nvidia-tesla-t4", "T4"),
    ],
)
def test_catalog_spellings(spelling: str, expected: str) -> None:
    assert canonical(spelling) == expected


def test_unknown_type_suggests() -> None:
    with pytest.raises(UnknownGpuError) as err:
        resolve("zz100")
    assert err.value.message == "unknown GPU type 'zz100'"
    assert err.value.hint is not None and "h100" in err.value.hint and "a100" in err.value.hint


def test_empty_name_is_unknown() -> None:
    with pytest.raises(UnknownGpuError):
        resolve("   ")
