"""Spans and counters: where a run's (or a served session's) time goes.

A span times one piece of work (a step, an episode, a sampling request, a reward
function) and links to the span it ran inside. ``span(name, **attrs)`` is the
one call, for the core and plugins alike (``from minds_core import span``)::

    with span("retrieve", index="wiki"):
        ...

The active tracer and the open span live in context variables, so spans nest across
asyncio tasks (a task copies its creator's context) and cost one lookup when no
tracer is active. A tracer hands every finished span and counter to its sinks:
``TraceFile`` (``runs/<name>/trace.json``, the Chrome/Perfetto trace-event
format, written event by event and capped) and, with the ``otel`` extra,
``OtlpSink`` (OpenTelemetry, to a collector over OTLP/HTTP).

Timestamps are wall-clock microseconds (measured with ``perf_counter`` from a
wall-clock origin), so a run's trace and the trace of the ``minds serve`` it
sampled from line up when loaded together.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol

import attrs

#: the file name of a run's trace (its older part, once it reached its cap: ``trace.1.json``)
TRACE_FILE = "trace.json"
#: seconds a trace file's events may wait in its buffer (a root span's end, e.g. a step's, flushes at once)
FLUSH_SECONDS = 0.25
#: bytes a trace file grows to before it moves to ``trace.1.json`` (one older part is kept: at most twice this)
TRACE_CAP_BYTES = 64 * 1024 * 1024

_ids = itertools.count(1)
#: the track of root spans (steps, served requests) and of the spans inside them that open no track of their own
MAIN_LANE = 0


@attrs.define(eq=False)
class Span:
    """One timed piece of work; open until its tracer ends it."""

    name: str  #: what it times: ``step``, ``episode``, ``sample``, ``<reward> reward``, ``forward_backward``...
    id: int  #: unique in the process
    parent: int | None  #: the id of the span it ran inside (None: a root)
    lane: int  #: the track it is drawn on: its own id when it may overlap its siblings (``lane=True``), else its parent's (a root's: ``MAIN_LANE``)
    start_ns: int  #: ``perf_counter_ns`` when it began
    attrs: dict[str, Any]  #: what it was about (environment, task, step, tokens...), JSON values
    error: str | None = None  #: the error it ended with (an exception's ``Type: message``), None if none

    def set(self, **attrs: Any) -> None:
        """Add or change attributes while the span is open (``error=`` sets its error)."""
        if "error" in attrs:
            self.error = attrs.pop("error")
        self.attrs.update(attrs)


class SpanSink(Protocol):
    """Where a tracer's spans and counters go. Called from any thread, under the tracer's lock."""

    def opened(self, span: Span, tracer: Tracer) -> None:
        """``span`` began (its ``start_ns`` is set)."""

    def closed(self, span: Span, end_ns: int, tracer: Tracer) -> None:
        """``span`` ended at ``end_ns`` (``perf_counter_ns``)."""

    def counted(self, name: str, values: dict[str, float], at_ns: int, tracer: Tracer) -> None:
        """Counter ``name`` took ``values`` at ``at_ns``."""

    def close(self) -> None:
        """No more events: flush and release."""


class Tracer:
    """Hands spans and counters to its sinks; thread-safe. ``wall_us`` turns its clock into epoch microseconds."""

    def __init__(self, sinks: list[SpanSink], process: str = "minds") -> None:
        self.sinks = sinks
        self.process = process  #: the process name the trace shows (``minds run <name>``, ``minds serve``)
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._origin_ns = time.time_ns() - time.perf_counter_ns()
        self._levels: dict[str, float] = {}

    def wall_us(self, perf_ns: int) -> float:
        """Epoch microseconds of a ``perf_counter_ns`` reading."""
        return (self._origin_ns + perf_ns) / 1000

    def wall_ns(self, perf_ns: int) -> int:
        """Epoch nanoseconds of a ``perf_counter_ns`` reading."""
        return self._origin_ns + perf_ns

    def open(
        self, name: str, parent: Span | None, attrs: dict[str, Any], lane: bool = False, start_ns: int | None = None
    ) -> Span:
        sid = next(_ids)
        own_lane = sid if lane else parent.lane if parent is not None else MAIN_LANE
        span = Span(name, sid, parent.id if parent else None, own_lane, start_ns or time.perf_counter_ns(), attrs)
        with self._lock:
            for sink in self.sinks:
                sink.opened(span, self)
        return span

    def close(self, span: Span, end_ns: int | None = None) -> None:
        end = end_ns or time.perf_counter_ns()
        with self._lock:
            for sink in self.sinks:
                sink.closed(span, end, self)

    def adjust(self, name: str, delta: float) -> None:
        """Add ``delta`` to the one-valued counter ``name`` (episodes in flight...) and record its new value."""
        with self._lock:
            value = self._levels[name] = self._levels.get(name, 0.0) + delta
        self.count(name, value=value)

    def count(self, name: str, /, **values: float) -> None:
        """Counter ``name`` now takes ``values`` (drawn as a chart in Perfetto)."""
        at = time.perf_counter_ns()
        with self._lock:
            for sink in self.sinks:
                sink.counted(name, values, at, self)

    def suspend(self) -> None:
        """Close its trace files for now (``TraceFile.suspend``): the next event reopens them."""
        with self._lock:
            for sink in self.sinks:
                if isinstance(sink, TraceFile):
                    sink.suspend()

    def shutdown(self) -> None:
        with self._lock:
            for sink in self.sinks:
                sink.close()
            self.sinks = []


_tracer: ContextVar[Tracer | None] = ContextVar("minds_tracer", default=None)
_current: ContextVar[Span | None] = ContextVar("minds_span", default=None)


def active() -> Tracer | None:
    """The tracer of this context (None: tracing is off here)."""
    return _tracer.get()


def current() -> Span | None:
    """The innermost open span of this context."""
    return _current.get()


@contextlib.contextmanager
def tracing(tracer: Tracer) -> Iterator[Tracer]:
    """Make ``tracer`` the active one in this context (and the tasks it starts); shut it down on leaving."""
    token = _tracer.set(tracer)
    try:
        yield tracer
    finally:
        _tracer.reset(token)
        tracer.shutdown()


@contextlib.contextmanager
def span(name: str, /, *, lane: bool = False, **attrs: Any) -> Iterator[Span | None]:
    """Time the block as a span ``name`` with ``attrs`` (JSON values), inside the current span.

    The one call for plugins too (``minds_core.span``). An exception leaving the block is
    recorded as the span's error (and raised on). ``lane=True`` draws it on a track of its own,
    for work that runs concurrently with its siblings (episodes, groups). Yields the span (None
    when no tracer is active), whose ``set(**attrs)`` adds attributes.
    """
    tracer = _tracer.get()
    if tracer is None:
        yield None
        return
    opened = tracer.open(name, _current.get(), attrs, lane)
    token = _current.set(opened)
    try:
        yield opened
    except BaseException as exc:
        if opened.error is None:
            opened.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise
    finally:
        _current.reset(token)
        tracer.close(opened)


def record(tracer: Tracer, name: str, parent: Span | None, start_ns: int, end_ns: int, /, **attrs: Any) -> None:
    """A span measured elsewhere (another thread's timestamps, ``perf_counter_ns``), under ``parent``."""
    tracer.close(tracer.open(name, parent, attrs, start_ns=start_ns), end_ns)


def memory_bytes() -> dict[str, float]:
    """This process's resident memory, and the accelerator's allocated memory where torch has one in use."""
    values: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        values["rss"] = float(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    torch = __import__("sys").modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        values["cuda_allocated"] = float(torch.cuda.memory_allocated())
    return values


class TraceFile:
    """A trace-event JSON file (``trace.json``), written one event per line and flushed as it goes.

    It is the trace-event *array* format, whose closing ``]`` is optional: a file cut off by
    Ctrl-C, ``kill -9`` or a crash (losing at most the events of its last ``FLUSH_SECONDS``
    since a root span, such as a step, ended) still opens in ui.perfetto.dev and chrome://tracing (and
    ``read_trace`` reads it). At ``cap_bytes`` the file moves to ``trace.1.json`` (replacing
    the older part) and a new one starts, so a long run keeps at most twice the cap.
    """

    def __init__(self, path: Path, cap_bytes: int = TRACE_CAP_BYTES) -> None:
        self.path = path
        self.cap_bytes = cap_bytes
        self._file: Any = None
        self._written = 0
        self._suspended = False
        self._flushed = 0.0

    def _start(self, tracer: Tracer) -> None:
        self._file = self.path.open("w", encoding="utf-8")
        self._file.write("[\n")
        self._written = 2
        self._event({"ph": "M", "name": "process_name", "pid": tracer.pid, "tid": MAIN_LANE, "args": {"name": tracer.process}})
        self._event({"ph": "M", "name": "thread_name", "pid": tracer.pid, "tid": MAIN_LANE, "args": {"name": "main"}})

    def _event(self, event: dict[str, Any], flush: bool = False) -> None:
        line = json.dumps(event, separators=(",", ":"), default=str) + ",\n"
        self._file.write(line)
        self._written += len(line)
        now = time.monotonic()
        if flush or now - self._flushed >= FLUSH_SECONDS:
            self._file.flush()
            self._flushed = now

    def suspend(self) -> None:
        """Close the file for now, unfinished (no ``]``); the next event appends to it."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._suspended = True

    def _ready(self, tracer: Tracer) -> None:
        if self._file is None and self._suspended:
            self._file, self._suspended = self.path.open("a", encoding="utf-8"), False
        if self._file is None:
            self._start(tracer)
        elif self._written >= self.cap_bytes:
            self._file.close()
            os.replace(self.path, self.path.with_suffix(".1.json"))
            self._start(tracer)

    def opened(self, span: Span, tracer: Tracer) -> None:
        """A span that opens a track names it (its events come when it ends: a complete event holds both ends)."""
        if span.lane == span.id:
            self._ready(tracer)
            self._event(
                {"ph": "M", "name": "thread_name", "pid": tracer.pid, "tid": span.lane, "args": {"name": _track_label(span)}}
            )

    def closed(self, span: Span, end_ns: int, tracer: Tracer) -> None:
        self._ready(tracer)
        args = {**span.attrs, "span_id": span.id, "parent_id": span.parent}
        if span.error is not None:
            args["error"] = span.error
        event = {
            "ph": "X",
            "name": span.name,
            "cat": "error" if span.error is not None else "minds",
            "ts": round(tracer.wall_us(span.start_ns), 3),
            "dur": round((end_ns - span.start_ns) / 1000, 3),
            "pid": tracer.pid,
            "tid": span.lane,
            "args": args,
        }
        self._event(event, flush=span.parent is None)

    def counted(self, name: str, values: dict[str, float], at_ns: int, tracer: Tracer) -> None:
        self._ready(tracer)
        self._event(
            {"ph": "C", "name": name, "ts": round(tracer.wall_us(at_ns), 3), "pid": tracer.pid, "tid": MAIN_LANE, "args": values}
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.write("{}]\n")  # an empty last event: every event line above ends with a comma
            self._file.close()
            self._file = None


def _track_label(span: Span) -> str:
    shown = [str(span.attrs[k]) for k in ("environment", "task", "index", "route") if k in span.attrs]
    return " ".join([span.name, *shown])


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a trace file, whether or not it was closed (the array format's ``]`` is optional)."""
    text = path.read_text(encoding="utf-8").rstrip()
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    return [event for event in json.loads(text) if event]


class OtlpSink:
    """Spans to an OpenTelemetry collector (OTLP over HTTP), through the ``opentelemetry-sdk`` (the ``otel`` extra).

    ``endpoint`` is the collector's traces URL (``http://host:4318/v1/traces``); an
    ``exporter`` (any SDK ``SpanExporter``, e.g. the in-memory one) replaces it.
    """

    def __init__(self, service: str, endpoint: str = "", exporter: Any = None) -> None:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        except ImportError:
            from minds_core.errors import ConfigError

            raise ConfigError(
                "metrics.otlp_endpoint: exporting spans needs the otel extra: pip install 'minds-core[otel]'"
            ) from None
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            processor: Any = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))
        else:
            processor = SimpleSpanProcessor(exporter)
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("minds")
        self._open: dict[int, Any] = {}

    def opened(self, span: Span, tracer: Tracer) -> None:
        from opentelemetry import trace

        parent = self._open.get(span.parent) if span.parent is not None else None
        context = trace.set_span_in_context(parent) if parent is not None else None
        self._open[span.id] = self.tracer.start_span(span.name, context=context, start_time=tracer.wall_ns(span.start_ns))

    def closed(self, span: Span, end_ns: int, tracer: Tracer) -> None:
        from opentelemetry.trace import Status, StatusCode

        otel = self._open.pop(span.id, None)
        if otel is None:
            return
        otel.set_attributes(
            {key: value if isinstance(value, (str, bool, int, float)) else str(value) for key, value in span.attrs.items()}
        )
        if span.error is not None:
            otel.set_status(Status(StatusCode.ERROR, span.error))
        otel.end(end_time=tracer.wall_ns(end_ns))

    def counted(self, name: str, values: dict[str, float], at_ns: int, tracer: Tracer) -> None:
        """Counters stay in the trace file and ``/metrics``: OTLP carries the spans."""

    def close(self) -> None:
        self.provider.shutdown()


