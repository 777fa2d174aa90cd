"""``minds report``: one self-contained HTML page of a run (curves, health, sampled rollouts).

``write_report(run_dir)`` reads ``config.yaml``, ``metrics.jsonl`` and
``rollouts.jsonl`` and writes ``report.html`` next to them, atomically, so a
browser never sees half a page. It works on a finished, a live and an
interrupted run (a torn last line is skipped).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from minds_core.errors import UsageError
from minds_core.report.page import RunData, render
from minds_core.run_directory import METRICS_FILE, ROLLOUTS_FILE, read_jsonl, run_config_path

REPORT_FILE = "report.html"


def load_run(run_dir: Path, status: str | None = None) -> RunData:
    """A run folder's files as RunData; a UsageError when ``run_dir`` is not a run."""
    path = run_config_path(run_dir)
    config_text = path.read_text(encoding="utf-8")
    try:
        config = yaml.safe_load(config_text) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML ({exc}); is this a minds run directory?") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: expected a mapping of config keys, got {type(config).__name__}")
    by_step: dict[int, dict] = {}
    for row in read_jsonl(run_dir / METRICS_FILE):
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            by_step.setdefault(row["step"], {}).update(row)  # lines of one step (e.g. eval/* apart) merge
    metrics = [by_step[step] for step in sorted(by_step)]
    if status is None:
        total = (config.get("trainer") or {}).get("steps")
        done = bool(metrics) and total is not None and metrics[-1]["step"] >= total - 1
        status = "finished" if done else "running or interrupted"
    return RunData(
        name=run_dir.resolve().name,
        config=config,
        config_text=config_text,
        metrics=metrics,
        rollouts=read_jsonl(run_dir / ROLLOUTS_FILE),
        status=status,
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
