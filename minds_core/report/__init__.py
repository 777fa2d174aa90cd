"""``minds report``: one self-contained HTML page of a run (curves, health, sampled rollouts).

``write_report(run_dir)`` reads ``config.yaml``, ``metrics.jsonl``,
``rollouts.jsonl`` (and ``trace.json``'s slowest spans) and writes ``report.html`` next to them, atomically, so a
browser never sees half a page. It works on a finished, a live and an
interrupted run (a torn last line is skipped).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from minds_core.base.errors import UsageError
from minds_core.base.tracing import TRACE_FILE
from minds_core.config import read_config_file
from minds_core.report.page import RunData, render, table
from minds_core.report.timing import slowest
from minds_core.training.run_directory import METRICS_FILE, ROLLOUTS_FILE, read_jsonl, run_config_path

REPORT_FILE = "report.html"


def load_run(run_dir: Path, status: str | None = None) -> RunData:
    """A run folder's files as RunData; a UsageError when ``run_dir`` is not a run.

    What minds never writes (a metric that is not a number, a line of rollouts.jsonl of another shape: a
    hand edit, another version's file) is left out and counted in ``left_out``, never shown on a guess.
    """
    path = run_config_path(run_dir)
    config = read_config_file(path)
    left_out: list[str] = []
    by_step: dict[int, dict] = {}
    rows = read_jsonl(run_dir / METRICS_FILE)
    metrics_rows = [row for row in rows if type(row.get("step")) is int]
    values = [(key, value) for row in metrics_rows for key, value in row.items()]
    _count(left_out, len(rows) - len(metrics_rows), f"line(s) of {METRICS_FILE} without a whole-number step")
    _count(left_out, sum(not _metric(value) for _, value in values), f"value(s) in {METRICS_FILE} that are not numbers")
    for row in metrics_rows:  # lines of one step (e.g. eval/* apart) merge
        by_step.setdefault(row["step"], {}).update((key, value) for key, value in row.items() if _metric(value))
    metrics = [by_step[step] for step in sorted(by_step)]
    if status is None:
        total = table(config, "trainer").get("steps")
        done = bool(metrics) and type(total) is int and metrics[-1]["step"] >= total - 1
        status = "finished" if done else "running or interrupted"
    groups = read_jsonl(run_dir / ROLLOUTS_FILE)
    rollouts = [group for group in groups if _group_shape(group)]
    _count(left_out, len(groups) - len(rollouts), f"line(s) of {ROLLOUTS_FILE} not in the shape minds writes")
    trace = run_dir / TRACE_FILE
    return RunData(
        name=run_dir.resolve().name,
        config=config,
        config_text=path.read_text(encoding="utf-8"),
        metrics=metrics,
        rollouts=rollouts,
        status=status,
        left_out=left_out,
        trace=TRACE_FILE if trace.is_file() else None,
        slowest=slowest(trace) if trace.is_file() else {},
    )


def _count(left_out: list[str], number: int, what: str) -> None:
    if number:
        left_out.append(f"{number} {what}")


def _metric(value: Any) -> bool:
    """Whether ``value`` is what minds writes for a metric: a number (``null`` for a non-finite one)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


def _dicts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def _messages(value: Any) -> bool:
    return _dicts(value) and all(isinstance(m.get("tool_calls") or [], list) for m in value)


def _group_shape(group: dict[str, Any]) -> bool:
    """Whether a line of rollouts.jsonl has the shape the page reads: a step, prompt messages and rollouts."""
    rollouts = group.get("rollouts", [])
    return (
        type(group.get("step")) is int
        and _messages(group.get("prompt") or [])
        and _dicts(rollouts)
        and all(
            _messages(r.get("messages") or [])
            and isinstance(r.get("components") or {}, dict)
            and isinstance(r.get("completion") or [], list)
            for r in rollouts
        )
    )


def write_report(run_dir: Path, out: Path | None = None, status: str | None = None) -> Path:
    """Render the report of ``run_dir`` to ``out`` (default ``run_dir/report.html``); returns the path."""
    run_dir = Path(run_dir)
    html = render(load_run(run_dir, status))
    out = Path(out) if out is not None else run_dir / REPORT_FILE
    if out.is_dir():
        raise UsageError(f"-o {out}: is a folder; pass a file path, e.g. {out / REPORT_FILE}")
    if out.is_file() and out.suffix != ".html" and out.resolve().is_relative_to(run_dir.resolve()):
        raise UsageError(
            f"-o {out}: that is a file of the run, not its report; write the report to a .html file "
            f"(default {run_dir / REPORT_FILE})"
        )
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # the sink and `minds report` may write at once
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    return out


__all__ = ["REPORT_FILE", "load_run", "write_report"]