def category(name: str) -> str:
    """Which part of an episode's time a span's own time counts to: ``sampling``, ``environment``, ``reward`` or ``waiting``."""
    if name == "sample" or name.startswith("sample."):
        return "sampling"
    if name.endswith(" reward") or name == "judge":
        return "reward"
    if name.startswith("env.") or name == "tool":
        return "environment"
    return "waiting"


class SelfTimes:
    """Sums the *own* time of the spans inside episodes (a span's time less its children's) by ``category``;
    ``take()`` returns the sums so far and starts over. The RL loop splits its rollout phase with them."""

    def __init__(self) -> None:
        self._children: dict[int, int] = {}
        self._inside: set[int] = set()  #: open spans that are episodes or inside one
        self._sums: dict[str, float] = {}

    def opened(self, span: Span, tracer: Tracer) -> None:
        if span.name == "episode" or span.parent in self._inside:
            self._inside.add(span.id)

    def closed(self, span: Span, end_ns: int, tracer: Tracer) -> None:
        total = end_ns - span.start_ns
        own = total - self._children.pop(span.id, 0)
        if span.parent is not None and span.parent in self._inside:
            self._children[span.parent] = self._children.get(span.parent, 0) + total
        if span.id in self._inside:
            self._inside.discard(span.id)
            kind = category(span.name)
            self._sums[kind] = self._sums.get(kind, 0.0) + max(own, 0) / 1e9

    def counted(self, name: str, values: dict[str, float], at_ns: int, tracer: Tracer) -> None:
        """Counters are not timed work."""

    def close(self) -> None:
        """Nothing held."""

    def take(self) -> dict[str, float]:
        sums, self._sums = self._sums, {}
        return sums


@contextlib.contextmanager
def run_tracer(metrics: Any, folder: Path, process: str) -> Iterator[SelfTimes]:
    """Trace a run (or a served session) into ``folder``, as its ``metrics`` settings say: ``trace.json`` when
    ``metrics.trace``, OTLP when ``metrics.otlp_endpoint``; the ``SelfTimes`` that split its steps, always."""
    self_times = SelfTimes()
    sinks: list[SpanSink] = [self_times]
    if metrics.trace:
        sinks.append(TraceFile(folder / TRACE_FILE, metrics.trace_max_mb * 1024 * 1024))
    if metrics.otlp_endpoint:
        sinks.append(OtlpSink(process, metrics.otlp_endpoint))
    with tracing(Tracer(sinks, process)):
        yield self_times
