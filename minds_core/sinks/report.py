"""The report sink: rewrites ``<run_dir>/report.html`` every ``metrics.report_every`` steps and at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minds_core.report import write_report
from minds_core.training.run_directory import CONFIG_FILE


class ReportSink:
    """Keeps the run's HTML report current; it reads the files the run directory holds."""

    def __init__(self, run_dir: Path, every: int) -> None:
        self.run_dir = Path(run_dir)
        self.every = every

    def write(self, record: dict[str, Any]) -> None:
        if self.every and (int(record["step"]) + 1) % self.every == 0:
            write_report(self.run_dir, status="running")

    def close(self, summary: dict[str, Any]) -> None:
        if (self.run_dir / CONFIG_FILE).exists():
            write_report(self.run_dir, status="stopped early (error or interrupt)" if summary.get("stopped") == "early" else "finished")
