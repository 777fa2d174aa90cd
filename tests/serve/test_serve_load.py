"""``minds serve`` under load and at its edges: many connections at once, silent connections, file
descriptors run out, SIGTERM while samples run, and a refusal to listen off loopback without a key."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from tinker import types

from .conftest import KEY, Served, start_server

pytestmark = pytest.mark.slow

READ_TIMEOUT = 10


def _address(served: Served) -> tuple[str, int]:
    parts = urlsplit(served.url)
    return str(parts.hostname), int(parts.port or 0)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_64_clients_connecting_at_once_are_all_served(served: Served) -> None:
    host, port = _address(served)
    start = threading.Barrier(64)
    answers: list[bytes] = []

    def client() -> None:
        start.wait()
        with socket.create_connection((host, port), timeout=60) as conn:
            conn.sendall(f"GET /api/v1/healthz HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY}\r\n\r\n".encode())
            answers.append(conn.recv(4096))

    threads = [threading.Thread(target=client) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(answers) == 64 and all(answer.startswith(b"HTTP/1.1 200") for answer in answers)
    if shutil.which("ss"):  # the listening socket's backlog, as the system reports it (Send-Q of a listener)
        listing = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
        assert listing.split()[2] == "128", listing


@pytest.fixture(scope="module")
def starved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server with few file descriptors to spend and a short read timeout."""
    server = start_server(
        tmp_path_factory.mktemp("starved"), "--read-timeout-seconds", str(READ_TIMEOUT), "--device", "cpu", open_files=64
    )
    yield server
    assert server.stop() == 0


def test_a_silent_connection_is_closed_after_the_read_timeout(starved: Served) -> None:
    with socket.create_connection(_address(starved), timeout=READ_TIMEOUT * 6) as conn:
        conn.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        began = time.monotonic()
        assert conn.recv(4096) == b""  # closed by the server, with nothing answered to half a request
    assert time.monotonic() - began < READ_TIMEOUT * 6


def test_out_of_file_descriptors_the_server_backs_off_and_keeps_serving(starved: Served) -> None:
    with httpx.Client(base_url=starved.url, headers={"X-API-Key": KEY}, timeout=60) as kept:
        assert kept.get("/api/v1/healthz").status_code == 200  # a connection opened before the flood
        flood = [socket.create_connection(_address(starved), timeout=30) for _ in range(150)]
        try:
            time.sleep(1.0)  # the server has accepted all it can: its descriptors are spent
            before = _cpu_seconds(starved.process.pid)
            time.sleep(3.0)
            spent = _cpu_seconds(starved.process.pid) - before
            assert spent < 1.0, f"the server used {spent:.2f} s of CPU in 3 s while out of descriptors (spinning)"
            assert kept.get("/api/v1/healthz").status_code == 200  # and still answers the clients it has
        finally:
            for conn in flood:
                conn.close()
        deadline = time.monotonic() + 60
        while True:  # descriptors freed: new connections are accepted again
            try:
                assert httpx.get(f"{starved.url}/api/v1/healthz", timeout=10).status_code == 200
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    assert starved.process.poll() is None


def test_sigterm_while_samples_run_stops_the_server_promptly(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--model", "minds-tiny")
    try:
        with httpx.Client(base_url=server.url, headers={"X-API-Key": KEY}, timeout=60) as http:
            for _ in range(4):  # minutes of decoding on a CPU, queued one behind the other
                request = types.SampleRequest(
                    num_samples=8,
                    base_model="minds-tiny",
                    prompt=types.ModelInput.from_ints([5, 6, 7]),
                    sampling_params=types.SamplingParams(max_tokens=4000, stop=[], seed=0),
                )
                assert http.post("/api/v1/asample", json=request.model_dump(mode="json")).status_code == 200
        time.sleep(1.0)
        began = time.monotonic()
        assert server.stop() == 0
        took = time.monotonic() - began
    finally:
        if server.process.poll() is None:
            server.process.kill()
    assert took < 20, f"minds serve took {took:.1f} s to stop after SIGTERM"
    assert "requests still running" in server.process.stderr.read()


def test_off_loopback_without_a_key_it_refuses_to_start(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "MINDS_SERVE_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "minds_core.cli.command", "serve", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--api-key" in done.stderr and "Traceback" not in done.stderr
