"""The shipped throughput table: every row names its source row, the value there is the one copied,
the build is reproducible; a user's benchmark CSV replaces what it names and bad files are one line."""

from __future__ import annotations

import csv
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from gpuprov.errors import ConfigError
from gpuprov.sizing import throughput
from pricing.gpus import GPUS
from tests.conftest import ROOT

SRC = ROOT / "data" / "sources" / "throughput"
SHIPPED = ROOT / "gpuprov" / "sizing" / "data" / "throughput.csv"
# the source column each file's figure is read from, and what it is divided by
VALUE_COLUMN = {
    "trtllm_perf_overview_v0.17_throughput.csv": ("throughput_tokens_per_s", lambda r: Decimal(r["num_gpus"])),
    "trtllm_perf_overview_v1.0_throughput.csv": ("total_output_tokens_per_s", lambda r: Decimal(r["num_gpus"])),
    "mlperf_inference_v5.1_datacenter_closed_llm.csv": ("result", lambda r: Decimal(r["total_accelerators"])),
    # Throughput counts input and output tokens (equal lengths): output = Throughput / 2
    "argonne_llm_inference_bench_All_results.csv": ("Throughput", lambda r: 2 * Decimal(r["Num of Hardware"])),
}


def source_lines(name: str) -> dict[int, dict[str, str]]:
    with open(SRC / name, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        out = {}
        for row in reader:
            out[reader.line_num] = row
        return out


def test_every_row_names_its_source_row_and_that_row_holds_the_value() -> None:
    rows = throughput.bundled()
    assert len(rows) > 900
    sources = {name: source_lines(name) for name in VALUE_COLUMN}
    names = {g.name for g in GPUS}
    for r in rows:
        assert r.source in VALUE_COLUMN, r.ref
        src = sources[r.source][r.source_line]  # KeyError: a row naming a line that is not there
        column, divisor = VALUE_COLUMN[r.source]
        assert src[column] == r.source_value, r.ref
        assert abs(Decimal(src[column]) / divisor(src) - r.per_gpu) <= Decimal("0.005"), r.ref
        assert r.gpu in names and r.per_gpu > 0 and r.tensor_parallel >= 1
        assert r.derivation


def test_rows_keep_what_the_source_row_says() -> None:
    trt = source_lines("trtllm_perf_overview_v0.17_throughput.csv")
    for r in throughput.bundled():
        if r.source.startswith("trtllm_perf_overview_v0.17"):
            src = trt[r.source_line]
            assert (str(r.tensor_parallel), str(r.input_tokens), str(r.output_tokens)) == (
                src["tp"],
                src["isl"],
                src["osl"],
            )
            assert r.precision == {"FP8": "fp8", "FP16": "bf16"}[src["precision"]]
    mlperf = source_lines("mlperf_inference_v5.1_datacenter_closed_llm.csv")
    for r in throughput.bundled():
        if r.source.startswith("mlperf"):
            src = mlperf[r.source_line]
            assert src["scenario"] == "Offline" and src["availability"] == "available"
            assert src["number_of_nodes"] == "1" and r.dataset == f"mlperf:{src['mlperf_model'].replace('_', '.')}"


def test_the_build_is_reproducible(tmp_path: Path) -> None:
    out = tmp_path / "throughput.csv"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_throughput.py"), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == SHIPPED.read_bytes()
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_throughput.py"), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0 and "up to date" in check.stdout


def test_the_sources_are_the_copies_the_provenance_names() -> None:
    import hashlib

    text = (SRC / "PROVENANCE.md").read_text(encoding="utf-8")
    for name in VALUE_COLUMN:
        digest = hashlib.sha256((SRC / name).read_bytes()).hexdigest()
        assert digest in text, name


def test_lookup_matches_exact_lengths_only() -> None:
    rows = throughput.table()
    found = throughput.matching(rows, "meta-llama/Llama-3.1-70B-Instruct", ["fp8"], "tokens_per_s", 128, 2048, None)
    assert {(r.gpu, r.tensor_parallel) for r in found} >= {("H100", 8), ("L40S", 4), ("H200", 1)}
    assert all((r.input_tokens, r.output_tokens) == (128, 2048) for r in found)
    assert throughput.matching(rows, "llama-3.1-70b", ["fp8"], "tokens_per_s", 128, 2000, None) == []
    mlperf = throughput.matching(rows, "llama-2-70b", ["fp8"], "tokens_per_s", None, None, "mlperf:llama2-70b-99")
    assert mlperf and all(r.source.startswith("mlperf") for r in mlperf)


def test_best_by_tp_keeps_the_highest_figure() -> None:
    rows = throughput.matching(throughput.table(), "llama-2-70b", ["bf16"], "tokens_per_s", 1024, 1024, None)
    best = throughput.best_by_tp(rows)
    for (gpu, tp), row in best.items():
        assert row.per_gpu == max(r.per_gpu for r in rows if (r.gpu, r.tensor_parallel) == (gpu, tp))


USER = """gpu,model,precision,tensor_parallel,input_tokens,output_tokens,tokens_per_s_per_gpu,source
nvidia-l4,meta-llama/Llama-3.1-70B-Instruct,fp8,8,128,2048,95.5,genai-perf run 2026-05-01
H100,llama-3.1-70b,fp8,8,128,2048,1000,my-h100
"""


def test_a_users_csv_replaces_the_rows_it_names(tmp_path: Path) -> None:
    path = tmp_path / "bench.csv"
    path.write_text(USER)
    user = throughput.read_user(str(path))
    assert [(r.gpu, r.model, r.per_gpu, r.source_line) for r in user] == [
        ("L4", "llama-3.1-70b", Decimal("95.5"), 2),
        ("H100", "llama-3.1-70b", Decimal("1000"), 3),
    ]
    assert user[0].source == "user:genai-perf run 2026-05-01"
    rows = throughput.table(user)
    h100 = [r for r in rows if (r.gpu, r.model) == ("H100", "llama-3.1-70b")]
    assert h100 == [user[1]]  # the bundled H100 rows of that model are replaced
    assert any(r.gpu == "H100" and r.model == "llama-3.1-8b" for r in rows)  # others stay


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\n", "a header and no rows"),
        ("gpu,model,precision,tokens_per_s_per_gpu\nH100,x,fp8,1\n", "line 1: the header needs"),
        ("gpu,model,precision,tensor_parallel\nH100,x,fp8,1\n", "line 1: the header needs"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu,samples_per_s_per_gpu\n", "line 1"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\na100,x,fp8,1,5\n", "line 2: GPU spelling"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\nnope,x,fp8,1,5\n", "line 2: unknown GPU"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\nH100,x,fp9,1,5\n", "line 2: precision"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\nH100,x,fp8,0,5\n", "line 2: tensor_parallel"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\nH100,x,fp8,1,-5\n", "line 2: tokens_per_s"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\nH100,x,fp8,1,nan\n", "line 2: tokens_per_s"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\nH100,x,fp8,1,1e12\n", "line 2: tokens_per_s"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\nH100,x,fp8,1\n", "line 2: 4 fields"),
        ("gpu,model,precision,tensor_parallel,tokens_per_s_per_gpu\nH100,\x1bx,fp8,1,5\n", "line 2: model"),
    ],
)
def test_bad_user_files_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bench.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        throughput.read_user(str(path))
    assert "\n" not in err.value.message


def test_binary_and_huge_user_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.csv"
    path.write_bytes(b"gpu\x00,model\n")
    with pytest.raises(ConfigError, match="NUL"):
        throughput.read_user(str(path))
    path.write_bytes(b"#" * (throughput.MAX_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than"):
        throughput.read_user(str(path))
