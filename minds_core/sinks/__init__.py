"""Metric sinks: where per-step metrics go besides the run directory's metrics.jsonl (console, report, wandb, plugins')."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minds_core.base.logs import get_logger
from minds_core.contract.parts import MetricSink

if TYPE_CHECKING:
    from minds_core.config import RunConfig
    from minds_core.contract.plugins import Registry
    from minds_core.training.run_directory import RunDirectory

log = get_logger("sinks")


class SinkSet:
    """The run directory's metrics.jsonl, then the selected metric sinks; a sink that raises is reported and disabled."""

    def __init__(self, config: RunConfig, registry: Registry, run: RunDirectory) -> None:
        self.run = run
        self.sinks: list[tuple[str, MetricSink]] = []
        for name in config.metrics.sinks:
            factory = registry.lookup("metric_sinks", name, "metrics.sinks").obj
            self.sinks.append((name, factory(config, run.path)))

    def _each(self, method: str, record: dict[str, Any]) -> None:
        for name, sink in list(self.sinks):
            try:
                getattr(sink, method)(record)
            except Exception as exc:  # noqa: BLE001 - a sink never stops training
                log.error("metric sink failed and is disabled", sink=name, error=f"{type(exc).__name__}: {exc}")
                self.sinks.remove((name, sink))

    def write(self, record: dict[str, Any]) -> None:
        self.run.log_metrics(record)  # the run's own record: a failure here stops the run
        self._each("write", record)

    def close(self, summary: dict[str, Any]) -> None:
        self._each("close", summary)
