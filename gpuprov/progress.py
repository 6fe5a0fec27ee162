"""One line of progress on a terminal (stderr), rewritten in place; nothing at all on a pipe or
a file, so that what a script reads is never interleaved with it."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


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
