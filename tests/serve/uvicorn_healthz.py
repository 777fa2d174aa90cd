"""The comparison server of ``benchmarks/serve_floods.py``: uvicorn answering ``minds serve``'s
``GET /api/v1/healthz`` (key checked the same way), with the bounds uvicorn documents set as close to ``minds serve``'s
as they go: ``limit_concurrency`` 512 (``--max-connections``), ``timeout_keep_alive`` 10 s (``--header-timeout-seconds``),
``backlog`` 128. It has no per-address bound and no header timeout to set. Prints ``{"url": ...}`` once listening, as
``minds serve`` does.

Run: ``python tests/serve/uvicorn_healthz.py KEY [--defaults]`` (the benchmark starts it; port 0, 127.0.0.1;
``--defaults``: uvicorn's own settings, unbounded concurrency, instead of the bounds above)."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

HEALTHZ = "/api/v1/healthz"


def app_for(key: str) -> Callable[..., Awaitable[None]]:
    """A bare ASGI app: 200 ``{"status": "ok"}`` for the healthz path with the key, 401 without it, else 404."""
    wanted = key.encode()

    async def app(scope: dict[str, Any], receive: Callable[..., Awaitable[Any]], send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])
        if scope["path"] != HEALTHZ:
            status, body = 404, {"detail": "not found"}
        elif headers.get(b"x-api-key") != wanted:
            status, body = 401, {"detail": "a valid X-API-Key is required"}
        else:
            status, body = 200, {"status": "ok"}
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    return app


def main() -> None:
    key, bounded = sys.argv[1], sys.argv[2:] != ["--defaults"]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    bounds: dict[str, Any] = {"limit_concurrency": 512, "timeout_keep_alive": 10, "backlog": 128} if bounded else {}
    config = uvicorn.Config(app_for(key), log_level="warning", access_log=False, **bounds)
    server = uvicorn.Server(config)
    print(json.dumps({"url": f"http://127.0.0.1:{listener.getsockname()[1]}"}), flush=True)
    server.run(sockets=[listener])


if __name__ == "__main__":
    main()
