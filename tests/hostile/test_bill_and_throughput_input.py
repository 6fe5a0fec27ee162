"""Hostile bills and throughput files (found by a probe of this round's new commands): each is one
``error:`` line and exit 2, bounded in time and memory, with nothing stored. Run as a user runs
them, in a subprocess with its own home and database. The bills are the official FOCUS 1.0
sample (tests/fixtures/billing, see its PROVENANCE.md) with one thing changed."""

from __future__ import annotations

import csv
import gzip
import io
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "gpuprov"
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "billing" / "focus_1.0_sample_1000rows.csv"


def _run(tmp: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")},
        "HOME": str(tmp / "home"),
        "GPUPROV_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite'}",
        "GPUPROV_CONFIG": str(tmp / "none.yaml"),
    }
    return subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp)


def _one_line(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == code, r.stderr[-800:]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-800:]
    return errors[0]


def _charges(tmp: Path) -> int:
    path = tmp / "db.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as con:
        try:
            return int(con.execute("SELECT count(*) FROM gpuprov_bill_charge").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def _sample_with(column: str, value: str) -> str:
    rows = list(csv.reader(io.StringIO(SAMPLE.read_text(encoding="utf-8"))))
    rows[1][rows[0].index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _write(tmp: Path, name: str, data: str | bytes) -> str:
    path = tmp / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return str(path)


BAD_BILLS: dict[str, tuple[Callable[[Path], str], str]] = {
    "gzip-header-then-junk": (
        lambda t: _write(t, "fake.csv.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"garbage" * 100),
        "gzip",
    ),
    "no-newline-at-all": (lambda t: _write(t, "flat.csv", b"a" * (3 << 20)), "longer than"),
    "a-header-of-300000-repeated-names": (lambda t: _write(t, "wide.csv", ",".join(["a"] * 300_000) + "\n"), ""),
    "a-tiny-billed-cost": (lambda t: _write(t, "tiny.csv", _sample_with("BilledCost", "1E-999999999")), "BilledCost"),
    "a-value-a-million-digits-long-written-out": (
        lambda t: _write(t, "zero.csv", _sample_with("BilledCost", "1E-999000")),
        "BilledCost",
    ),
    "underscored-digits": (lambda t: _write(t, "u.csv", _sample_with("BilledCost", "1_000")), "BilledCost"),
    "arabic-indic-digits": (lambda t: _write(t, "ar.csv", _sample_with("BilledCost", "١٢")), "BilledCost"),
    "fifty-significant-digits": (lambda t: _write(t, "long.csv", _sample_with("BilledCost", "1." + "1" * 50)), ""),
}


@pytest.mark.parametrize("case", sorted(BAD_BILLS))
def test_a_hostile_bill_is_one_line_exit_2_and_stores_nothing(tmp_path: Path, case: str) -> None:
    make, words = BAD_BILLS[case]
    line = _one_line(_run(tmp_path, "bill", "import", make(tmp_path)))
    assert words in line, line
    assert _charges(tmp_path) == 0


def test_the_same_export_twice_in_one_command_stores_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.csv", SAMPLE.read_bytes())
    copy = _write(tmp_path, "b.csv", SAMPLE.read_bytes())
    line = _one_line(_run(tmp_path, "bill", "import", path, copy))
    assert "the same export as" in line
    assert _charges(tmp_path) == 0
    assert _run(tmp_path, "bill", "import", path).returncode == 0 and _charges(tmp_path) > 0


def test_a_byte_order_mark_keeps_the_first_column(tmp_path: Path) -> None:
    plain = _run(tmp_path, "bill", "import", _write(tmp_path, "plain.csv", SAMPLE.read_bytes()))
    assert plain.returncode == 0, plain.stderr
    bom = tmp_path / "bom"
    bom.mkdir()
    r = _run(bom, "bill", "import", _write(bom, "bom.csv", b"\xef\xbb\xbf" + SAMPLE.read_bytes()))
    assert r.returncode == 0, r.stderr
    assert "AvailabilityZone" not in r.stderr  # not reported as a column outside FOCUS
    with sqlite3.connect(tmp_path / "db.sqlite") as a, sqlite3.connect(bom / "db.sqlite") as b:
        q = "SELECT count(*) FROM gpuprov_bill_charge WHERE zone IS NOT NULL"
        assert a.execute(q).fetchone() == b.execute(q).fetchone()


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    assert "not a regular file" in _one_line(_run(tmp_path, "bill", "import", str(fifo), timeout=20))


def test_a_gzip_bill_still_imports(tmp_path: Path) -> None:
    r = _run(tmp_path, "bill", "import", _write(tmp_path, "s.csv.gz", gzip.compress(SAMPLE.read_bytes())))
    assert r.returncode == 0, r.stderr
    assert _charges(tmp_path) > 0


THROUGHPUT_HEADER = "gpu,model,precision,tensor_parallel,input_tokens,output_tokens,tokens_per_s_per_gpu,source\n"


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ("L4,llama-3.1-70b,fp8,8,128,2048,1e-30,x", "tokens_per_s_per_gpu"),
        ("L4,llama-3.1-70b,fp8,8,128,2048,0." + "0" * 5000 + "1,x", "tokens_per_s_per_gpu"),
        ("L4,llama-3.1-70b,fp8,8,128,2048,1e-999999999,x", "tokens_per_s_per_gpu"),
        ("L4," + "m" * 900_000 + ",fp8,8,128,2048,150,x", "not CSV"),
    ],
)
def test_a_hostile_throughput_row_is_one_line(tmp_path: Path, row: str, words: str) -> None:
    path = _write(tmp_path, "tp.csv", THROUGHPUT_HEADER + row + "\n")
    line = _one_line(_run(tmp_path, "plan", "--policy", "serve-day-night", "--throughput", path))
    assert words in line and "tp.csv" in line, line
