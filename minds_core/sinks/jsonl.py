"""The jsonl sink: one line per step in ``<run_dir>/metrics.jsonl``, durable on every write."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line with a single write, flushed to disk (after a torn last line, on a new line)."""
    line = json.dumps(record, sort_keys=True, default=float) + "\n"
    if _ends_torn(path):
        line = "\n" + line
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def _ends_torn(path: Path) -> bool:
    """Whether the file's last line lacks its newline (a write cut short by a kill)."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


class JsonlSink:
    """Appends each step's metrics to metrics.jsonl."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / METRICS_FILE

    def write(self, record: dict[str, Any]) -> None:
        append_line(self.path, record)

    def close(self, summary: dict[str, Any]) -> None:
        """Nothing to flush: every line is on disk when write returns."""
