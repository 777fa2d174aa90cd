"""The console sink: a rich progress bar on stderr and a summary table at the end."""

from __future__ import annotations

from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from minds_core.logs import console


class ConsoleSink:
    """Shows step, mean reward and seconds per step while training runs."""

    def __init__(self, total_steps: int) -> None:
        self.progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("{task.fields[seconds]} s/step"),
            TimeElapsedColumn(),
            console=console(),
            transient=False,
        )
        self.task = self.progress.add_task("train", total=total_steps, reward="-", seconds="-")
        self.progress.start()

    def write(self, record: dict[str, Any]) -> None:
        reward = record.get("reward/mean")
        seconds = record.get("time/step")
        self.progress.update(
            self.task,
            completed=int(record.get("step", 0)) + 1,
            reward="-" if reward is None else f"{reward:.3f}",
            seconds="-" if seconds is None else f"{seconds:.2f}",
        )

    def close(self, summary: dict[str, Any]) -> None:
        self.progress.stop()
        table = Table(title="run summary", show_header=False)
        for key, value in summary.items():
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
        console().print(table)
