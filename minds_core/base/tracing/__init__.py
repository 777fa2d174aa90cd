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

The modules: ``spans`` (``Span``, ``Tracer``, ``span``), ``trace_file`` (``TraceFile``, ``read_trace``),
``otlp`` (``OtlpSink``), ``self_times`` (``SelfTimes``, which splits a step's time).

Timestamps are wall-clock microseconds (measured with ``perf_counter`` from a
wall-clock origin), so a run's trace and the trace of the ``minds serve`` it
sampled from line up when loaded together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from minds_core.base.tracing.otlp import OTEL_MISSING, OtlpSink, otel_installed
from minds_core.base.tracing.self_times import SelfTimes, category
from minds_core.base.tracing.spans import (
    MAIN_LANE,
    Span,
    SpanSink,
    Tracer,
    active,
    current,
    memory_bytes,
    record,
    span,
    tracing,
)
from minds_core.base.tracing.trace_file import FLUSH_SECONDS, TRACE_CAP_BYTES, TRACE_FILE, TraceFile, read_trace

__all__ = [
    "FLUSH_SECONDS",
    "MAIN_LANE",
    "OTEL_MISSING",
    "TRACE_CAP_BYTES",
    "TRACE_FILE",
    "OtlpSink",
    "SelfTimes",
    "Span",
    "SpanSink",
    "TraceFile",
    "Tracer",
    "active",
    "category",
    "otel_installed",
    "current",
    "memory_bytes",
    "read_trace",
    "record",
    "run_tracer",
    "span",
    "tracing",
]


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
