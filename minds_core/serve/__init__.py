"""``minds serve``: the local backend as an HTTP server speaking the Tinker API (SDK 0.38).

Unmodified ``tinker`` SDK code pointed at it (``TINKER_BASE_URL`` or ``base_url=``, any
``tml-`` key) trains and samples on this machine::

    minds serve --port 8000
    TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=tml-local python my_tinker_script.py

``minds serve`` listens before it loads a model: a taken port fails at once (exit 2, one line naming
it). ``serve`` blocks until SIGTERM or Ctrl-C, then stops accepting requests, gives requests
already running ``SHUTDOWN_GRACE_SECONDS`` to finish and exits (abandoning any still running).
The same server answers OpenAI (``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``),
Anthropic (``/v1/messages``, ``/v1/messages/count_tokens``) and token-level
(``/inference/v1/generate``) requests over its base models and its clients' ``tinker://``
sampler paths (``minds_core.inference``; ``served_models``).

On start it prints one JSON line, ``{"url": ..., "host": ..., "port": ...}``
(with ``--port 0`` the port is a free one the system picked).

What clients may ask is bounded by ``ServeLimits`` (``limits``); the sampling clients kept,
by ``SamplerBudget`` (``samplers``); each client (API key) sees only what it created
(``owners``). Off loopback, ``minds serve`` refuses to start without
``--api-key``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from minds_core.base.errors import UsageError
from minds_core.http.limits import ServeLimits

from .samplers import SamplerBudget

__all__ = ["LOOPBACK_HOSTS", "SamplerBudget", "ServeLimits", "check_exposure", "serve"]

#: Hosts only this machine can reach: the only ones ``minds serve`` listens on without an API key.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
#: Seconds requests still running at SIGTERM/Ctrl-C get to finish before the process exits without them.
SHUTDOWN_GRACE_SECONDS = 3.0

SWITCH_INTERVAL_SECONDS = 0.001
"""How long a thread holding the interpreter runs before one waiting for it gets a turn, while
serving (Python's default: 5 ms). The server's handler threads answer requests while the local
backend's workers compute in Python between torch ops; at 5 ms a handler could wait that long for
each turn. Measured with ``benchmarks/serve_overhead.py`` (a noisy 2-core machine): the median
training-phase overhead of a served step was 25 ms over 3 runs at 5 ms, 12 ms over 5 runs at 1 ms."""


def check_exposure(host: str, api_keys: tuple[str, ...]) -> None:
    """Refuse (``UsageError``) to listen on ``host`` without ``api_keys`` unless only this machine can reach it."""
    if not api_keys and host not in LOOPBACK_HOSTS:
        raise UsageError(
            f"--host {host}: off loopback, minds serve needs an API key, or anyone who can reach it trains "
            "and samples here; give --api-key KEY (or set MINDS_SERVE_API_KEY), or use --host 127.0.0.1"
        )


def serve(
    listener: socket.socket,
    models: list[str],
    api_keys: tuple[str, ...] = (),
    checkpoint_root: Path | None = None,
    device: str = "auto",
    limits: ServeLimits | None = None,
    budget: SamplerBudget | None = None,
    cuda_graphs: str = "auto",
    compile: str = "auto",
) -> None:
    """Load ``models`` on ``device`` (``cuda_graphs``, ``compile``: the local backend's switches) and serve on
    ``listener`` (``listener.listen``, bound before the models load, so that a taken port fails at once) until
    SIGTERM/SIGINT.

    ``api_keys``: when given, each request must send one of them (each key is its own client); off loopback
    ``check_exposure`` requires them. ``budget``: the sampling clients kept (its memory default measured once the
    models are loaded)."""
    limits = limits or ServeLimits()
    from minds_core.backends.local import ServiceClient

    from .engine import Engine
    from .http import TinkerServer

    service = ServiceClient(checkpoint_root=checkpoint_root, device=device, cuda_graphs=cuda_graphs, compile=compile)
    try:
        for model in models:  # load now: a wrong name fails here, and the first request is not slow
            service.create_sampling_client(base_model=model).result()
        engine = Engine(service, models, limits, budget)
        server = TinkerServer(listener, engine, api_keys, limits)
    except BaseException:
        service.close("errored")
        listener.close()
        raise
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    thread = threading.Thread(target=server.serve_forever, name="minds-serve", daemon=True)
    thread.start()
    bound_host, bound_port = server.server_address[:2]
    named = f"[{bound_host}]" if ":" in bound_host else bound_host  # an IPv6 address, bracketed in a URL
    print(json.dumps({"url": f"http://{named}:{bound_port}", "host": bound_host, "port": bound_port}), flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        finished = engine.wait_idle(SHUTDOWN_GRACE_SECONDS)
        service.close("success")
        sys.setswitchinterval(switch_interval)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if finished:
            print("minds serve: stopped", file=sys.stderr, flush=True)
        else:
            # the local backend's workers cannot be interrupted mid-request, and the interpreter would wait
            # for them at exit: leave now, as the clients were told by the closed connections
            print(
                f"minds serve: stopped; requests still running after {SHUTDOWN_GRACE_SECONDS:g} s were abandoned",
                file=sys.stderr,
                flush=True,
            )
            sys.stdout.flush()
            os._exit(0)
