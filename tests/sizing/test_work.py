"""Replica rates per GPU type from the table, and the reasons a type is left out (never a guess)."""

from __future__ import annotations

from decimal import Decimal

from gpuprov.sizing import memory, throughput
from gpuprov.sizing.model import KNOWN
from gpuprov.sizing.work import WorkSpec, rates_for, usd_per_million

SPEC = WorkSpec("tokens_per_s", "llama-3.1-70b", ("fp8", "bf16"), input_tokens=128, output_tokens=2048)
TYPES = ["H100", "A100-80GB", "L40S", "L4"]


def by_gpu(spec: WorkSpec = SPEC, rows: tuple[throughput.Row, ...] | None = None, **kw: object) -> dict:  # type: ignore[type-arg]
    return {t.gpu: t for t in rates_for(spec, TYPES, rows or throughput.table(), **kw)}  # type: ignore[arg-type]


def test_rates_are_the_tables_rows_times_their_tp() -> None:
    got = by_gpu()
    rows = {r.ref: r for r in throughput.bundled()}
    for t in got.values():
        for rate, row in zip(t.rates, t.rows, strict=True):
            assert rows[rate.source] == row and rate.work_per_s == row.per_gpu * row.tensor_parallel
            assert (row.model, row.input_tokens, row.output_tokens) == ("llama-3.1-70b", 128, 2048)
    assert [r.tensor_parallel for r in got["L40S"].rates] == [4, 8]
    assert got["A100-80GB"].rows[0].precision == "bf16"  # the table's FP16 A100 rows serve a bf16 ask


def test_a_type_without_a_row_is_left_out_and_says_so() -> None:
    l4 = by_gpu()["L4"]
    assert l4.rates == () and l4.reason is not None
    assert "no throughput row" in l4.reason and "L4" in l4.reason and "--throughput" in l4.reason


def test_tensor_parallel_sizes_that_do_not_fit_are_dropped() -> None:
    busy = WorkSpec(**{**SPEC.__dict__, "sequences": 64})
    h100 = by_gpu(busy)["H100"]
    assert min(r.tensor_parallel for r in h100.rates) == 2  # 70 GB of fp8 weights + 64 × 2,176 tokens of KV
    m = KNOWN["llama-3.1-70b"]
    one = memory.serving(m, memory.Serving("fp8", 2176, 64), 1).total
    assert one > memory.usable_bytes(80) >= memory.serving(m, memory.Serving("fp8", 2176, 64), 2).total
    huge = WorkSpec(**{**SPEC.__dict__, "sequences": 4000})
    l40s = by_gpu(huge)["L40S"]
    assert l40s.rates == () and l40s.reason is not None and "does not fit" in l40s.reason


def test_rows_needing_more_gpus_than_any_instance_are_left_out() -> None:
    got = by_gpu(largest_instance={"H100": 8, "A100-80GB": 8, "L40S": 1, "L4": 8})
    assert got["L40S"].rates == () and "largest instance offered has 1 GPUs" in (got["L40S"].reason or "")
    assert got["H100"].rates


def test_a_users_figure_brings_a_type_in(tmp_path: object) -> None:
    text = "gpu,model,precision,tensor_parallel,input_tokens,output_tokens,tokens_per_s_per_gpu\n"
    text += "L4,llama-3.1-70b,fp8,8,128,2048,60\n"
    user = throughput.parse_user(text, "test", "bench.csv")
    l4 = by_gpu(rows=throughput.table(user))["L4"]
    assert [(r.tensor_parallel, r.work_per_s, r.source) for r in l4.rates] == [(8, Decimal(480), "user:bench.csv:2")]


def test_dollars_per_million_tokens() -> None:
    assert usd_per_million(Decimal("2"), Decimal("1000")) == Decimal("0.5556")  # $2/h ÷ 3.6 M tokens an hour
