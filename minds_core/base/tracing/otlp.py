"""Spans to an OpenTelemetry collector, through the ``opentelemetry-sdk`` (the ``otel`` extra)."""

from __future__ import annotations

from typing import Any

from minds_core.base.tracing.spans import Span, Tracer

#: What a run that exports spans (metrics.otlp_endpoint) without the otel extra is told, before it starts.
OTEL_MISSING = "metrics.otlp_endpoint: exporting spans needs the otel extra: pip install 'minds-core[otel]'"


def otel_installed() -> bool:
    """Whether the OpenTelemetry SDK and its OTLP/HTTP exporter can be imported (without importing them)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"))


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
            from minds_core.base.errors import ConfigError

            raise ConfigError(OTEL_MISSING) from None
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

        from minds_core.base.masking import mask

        otel = self._open.pop(span.id, None)
        if otel is None:
            return
        attributes = {
            key: value if isinstance(value, (bool, int, float)) else mask(str(value)) for key, value in span.attrs.items()
        }
        otel.set_attributes(attributes)
        if span.error is not None:  # a plugin's error may echo a secret
            otel.set_status(Status(StatusCode.ERROR, mask(span.error)))
        otel.end(end_time=tracer.wall_ns(end_ns))

    def counted(self, name: str, values: dict[str, float], at_ns: int, tracer: Tracer) -> None:
        """Counters stay in the trace file and ``/metrics``: OTLP carries the spans."""

    def close(self) -> None:
        self.provider.shutdown()

    def suspend(self) -> None:
        """Nothing held open: the SDK's exporter sends in batches."""
