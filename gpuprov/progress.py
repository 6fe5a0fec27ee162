"""Progress on a terminal, never on a pipe or a file (so that what a script reads is never
interleaved with it): one stderr line rewritten in place.

- ``Line``: a line a caller rewrites (apply's launches and terminations, backtest's steps).
- ``on_terminal``: solver progress while ``plan`` (and what solves through it) runs over 2 s:
  elapsed seconds, the stage, the best plan's objective and the bound proven so far.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

SHOW_AFTER_S = 2.0


class Line:
    """``update(text)`` at most ``rate`` times a second; ``close()`` clears it. Thread-safe (the
    launches of an apply report from several threads)."""

    def __init__(self, stream: TextIO | None = None, rate: float = 4.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.live = _is_terminal(self.stream)
        self._every = 1.0 / rate
        self._last = 0.0
        self._shown = False
        self._lock = threading.Lock()

    def update(self, text: str, force: bool = False) -> None:
        if not self.live:
            return
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last < self._every:
                return
            self._last = now
            self.stream.write("\r\x1b[K" + text[:200])
            self.stream.flush()
            self._shown = True

    def close(self) -> None:
        if self.live and self._shown:
            with self._lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._shown = False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class SolverLine:
    def __init__(self, out: TextIO, started: float) -> None:
        self.out, self.started = out, started
        self.stage, self.incumbent, self.bound = "preparing", None, None  # type: tuple[str, float | None, float | None]
        self.shown = False
        self.lock = threading.Lock()
        self.done = threading.Event()

    def update(self, stage: str, incumbent: float | None, bound: float | None) -> None:
        with self.lock:
            self.stage = stage
            if incumbent is not None:
                self.incumbent = incumbent
            if bound is not None:
                self.bound = bound

    def text(self) -> str:
        elapsed = time.monotonic() - self.started
        parts = [f"planning: {elapsed:5.1f} s", self.stage]
        if self.incumbent is not None:
            parts.append(f"best ${self.incumbent:,.2f}")
        if self.bound is not None:
            parts.append(f"bound ${self.bound:,.2f}")
            if self.incumbent:
                parts.append(f"gap {max(0.0, (self.incumbent - self.bound) / self.incumbent):.2%}")
        return ", ".join(parts) + " (objective over the horizon, USD)"

    def tick(self) -> None:
        while not self.done.wait(0.25):
            if time.monotonic() - self.started < SHOW_AFTER_S:
                continue
            with self.lock:
                self.out.write("\r\033[K" + self.text())
                self.out.flush()
                self.shown = True

    def close(self) -> None:
        self.done.set()
        with self.lock:
            if self.shown:
                self.out.write("\r\033[K")
                self.out.flush()


@contextmanager
def on_terminal(started: float, out: TextIO | None = None) -> Iterator[SolverLine | None]:
    """Show solver progress on ``out`` (stderr) while the block runs, when it is a terminal."""
    from gpuprov.optimizer import cbc

    stream = out if out is not None else sys.stderr
    if not stream.isatty():
        yield None
        return
    line = SolverLine(stream, started)
    token = cbc.progress.set(line.update)
    thread = threading.Thread(target=line.tick, daemon=True)
    thread.start()
    try:
        yield line
    finally:
        line.close()
        thread.join(timeout=1)
        cbc.progress.reset(token)
