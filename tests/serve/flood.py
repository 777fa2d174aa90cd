"""Connection floods, as an attacker (or a careless client) makes them, for the tests and ``benchmarks/serve_floods.py``."""

from __future__ import annotations

import select
import socket
import threading
import time

__all__ = ["Flood"]


class Flood:
    """``count`` connections to ``address`` held by one thread. Each sends ``opening`` (nothing by default); with
    ``drip``, one more byte a second (a slow client: never silent, never done); with ``reconnect``, one the server
    closes is opened again at once. ``dropped`` counts the connections the server closed."""

    def __init__(
        self, address: tuple[str, int], count: int, opening: bytes = b"", drip: bool = False, reconnect: bool = False
    ) -> None:
        self.address, self.count, self.opening, self.drip, self.reconnect = address, count, opening, drip, reconnect
        self.opened = self.dropped = 0
        self._sockets: set[socket.socket] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        deadline = time.monotonic() + 120
        while self.opened < self.count and time.monotonic() < deadline:  # a hang guard
            time.sleep(0.1)
        assert self.opened >= self.count, f"only {self.opened} of {self.count} flood connections could be opened"
        time.sleep(1.0)  # the server has accepted what it will
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for conn in self._sockets:
            conn.close()

    def _open(self) -> None:
        try:
            conn = socket.create_connection(self.address, timeout=5)
            conn.sendall(self.opening)
        except OSError:
            return
        conn.setblocking(False)
        self._sockets.add(conn)
        self.opened += 1

    def _close(self, conn: socket.socket) -> None:
        conn.close()
        self._sockets.discard(conn)
        self.dropped += 1

    def _run(self) -> None:
        last_drip = time.monotonic()
        while not self._stop.is_set():
            while (self.opened < self.count or self.reconnect) and len(self._sockets) < self.count and not self._stop.is_set():
                self._open()
            readable = select.select(list(self._sockets), [], [], 0.2)[0] if self._sockets else []
            for conn in readable:  # a flood connection only ever reads the server closing it
                try:
                    conn.recv(65536)
                except OSError:
                    pass
                self._close(conn)
            if self.drip and time.monotonic() - last_drip >= 1.0:
                last_drip = time.monotonic()
                for conn in list(self._sockets):
                    try:
                        conn.send(b"a")
                    except OSError:
                        self._close(conn)
