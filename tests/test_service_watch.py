"""ServiceWatch: a service that stops answering ends every wait on it within tinker.unreachable_timeout."""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from minds_core.backends.connection import ServiceWatch
from minds_core.backends.retry import Backoff, ServiceCallError, ServiceLost, call_service


class _Answers(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: object) -> None:
        """Quiet."""


@pytest.mark.slow
def test_a_service_that_stops_answering_fails_the_request_waiting_on_it():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    async def run() -> tuple[float, ServiceCallError]:
        watch = ServiceWatch.start(url, "tml-watch-test", unreachable_after=0.3)
        backoff = Backoff(watch=watch)
        try:
            await asyncio.sleep(0.5)
            assert watch.lost is None  # it answers: nothing is lost while requests take their time
            assert await call_service("step 0", "optim_step", lambda: asyncio.sleep(0.2, "done"), backoff) == ("done", 1)
            server.shutdown()
            server.server_close()
            began = time.monotonic()
            with pytest.raises(ServiceCallError) as failed:
                await call_service("step 1", "forward_backward", lambda: asyncio.sleep(3600), backoff)  # a request the SDK retries on
            return time.monotonic() - began, failed.value
        finally:
            watch.stop()

    seconds, error = asyncio.run(run())
    assert seconds < 1.5
    assert isinstance(error.error, ServiceLost)
    assert str(error).startswith(f"step 1: forward_backward got no answer (ServiceLost: the service at {url} has not answered for")
    assert "tml-watch-test" not in str(error)
