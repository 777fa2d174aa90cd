"""Metric sinks: where per-step metrics go (jsonl always; console and wandb by choice)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from minds_core.logs import get_logger

if TYPE_CHECKING:
    from minds_core.config import RunConfig
    from minds_core.plugins import Registry

log = get_logger("sinks")


class MetricSink(Protocol):
    """Receives one flat record per training step, then a summary at the end."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self, summary: dict[str, Any]) -> None: ...


class SinkSet:
    """The selected metric sinks; one that raises is reported and disabled."""

    def __init__(self, config: RunConfig, registry: Registry, run_dir: Path) -> None:
        names = ["jsonl", *[n for n in config.metrics.sinks if n != "jsonl"]]
        self.sinks: list[tuple[str, MetricSink]] = []
        for name in names:
            factory = registry.lookup("metric_sinks", name, "metrics.sinks").obj
            self.sinks.append((name, factory(run_dir, config)))

    def _each(self, method: str, record: dict[str, Any]) -> None:
        for name, sink in list(self.sinks):
            try:
                getattr(sink, method)(record)
            except Exception as exc:  # noqa: BLE001 - a sink never stops training
                log.error("metric sink failed and is disabled", sink=name, error=f"{type(exc).__name__}: {exc}")
                self.sinks.remove((name, sink))
                if name == "jsonl":
                    raise

    def write(self, record: dict[str, Any]) -> None:
        self._each("write", record)

    def close(self, summary: dict[str, Any]) -> None:
        self._each("close", summary)
