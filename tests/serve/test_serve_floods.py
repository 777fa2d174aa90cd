"""``minds serve`` under connection floods: idle sockets, sockets that reconnect as fast as they are dropped, and
slow sockets in a process with few file descriptors never lock other clients out (issue 40).

Each flood comes from this process, on 127.0.0.1 like the client it must not lock out: room is kept for new
clients by closing the connections that have waited longest for their request, not by telling addresses apart."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from minds_core.http.limits import ServeLimits

from .conftest import KEY, Served, start_server
from .flood import Flood

pytestmark = pytest.mark.slow

FLOOD = 600
HEALTHZ = "/api/v1/healthz"


def _address(served: Served) -> tuple[str, int]:
    parts = urlsplit(served.url)
    return str(parts.hostname), int(parts.port or 0)


def _served_anew(served: Served, times: int = 5) -> None:
    """``times`` requests, each on a new connection (a new client), all answered: a refused key too, 401 in JSON."""
    for _ in range(times):
        assert httpx.get(served.url + HEALTHZ, headers={"X-API-Key": KEY}, timeout=30).json() == {"status": "ok"}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server with its defaults, whose one key is ``KEY``."""
    server = start_server(tmp_path_factory.mktemp("keyed"), "--model", "minds-tiny", "--api-key", KEY)
    yield server
    assert server.stop() == 0


def test_600_idle_connections_do_not_lock_other_clients_out(keyed: Served) -> None:
    with Flood(_address(keyed), FLOOD) as flood:
        _served_anew(keyed)
        answer = httpx.get(keyed.url + HEALTHZ, headers={"X-API-Key": "tml-wrong"}, timeout=30)
        assert answer.status_code == 401 and "Invalid API key" in answer.json()["detail"]
    # one address holds at most its bound: the server closed the rest, longest-waiting first
    assert flood.dropped >= FLOOD - ServeLimits().max_connections_per_address


def test_connections_reconnecting_as_fast_as_they_are_dropped_do_not_lock_other_clients_out(keyed: Served) -> None:
    with Flood(_address(keyed), FLOOD, reconnect=True) as flood:
        _served_anew(keyed)
    assert flood.dropped > 0


def test_an_idle_connection_is_closed_long_before_the_read_timeout(keyed: Served) -> None:
    limits = ServeLimits()
    with socket.create_connection(_address(keyed), timeout=limits.read_timeout_seconds / 2) as conn:
        began = time.monotonic()
        assert conn.recv(4096) == b""  # closed by the server at its header timeout, not at the read timeout
    assert time.monotonic() - began < limits.read_timeout_seconds / 2


def test_a_kept_alive_connection_is_closed_after_its_requests(keyed: Served) -> None:
    bound = ServeLimits().max_requests_per_connection
    with httpx.Client(base_url=keyed.url, headers={"X-API-Key": KEY}, timeout=30) as client:
        answers = [client.get(HEALTHZ) for _ in range(bound)]
    assert all(answer.status_code == 200 for answer in answers)
    assert [answer.headers.get("Connection") for answer in answers].count("close") == 1
    assert answers[-1].headers["Connection"] == "close"


@pytest.fixture(scope="module")
def few_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server started under ``ulimit -n 256``."""
    server = start_server(tmp_path_factory.mktemp("few_files"), "--model", "minds-tiny", open_files=256)
    yield server
    assert server.stop() == 0


def test_with_256_open_files_slow_sockets_do_not_stop_it_answering_new_clients(few_files: Served) -> None:
    opening = b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nX-Slow: "
    with Flood(_address(few_files), 300, opening=opening, drip=True, reconnect=True) as flood:
        _served_anew(few_files)
    assert flood.dropped > 0
    assert few_files.process.poll() is None


def test_connections_reset_mid_request_line_leave_no_traceback_in_the_log(tmp_path) -> None:
    # socketserver printed a traceback for each connection a client reset while its request line was read
    server = start_server(tmp_path, "--model", "minds-tiny", "--api-key", KEY)
    try:
        for _ in range(20):
            with socket.create_connection(_address(server), timeout=10) as conn:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
                conn.sendall(b"GET /api/v1/hea")
                time.sleep(0.01)
        _served_anew(server)
    finally:
        assert server.stop() == 0
    stderr = server.process.stderr.read()
    assert "Traceback" not in stderr and "reset" not in stderr, stderr[-2000:]
