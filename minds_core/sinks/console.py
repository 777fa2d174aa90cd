"""The console sink: progress with reward and health figures on stderr, and a plain-text log in the run folder.

On a terminal it draws a progress bar; otherwise (a pipe, a file, a CI log)
it prints one JSON event per step instead. Every ``metrics.sample_table_every``
steps it shows a table of sampled replies with their rewards. Everything it
shows, and every log line, also goes to ``<run_dir>/train.log`` as plain text,
masked (no secret value minds knows is written).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table
from rich.text import Text

from minds_core.base import logs
from minds_core.base.masking import MaskedStream
from minds_core.config import RunConfig
from minds_core.report.page import printable
from minds_core.training.run_directory import ROLLOUTS_FILE

LOG_FILE = "train.log"
#: Characters of the progress bar itself.
BAR_WIDTH = 16
#: Rows in a table of sampled replies, and characters of each reply shown.
TABLE_ROWS, REPLY_CHARS = 8, 100

#: Progress figures: event field -> (metrics key, console label, format).
FIGURES: dict[str, tuple[str, str, str]] = {
    "reward": ("reward/mean", "reward", "{:.3f}"),
    "zero_variance_frac": ("groups/zero_variance_frac", "zero-var", "{:.0%}"),
    "completion_tokens": ("tokens/completion/mean", "tokens", "{:.1f}"),
    "truncated_frac": ("stop/length_frac", "trunc", "{:.0%}"),
    "neg_logprob": ("sampler/neg_logprob", "-logp", "{:.2f}"),
    "kl_sampler_train": ("kl/sampler_train", "kl", "{:.2g}"),
    "failed": ("rollouts/failed", "failed", "{:.0f}"),
    "timed_out": ("rollouts/timed_out", "timeouts", "{:.0f}"),
    "loss": ("train/loss", "loss", "{:.4f}"),
    "eval_loss": ("eval/loss", "eval loss", "{:.4f}"),
}


def progress_event(record: dict[str, Any], total: int, elapsed: float, eta: float | None) -> dict[str, Any]:
    """The JSON event printed for one step when stderr is not a terminal."""
    event: dict[str, Any] = {"event": "progress", "step": int(record["step"]), "steps": total}
    for field, (key, _, _) in FIGURES.items():
        if key in record:
            event[field] = record[key]
    event["dropped_groups"] = record.get("groups/dropped_failures", 0) + record.get("groups/dropped_constant", 0)
    event["step_seconds"] = record.get("time/step")
    event["elapsed_s"] = round(elapsed, 3)
    event["eta_s"] = None if eta is None else round(eta, 1)
    return event


def status_text(record: dict[str, Any], eta: float | None) -> str:
    """The figures of one step as one line: ``reward 0.512 | zero-var 25% | ... | eta 0:01:40`` (no eta: None)."""
    parts = [f"{label} {fmt.format(record[key])}" for key, label, fmt in FIGURES.values() if key in record]
    if "time/step" in record:
        parts.append(f"{record['time/step']:.2f} s/step")
    if eta is not None:
        parts.append(eta_text(eta))
    return " | ".join(parts)


def eta_text(eta: float | None) -> str:
    return "" if eta is None else f"eta {_clock(eta)}"


def _fixed_width(total: int) -> int:
    """Columns the progress line takes before its figures: ``step M/N``, the bar, ``eta h:mm:ss``, elapsed, spaces."""
    return len(f"step {total}/{total}") + 1 + BAR_WIDTH + 1 + len("eta 0:00:00") + 1 + len("0:00:00") + 1


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def sample_rows(records: list[dict[str, Any]], limit: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """Up to ``limit`` sampled replies from rollouts.jsonl records, taken from each group in turn."""
    pending = [[(group, rollout) for rollout in group.get("rollouts", [])] for group in records]
    picked = []
    while len(picked) < limit and any(pending):
        for queue in pending:
            if queue and len(picked) < limit:
                picked.append(queue.pop(0))
    rows = []
    for group, rollout in picked:
        replies = rollout.get("completion") or [""]
        reply = printable(" ⏎ ".join(replies[-1].split("\n")))
        rows.append(
            {
                "env": group.get("env"),
                "task": group.get("task"),
                "reply": reply if len(reply) <= REPLY_CHARS else reply[: REPLY_CHARS - 1] + "…",
                "turns": len(replies),
                "reward": rollout.get("reward"),
                "advantage": rollout.get("advantage"),
                "error": rollout.get("error"),
            }
        )
    return rows


def _sample_table(step: int, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"sampled replies, step {step}", title_justify="left")
    for column in ("task", "reply", "reward", "advantage"):
        table.add_column(column, overflow="fold", justify="right" if column in ("reward", "advantage") else "left")
    for row in rows:
        reward = "failed" if row["reward"] is None else f"{row['reward']:.3f}"
        advantage = "-" if row["advantage"] is None else f"{row['advantage']:+.3f}"
        reply = row["reply"] if row["error"] is None else f"[error] {printable(row['error'][:REPLY_CHARS])}"
        table.add_row(Text(str(row["task"])), Text(reply), reward, advantage)
    return table


class RolloutReader:
    """Reads the lines appended to rollouts.jsonl since the last call (complete lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as fh:
            if fh.seek(0, 2) < self.offset:  # rewritten shorter (a resume cut later steps)
                self.offset = 0
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        records = []
        for line in data[:end].splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return records


class ConsoleSink:
    """Progress (bar or JSON events), periodic tables of sampled replies, the plain-text train.log."""

    def __init__(self, config: RunConfig, run_dir: Path) -> None:
        self.total = config.trainer.steps
        self.table_every = config.metrics.sample_table_every
        self.rollouts = RolloutReader(Path(run_dir) / ROLLOUTS_FILE)
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.log: TextIO = MaskedStream((Path(run_dir) / LOG_FILE).open("a", encoding="utf-8"))  # type: ignore[assignment]
        self.plain = Console(file=self.log, width=160, color_system=None, force_terminal=False, highlight=False)
        logs.add_log_file(self.log)
        self.began = time.monotonic()
        self.first_step: int | None = None
        self.terminal = logs.console().is_terminal
        self.progress: Progress | None = None
        if self.terminal:
            # step, bar, eta and elapsed first; the figures get the width left on the line (cut with "…")
            self.progress = Progress(
                TextColumn("[bold]step"),
                MofNCompleteColumn(),
                BarColumn(bar_width=BAR_WIDTH),
                TextColumn("{task.fields[eta]}", table_column=Column(no_wrap=True)),
                TimeElapsedColumn(),
                TextColumn("{task.fields[status]}", table_column=Column(no_wrap=True)),
                console=logs.console(),
                transient=False,
            )
            self.task = self.progress.add_task("train", total=self.total, status="", eta="")
            self.progress.start()

    def _eta(self, step: int) -> float | None:
        if self.first_step is None:
            self.first_step = step
        done = step - self.first_step + 1
        remaining = self.total - step - 1
        return (time.monotonic() - self.began) / done * remaining if done > 0 else None

    def write(self, record: dict[str, Any]) -> None:
        step = int(record["step"])
        eta = self._eta(step)
        status = status_text(record, eta)
        self.plain.print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} step {step} ({step + 1}/{self.total}) {status}", soft_wrap=True)
        if self.progress is not None:
            figures = status_text(record, None)
            room = logs.console().width - _fixed_width(self.total)
            if len(figures) > room:
                figures = figures[: max(room - 1, 0)] + "…"
            self.progress.update(self.task, completed=step + 1, status=figures, eta=eta_text(eta))
        else:
            _emit(progress_event(record, self.total, time.monotonic() - self.began, eta))
        if self.table_every and (step + 1) % self.table_every == 0:
            rows = sample_rows([r for r in self.rollouts.new_records() if r.get("step") == step])
            if rows:
                self.plain.print(_sample_table(step, rows))
                if self.progress is not None:
                    logs.console().print(_sample_table(step, rows))
                else:
                    _emit({"event": "samples", "step": step, "samples": rows})
        self.log.flush()

    def close(self, summary: dict[str, Any]) -> None:
        if self.progress is not None:
            self.progress.stop()
        table = Table(title="run summary", show_header=False)
        for key, value in summary.items():
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
        self.plain.print(table)
        if self.terminal:
            logs.console().print(table)
        else:
            _emit({"event": "summary", **summary})
        logs.remove_log_file(self.log)
        self.log.close()


def _emit(event: dict[str, Any]) -> None:
    """One JSON line on stderr, through the shared console so it never tears a log line."""
    logs.console().print(json.dumps(event, default=str), markup=False, highlight=False, emoji=False, soft_wrap=True)
