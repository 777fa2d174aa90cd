"""The run's own local service served over the Tinker protocol, on a thread of the run's process.

A rollout executor whose workers live in other processes (or on other machines) samples through
this: the workers' Tinker SDK talks to the run's local engine as it would to ``minds serve``.
Only requests with ``api_key`` are answered.
"""

from __future__ import annotations

import threading
from typing import Any

from minds_core.base.errors import UsageError
from minds_core.http.limits import ServeLimits

__all__ = ["BackgroundServer", "serve_in_background"]


class BackgroundServer:
    """A Tinker API server over an open local service; ``close()`` stops it (the service stays open)."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        host, port = server.server_address[:2]
        self.url = f"http://{host}:{port}"  #: where workers reach it

    def keep_samplers(self, count: int) -> None:
        """Keep up to ``count`` sampling sessions from now on (see ``serve_in_background``'s ``max_samplers``)."""
        self._server.engine.keep_samplers(count)

    def close(self) -> None:
        """Stop accepting requests and wait for the serving thread (requests in flight are abandoned)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_in_background(
    service: Any, models: list[str], host: str, api_key: str, port: int = 0, max_samplers: int | None = None
) -> BackgroundServer:
    """Serve the local ``service`` (a ``minds_core.backends.local.ServiceClient``) on ``host:port``.

    :param models: the base models clients may sample (the run's).
    :param api_key: the one key requests must send.
    :param port: 0 = a free port the system picks.
    :param max_samplers: the most sampling sessions kept, the least recently used dropped past it (None: as
        ``minds serve`` keeps, ``--max-samplers``); a pool of workers that each keep a few gives their sum.
    """
    from minds_core.backends.local import ServiceClient

    if not isinstance(service, ServiceClient):
        raise UsageError(f"only the local backend's service can be served here, not a {type(service).__name__}")
    from .engine import Engine
    from .http import TinkerServer
    from .listener import listen
    from .samplers import SamplerBudget

    limits = ServeLimits()
    budget = SamplerBudget() if max_samplers is None else SamplerBudget(max_samplers=max_samplers)
    try:
        server = TinkerServer(listen(host, port, limits.backlog), Engine(service, models, limits, budget), (api_key,), limits)
    except OSError as exc:
        raise UsageError(f"cannot serve the run's engine for the workers on {host}:{port}: {exc}") from None
    thread = threading.Thread(target=server.serve_forever, name="minds-serve-workers", daemon=True)
    thread.start()
    return BackgroundServer(server, thread)
