"""A run's policy endpoint: the inference routes on loopback, answering each episode's key with its policy.

``PolicyEndpoint.start()`` listens on 127.0.0.1 (a free port) in a thread of the run's process; each
episode gets its own key (``open``) and the base URLs its program is given (``openai_url``,
``anthropic_url``). Only keys of open episodes are served: any other request is refused (401) in the
protocol's error shape, and every answered call is recorded by ``capture``.
"""

from __future__ import annotations

import threading

from minds_core.http.limits import ServeLimits
from minds_core.inference.capture import Capture
from minds_core.inference.surface import Surface

from .http import HttpServer
from .listener import listen

__all__ = ["PolicyEndpoint"]


class _PolicyServer(HttpServer):
    def __init__(self, capture: Capture, limits: ServeLimits) -> None:
        self.capture = capture
        super().__init__(listen("127.0.0.1", 0, limits.backlog), (), limits, Surface(capture, limits, capture.record))

    def authorized(self, key: str) -> bool:
        return self.capture.knows(key)


class PolicyEndpoint:
    """The inference routes over ``capture`` on 127.0.0.1; ``start`` before the first episode, ``close`` at the end."""

    def __init__(self, capture: Capture | None = None, limits: ServeLimits | None = None) -> None:
        self.capture = capture or Capture()
        self.limits = limits or ServeLimits()
        self._server: _PolicyServer | None = None
        self._lock = threading.Lock()

    def start(self) -> str:
        """Listen (once; later calls return the same URL): the endpoint's root URL."""
        with self._lock:
            if self._server is None:
                self._server = _PolicyServer(self.capture, self.limits)
                threading.Thread(target=self._server.serve_forever, name="minds-policy-endpoint", daemon=True).start()
            host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        """What ``OPENAI_BASE_URL`` is set to (the SDK appends ``/chat/completions``)."""
        return f"{self.start()}/v1"

    @property
    def anthropic_url(self) -> str:
        """What ``ANTHROPIC_BASE_URL`` is set to (the SDK appends ``/v1/messages``)."""
        return self.start()

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
