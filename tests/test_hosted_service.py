"""The hosted Tinker service failing at start-up: unreachable, a rejected key, Ctrl-C while waiting.

Each case runs ``minds run --backend tinker`` in a subprocess with the real
``tinker`` SDK against 127.0.0.1: a closed port, a socket that never answers,
or ``FakeTinkerService``, a stdlib HTTP server standing in for the hosted
service (which cannot be reached from here) that answers with chosen statuses.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import tinker

from minds_core.backends.tinker import create_tinker_service
from minds_core.config import load_config

KEY = "tml-test-key-do-not-echo"
RUN = ["run", "--env", "toy_char_share", "--backend", "tinker", "--steps", "1"]


class FakeTinkerService(ThreadingHTTPServer):
    """FAKE hosted service: answers the first request to POST /api/v1/client/config with ``first``
    and every later request with ``later``; records (path, X-API-Key) pairs.

    A 200 carries what the SDK needs to start a session (an empty config, a session id).
    """

    daemon_threads = True

    def __init__(self, first: int, later: int = 200) -> None:
        self.first, self.later = first, later
        self.requests: list[tuple[str, str | None]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeTinkerService

    def do_POST(self) -> None:  # the http.server hook name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.requests.append((self.path, self.headers.get("X-API-Key")))
        status = self.server.first if len(self.server.requests) == 1 else self.server.later
        if status != 200:
            body = b'{"detail": "Invalid API key"}'
        elif self.path == "/api/v1/create_session":
            body = b'{"session_id": "fake-session"}'
        else:
            body = b"{}"
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_service(request: pytest.FixtureRequest) -> Iterator[FakeTinkerService]:
    server = FakeTinkerService(*request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environ() -> dict[str, str]:
    return {"TINKER_API_KEY": KEY, "TINKER_BASE_URL": ""}


@pytest.mark.parametrize("fake_service", [(200, 200)], indirect=True)
async def test_a_service_that_answers_gives_the_real_sdk_client_with_its_session_started(fake_service: FakeTinkerService):
    config = load_config(None, ["tinker.api_key=tml-fake", f"tinker.base_url={fake_service.url}/"])
    service = await create_tinker_service(config, None)
    try:
        assert isinstance(service, tinker.ServiceClient)
        paths = [path for path, _ in fake_service.requests]
        assert paths[0] == "/api/v1/client/config"  # minds' probe: the SDK's first request
        assert "/api/v1/create_session" in paths  # then the SDK's own start, already done
        assert {key for _, key in fake_service.requests} == {"tml-fake"}
    finally:
        await service.close("success")


@pytest.mark.slow
def test_an_unreachable_service_fails_within_seconds_with_one_clear_message(run_minds, tmp_path: Path):
    url = f"http://127.0.0.1:{_closed_port()}"
    began = time.monotonic()
    result = run_minds([*RUN, "--set", f"tinker.base_url={url}"], plugins=["toy_plugin"], env=_environ())
    took = time.monotonic() - began
    assert result.returncode == 2, result.stderr
    assert took < 30
    assert f"cannot reach the Tinker service at {url} (from [tinker] base_url)" in result.stderr
    assert "network" in result.stderr and "--backend local" in result.stderr  # what to check
    assert "Traceback" not in result.stderr and KEY not in result.stdout + result.stderr
    assert result.stderr.count("minds: error:") == 1
    assert not (tmp_path / "runs").exists()  # nothing was started


@pytest.mark.slow
@pytest.mark.parametrize("fake_service", [(401, 401), (403, 403)], indirect=True)
def test_a_rejected_key_is_exit_2_with_a_message(run_minds, fake_service: FakeTinkerService, tmp_path: Path):
    result = run_minds([*RUN, "--set", f"tinker.base_url={fake_service.url}"], plugins=["toy_plugin"], env=_environ())
    assert result.returncode == 2, result.stderr
    assert f"the Tinker service at {fake_service.url}" in result.stderr
    assert f"rejected the API key from $TINKER_API_KEY (HTTP {fake_service.first}" in result.stderr
    assert "Traceback" not in result.stderr and KEY not in result.stdout + result.stderr
    assert fake_service.requests == [("/api/v1/client/config", KEY)]  # the SDK's first request, sent once
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("fake_service", [(200, 401)], indirect=True)
def test_a_key_rejected_once_the_sdk_starts_its_session_is_exit_2_with_a_message(run_minds, fake_service, tmp_path):
    result = run_minds([*RUN, "--set", f"tinker.base_url={fake_service.url}"], plugins=["toy_plugin"], env=_environ())
    assert result.returncode == 2, result.stderr
    assert "rejected the API key from $TINKER_API_KEY (AuthenticationError" in result.stderr
    assert "Traceback" not in result.stderr and KEY not in result.stdout + result.stderr
    assert len(fake_service.requests) > 1  # the real SDK asked, after the probe
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("fake_service", [(404, 404)], indirect=True)
def test_a_url_that_is_not_the_tinker_api_says_so(run_minds, fake_service: FakeTinkerService):
    result = run_minds([*RUN], plugins=["toy_plugin"], env={"TINKER_API_KEY": KEY, "TINKER_BASE_URL": fake_service.url})
    assert result.returncode == 2, result.stderr
    assert f"{fake_service.url} (from $TINKER_BASE_URL) does not serve the Tinker API (HTTP 404" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_ctrl_c_while_the_service_does_not_answer_stops_at_once(installed_plugin, tmp_path: Path):
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ.update(_environ(), PYTHONPATH=str(installed_plugin("toy_plugin")))
    process = subprocess.Popen(
        [sys.executable, "-m", "minds_core.cli.command", *RUN, "--set", f"tinker.base_url={url}"],
        cwd=tmp_path, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        silent.settimeout(60)
        connection, _ = silent.accept()  # the probe is waiting for an answer now
        process.send_signal(signal.SIGINT)
        began = time.monotonic()
        _, stderr = process.communicate(timeout=300)  # a hang guard
        assert time.monotonic() - began < 5
        assert process.returncode == 130, stderr
        assert "minds: interrupted" in stderr and "Traceback" not in stderr
        connection.close()
    finally:
        process.kill()
        silent.close()
