"""Spans and counters, and the tracer that hands them to its sinks (see ``minds_core.base.tracing``)."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol

import attrs

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

    def suspend(self) -> None:
        """Release what it holds open (files) until the next event; nothing for a sink that holds none."""

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
        """Let its sinks release their files until the next event (``TraceFile.suspend``)."""
        with self._lock:
            for sink in self.sinks:
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
