"""Metric sinks: where per-step metrics go (jsonl always; console and wandb by choice)."""

from __future__ import annotations

from typing import Any, Protocol


class MetricSink(Protocol):
    """Receives one flat record per training step, then a summary at the end."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self, summary: dict[str, Any]) -> None: ...
