"""Serve ORS environments in-process (uvicorn on a background loop, 127.0.0.1, a free port): for tests and local work.

    with serve([MyEnv]) as url:
        ...  # [env.args] base_url = url, name = "myenv"
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from minds_core import background_loop

_START_TIMEOUT = 20.0


@contextmanager
def serve(environments: Sequence[type], wrap: Callable[[Any], Any] | None = None) -> Iterator[str]:
    """Run ``openreward.environments.Server(environments)`` until the block ends; yields its base URL.

    ``wrap`` may put ASGI middleware around the server's app.
    """
    from openreward.environments import Server

    app = Server(list(environments)).app
    with serve_app(wrap(app) if wrap else app) as url:
        yield url


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Run any ASGI app on 127.0.0.1 (a free port) until the block ends; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    running = asyncio.run_coroutine_threadsafe(server.serve(), _serving_loop())
    deadline = time.monotonic() + _START_TIMEOUT
    while not server.started:
        if running.done() or time.monotonic() > deadline:
            running.result(timeout=0)  # raises what stopped it
            raise RuntimeError("the local server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        running.result(timeout=_START_TIMEOUT)


def _serving_loop() -> asyncio.AbstractEventLoop:
    """The one event loop (in a daemon thread) that runs every server of this process.

    sse-starlette keeps a process-wide exit event that binds to the first loop
    waiting on it, so servers on different loops would break each other's streams.
    """
    return background_loop("minds-openreward-servers")
