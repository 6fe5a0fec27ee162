"""Loopback endpoints that fail the way networks fail: refused (nothing listens on the port),
hung (accepts the connection, reads, never answers) and garbage (answers every request, a
proxy's CONNECT included, with an HTTP 200 whose body is not what any API sends)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

GARBAGE = b"\x00\xff<<garbage: not XML, not JSON>>\r\n" * 4


def refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(0.5)
        try:
            conn.recv(65536)
        except OSError:
            pass
        if self.kind == "hung":
            self._stop.wait()  # say nothing until the test ends
            return
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(GARBAGE)
        try:
            conn.sendall(head + GARBAGE)
            while not self._stop.is_set():  # a proxy tunnel: whatever comes next gets garbage too
                data = conn.recv(65536)
                if not data:
                    break
                conn.sendall(GARBAGE)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        for c in self._open:
            try:
                c.close()
            except OSError:
                pass
        self.sock.close()


@contextmanager
def endpoint(kind: str) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` that is refused, hung or answers garbage."""
    if kind == "refused":
        yield f"http://127.0.0.1:{refused_port()}"
        return
    server = _Server(kind)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.close()
