"""What ``minds serve`` tells a scraper (``GET /metrics``, Prometheus' text format) and its per-session traces.

Independent of the HTTP server underneath: the server calls ``ServeMetrics.track`` around each
request (in flight, then its route, status and seconds recorded), ``answer`` for ``/metrics``,
and ``open_to`` to let a scraper on this machine read it without a key. docs/observability.md
lists every metric.

Each request is also a span (``<METHOD> <route>``) in the trace of the session it belongs to
(``<checkpoint root>/traces/<session id>.json``, requests of no session in ``server.json``), in the
trace-event format of a run's ``trace.json``: timestamps are wall-clock, so a served run's
timeline loads beside the client run's.
"""

from __future__ import annotations

import collections
import contextlib
import ipaddress
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from minds_core.base.tracing import TRACE_CAP_BYTES, TraceFile, Tracer, memory_bytes, record

#: the path a scraper reads
METRICS_PATH = "/metrics"
#: statuses that count as refusals (``minds_serve_refusals_total``): too large, too many pending, overloaded
REFUSALS = {413: "too_large", 429: "too_many_pending", 503: "unavailable"}
#: latency buckets (seconds): from a health check to a long forward_backward
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: session trace files kept open at once
OPEN_TRACES = 32
#: ids a request body names its session by: a session, a training run (model), a sampling session (``<session>:sample:<n>``)
#: The body keys that name what a request belongs to, each resolved to its session by the engine.
_SESSION_KEYS = ("session_id", "model_id", "sampling_session_id")


class EngineLoad(Protocol):
    """What the served engine reports of its load (``Engine.load``)."""

    def load(self) -> dict[str, float]:
        """``sessions``, ``runs``, ``samplers``, ``sampler_bytes``, ``queue_depth``, ``tokens_sampled``, ``tokens_trained``."""

    def session_of(self, key: str, value: str) -> str | None:
        """The session a request's ``session_id``, ``model_id`` or ``sampling_session_id`` belongs to."""


class ServeMetrics:
    """The counters of one server, in a registry of its own; ``engine`` (None: a policy endpoint) reports its load.

    ``routes``: the server's route patterns (regular expressions), so that a request is counted under its
    route, not its path (ids in paths would grow the metric without bound); other paths count as ``other``.
    ``traces``: the folder of per-session traces (None: none are written).
    """

    def __init__(self, routes: Sequence[str], engine: EngineLoad | None = None, traces: Path | None = None) -> None:
        self.engine = engine
        self._routes = [(route, re.compile(f"^{route}$")) for route in routes]
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "minds_serve_requests", "Requests answered, by route and status", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "minds_serve_request_seconds",
            "Seconds from a request's start to its answer",
            ["route"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "minds_serve_in_flight_requests", "Requests being read, handled or answered now", registry=self.registry
        )
        self.refusals = Counter(
            "minds_serve_refusals", "Requests refused for the server's limits, by reason", ["reason"], registry=self.registry
        )
        self.registry.register(_Load(self))
        self.traces = SessionTraces(traces) if traces is not None else None

    def route(self, method: str, path: str) -> str:
        """The route ``path`` is served by (its pattern), ``other`` when none."""
        for route, pattern in self._routes:
            if pattern.match(path):
                return f"{method} {route}"
        return "other"

    @contextlib.contextmanager
    def track(self, method: str, path: str, status: Callable[[], int], body: Callable[[], Mapping[str, Any] | None]) -> Iterator[None]:
        """Count the request handled in the block: in flight while it runs, then its route, ``status()`` and seconds;
        a span in its session's trace (the session named in ``body()``, the JSON body the route parsed, if any)."""
        began = time.perf_counter_ns()
        self.in_flight.inc()
        try:
            yield
        finally:
            self.in_flight.dec()
            self.record(method, path, status(), (time.perf_counter_ns() - began) / 1e9)
            if self.traces is not None:
                self.traces.request(self.route(method, path), status(), self.session_of(body()), began)

    def record(self, method: str, path: str, status: int, seconds: float) -> None:
        """One answered request: counted under its route and status, its latency observed, a refusal counted."""
        route = self.route(method, path)
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if status in REFUSALS:
            self.refusals.labels(REFUSALS[status]).inc()

    def session_of(self, body: Mapping[str, Any] | None) -> str | None:
        """The session a parsed request body names (None: none, no body, or no engine)."""
        if self.engine is None or not body:
            return None
        for key in _SESSION_KEYS:
            value = body.get(key)
            if isinstance(value, str) and value:
                return self.engine.session_of(key, value[:200])
        return None

    def answer(self) -> tuple[int, bytes, str]:
        """``GET /metrics``: status, body and content type."""
        return 200, generate_latest(self.registry), CONTENT_TYPE_LATEST

    @staticmethod
    def open_to(path: str, address: Any) -> bool:
        """Whether ``path`` may be read without a key from ``address``: ``/metrics``, from this machine (loopback)."""
        if path != METRICS_PATH:
            return False
        try:
            return ipaddress.ip_address(str(address[0])).is_loopback
        except (ValueError, IndexError, TypeError):
            return False


class _Load:
    """The engine's load and this process's memory, read at each scrape."""

    def __init__(self, metrics: ServeMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        load = self.metrics.engine.load() if self.metrics.engine is not None else {}
        described = {
            "sessions": "Sessions open",
            "runs": "Training runs held (each a trainable adapter)",
            "samplers": "Sampling sessions held",
            "sampler_bytes": "Bytes of memory the held sampling sessions hold of their own",
            "queue_depth": "Requests started and not yet finished (queued or running)",
        }
        for key, doc in described.items():
            if key in load:
                yield GaugeMetricFamily(f"minds_serve_{key}", doc, value=load[key])
        for key in ("tokens_sampled", "tokens_trained"):  # counters as totals: rate() gives tokens per second
            if key in load:
                family = GaugeMetricFamily(
                    f"minds_serve_{key}_total", f"Tokens {key.split('_')[1]} since the server started (rate() gives per second)"
                )
                family.add_metric([], load[key])
                yield family
        memory = GaugeMetricFamily("minds_serve_memory_bytes", "Memory of the server process, by kind", labels=["kind"])
        for kind, value in memory_bytes().items():
            memory.add_metric([kind], value)
        yield memory


class SessionTraces:
    """One trace-event file per served session under ``folder`` (``<session>.json``; ``server.json``: no session);
    the files of the ``OPEN_TRACES`` sessions last traced stay open, the others are closed until their next request."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._tracers: collections.OrderedDict[str, Tracer] = collections.OrderedDict()
        self._lock = threading.Lock()

    def request(self, route: str, status: int, session: str | None, began_ns: int) -> None:
        name = session or "server"
        with self._lock:
            tracer = self._tracers.get(name)
            if tracer is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120]
                tracer = self._tracers[name] = Tracer(
                    [TraceFile(self.folder / f"{safe}.json", TRACE_CAP_BYTES)], f"minds serve {name}"
                )
            self._tracers.move_to_end(name)
            for older in list(self._tracers.values())[:-OPEN_TRACES]:
                older.suspend()
        record(tracer, route, None, began_ns, time.perf_counter_ns(), status=status, session=name)

    def close(self) -> None:
        with self._lock:
            for tracer in self._tracers.values():
                tracer.shutdown()
            self._tracers.clear()
