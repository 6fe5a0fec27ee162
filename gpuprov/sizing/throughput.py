"""The throughput table: measured output tokens a second per GPU, by GPU model, model, precision,
tensor-parallel size and input/output lengths, each row naming the source row it comes from.

The bundled table (``data/throughput.csv``) is built by ``scripts/build_throughput.py`` from the
public sources in ``data/sources/throughput/`` (see the PROVENANCE.md there): TensorRT-LLM's
performance overview (v0.17 and v1.0), MLPerf Inference v5.1 (closed, datacenter, Offline) and
Argonne's LLM-Inference-Bench (vLLM on H100). A user's own benchmark CSV (``read_user``: genai-perf,
guidellm or anything that gives these columns) replaces the bundled rows of every (GPU, model) it
names::

    gpu,model,precision,tensor_parallel,input_tokens,output_tokens,tokens_per_s_per_gpu[,dataset,batch,source]

``samples_per_s_per_gpu`` may stand where ``tokens_per_s_per_gpu`` is (a training benchmark).
The file is read as UTF-8 up to 1 MiB; a bad header or row is one ``ConfigError`` naming the file
and line; GPU names go through ``pricing.gpus`` (one variant, not a family).

A lookup (``matching``) takes rows of the model and one of the precisions asked, with the exact
input and output lengths (or the named dataset, for MLPerf's rows): the table holds no
interpolation across lengths, so a length it has not measured is a missing row, never a guess.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from pathlib import Path

from gpuprov.errors import ConfigError
from gpuprov.sizing.model import canonical_name

MAX_BYTES = 1 << 20
MAX_RATE = Decimal(10) ** 8
UNITS = {"tokens_per_s_per_gpu": "tokens_per_s", "samples_per_s_per_gpu": "samples_per_s"}
Fail = Callable[[str], ConfigError]


@dataclass(frozen=True)
class Row:
    gpu: str
    model: str
    precision: str
    tensor_parallel: int
    input_tokens: int | None
    output_tokens: int | None
    dataset: str
    batch: int | None
    per_gpu: Decimal  # work a second per GPU, in ``unit``
    source: str  # file name (bundled) or the user's file
    source_line: int
    unit: str = "tokens_per_s"
    source_value: str = ""
    derivation: str = ""

    @property
    def ref(self) -> str:
        return f"{self.source}:{self.source_line}"


@lru_cache(maxsize=1)
def bundled() -> tuple[Row, ...]:
    text = (resources.files("gpuprov.sizing") / "data" / "throughput.csv").read_text(encoding="utf-8")
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        out.append(
            Row(
                gpu=r["gpu"],
                model=r["model"],
                precision=r["precision"],
                tensor_parallel=int(r["tensor_parallel"]),
                input_tokens=int(r["input_tokens"]) if r["input_tokens"] else None,
                output_tokens=int(r["output_tokens"]) if r["output_tokens"] else None,
                dataset=r["dataset"],
                batch=int(r["batch"]) if r["batch"] else None,
                per_gpu=Decimal(r["tokens_per_s_per_gpu"]),
                source=r["source"],
                source_line=int(r["source_line"]),
                source_value=r["source_value"],
                derivation=r["derivation"],
            )
        )
    return tuple(out)


def read_user(path: str) -> tuple[Row, ...]:
    from gpuprov.names import show
    from gpuprov.safeyaml import read_text

    where = f"--throughput {show(path, 80)}"
    text = read_text(Path(path), where, MAX_BYTES).removeprefix("\ufeff")
    if "\x00" in text:
        raise ConfigError(f"{where}: not a CSV file (it holds NUL bytes)")
    return parse_user(text, where, Path(path).name)


def parse_user(text: str, where: str, name: str) -> tuple[Row, ...]:
    try:
        return _parse_user(text, where, name)
    except csv.Error as exc:  # a field over the csv module's limit, a stray quote
        raise ConfigError(f"{where}: not CSV ({str(exc)[:80]})") from None


def _parse_user(text: str, where: str, name: str) -> tuple[Row, ...]:
    from gpuprov.errors import UnknownGpuError
    from gpuprov.sizing.memory import precision as parse_precision
    from pricing.gpus import canonical

    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    rows: list[Row] = []
    for line, cells in enumerate(reader, start=1):
        if not cells or not any(c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [c.strip() for c in cells]
            value_cols = [c for c in header if c in UNITS]
            missing = [c for c in ("gpu", "model", "precision", "tensor_parallel") if c not in header]
            if missing or len(value_cols) != 1 or len(set(header)) != len(header):
                raise ConfigError(
                    f"{where}, line {line}: the header needs gpu, model, precision, tensor_parallel and one of "
                    f"{', '.join(UNITS)} (each once); optional input_tokens, output_tokens, dataset, batch, source"
                )
            continue
        if len(cells) != len(header):
            raise ConfigError(f"{where}, line {line}: {len(cells)} fields, the header has {len(header)}")
        r = dict(zip(header, (c.strip() for c in cells), strict=True))

        def fail(msg: str, line: int = line) -> ConfigError:
            return ConfigError(f"{where}, line {line}: {msg}")

        try:
            gpu = canonical(r["gpu"][:100])
        except UnknownGpuError as exc:
            raise fail(exc.message) from None
        try:
            prec = parse_precision(r["precision"][:20])
        except Exception:
            raise fail("precision must be fp32, bf16 (fp16), fp8, int8, int4 or fp4") from None
        unit_col = next(c for c in header if c in UNITS)
        value = _decimal(r[unit_col], fail, unit_col)
        rows.append(
            Row(
                gpu=gpu,
                model=_model(r["model"], fail),
                precision=prec,
                tensor_parallel=_int(r["tensor_parallel"], 1, 64, fail, "tensor_parallel"),
                input_tokens=_opt_int(r.get("input_tokens", ""), fail, "input_tokens"),
                output_tokens=_opt_int(r.get("output_tokens", ""), fail, "output_tokens"),
                dataset=_label(r.get("dataset", "") or "synthetic", fail, "dataset"),
                batch=_opt_int(r.get("batch", ""), fail, "batch"),
                per_gpu=value,
                source=f"user:{_label(r.get('source', '') or name, fail, 'source')}",
                source_line=line,
                unit=UNITS[unit_col],
                source_value=r[unit_col],
                derivation=f"{unit_col} as given",
            )
        )
    if header is None:
        raise ConfigError(f"{where}: empty; give a header and at least one row")
    if not rows:
        raise ConfigError(f"{where}: a header and no rows")
    return tuple(rows)


MIN_RATE = Decimal("0.001")  # work a second per GPU: less is no benchmark (and would plan millions of GPUs)


def _decimal(text: str, fail: Fail, what: str) -> Decimal:
    from gpuprov import numbers

    try:  # the one bounded parser: plain ASCII decimals, no huge exponents or digit runs
        return numbers.decimal(text, MIN_RATE, MAX_RATE)
    except numbers.NumberError:
        raise fail(f"{what} must be a plain number from {MIN_RATE} to {MAX_RATE:,}") from None


def _int(text: str, low: int, high: int, fail: Fail, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 9 or not low <= int(text) <= high:
        raise fail(f"{what} must be a whole number from {low} to {high:,}")
    return int(text)


def _opt_int(text: str, fail: Fail, what: str) -> int | None:
    return None if not text else _int(text, 1, 10_000_000, fail, what)


def _label(text: str, fail: Fail, what: str) -> str:
    if len(text) > 100 or any(ord(c) < 32 or ord(c) == 127 for c in text) or "," in text:
        raise fail(f"{what} must be one line of at most 100 characters")
    return text


def _model(text: str, fail: Fail) -> str:
    name = canonical_name(_label(text, fail, "model"))
    if not name:
        raise fail("model is empty")
    return name


def table(user: Sequence[Row] = ()) -> tuple[Row, ...]:
    """The bundled rows with the user's in their place: a (GPU, model) the user's file names is
    served by the user's rows only."""
    mine = {(r.gpu, r.model) for r in user}
    return (*user, *(r for r in bundled() if (r.gpu, r.model) not in mine))


def matching(
    rows: Iterable[Row],
    model: str,
    precisions: Sequence[str],
    unit: str,
    input_tokens: int | None,
    output_tokens: int | None,
    dataset: str | None,
) -> list[Row]:
    """Rows that measure this: the model, one of the precisions, the unit, and the same lengths
    (or dataset). No interpolation: other lengths do not match."""
    name = canonical_name(model)
    out = []
    for r in rows:
        if r.model != name or r.precision not in precisions or r.unit != unit:
            continue
        if dataset is not None:
            if r.dataset != dataset:
                continue
        elif unit == "tokens_per_s" and (r.input_tokens, r.output_tokens) != (input_tokens, output_tokens):
            continue
        out.append(r)
    return out


def best_by_tp(rows: Iterable[Row]) -> dict[tuple[str, int], Row]:
    """Per (GPU, tensor-parallel size) the row with the most work per GPU (the earliest on a tie)."""
    best: dict[tuple[str, int], Row] = {}
    for r in rows:
        k = (r.gpu, r.tensor_parallel)
        cur = best.get(k)
        if cur is None or (r.per_gpu, -r.source_line) > (cur.per_gpu, -cur.source_line):
            best[k] = r
    return best
