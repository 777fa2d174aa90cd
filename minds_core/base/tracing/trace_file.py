"""``trace.json``: spans and counters in the Chrome/Perfetto trace-event format, written as they come."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from minds_core.base.tracing.spans import MAIN_LANE, Span, Tracer

#: the file name of a run's trace (its older part, once it reached its cap: ``trace.1.json``)
TRACE_FILE = "trace.json"
#: seconds a trace file's events may wait in its buffer (a root span's end, e.g. a step's, flushes at once)
FLUSH_SECONDS = 0.25
#: bytes a trace file grows to before it moves to ``trace.1.json`` (one older part is kept: at most twice this)
TRACE_CAP_BYTES = 64 * 1024 * 1024


class TraceFile:
    """A trace-event JSON file (``trace.json``), written one event per line and flushed as it goes.

    It is the trace-event *array* format, whose closing ``]`` is optional: a file cut off by
    Ctrl-C, ``kill -9`` or a crash (losing at most the events of its last ``FLUSH_SECONDS``
    since a root span, such as a step, ended) still opens in ui.perfetto.dev and chrome://tracing (and
    ``read_trace`` reads it). At ``cap_bytes`` the file moves to ``trace.1.json`` (replacing
    the older part) and a new one starts, so a long run keeps at most twice the cap. A trace
    already at ``path`` (a resumed run's, a restarted server's session) is continued.
    """

    def __init__(self, path: Path, cap_bytes: int = TRACE_CAP_BYTES) -> None:
        from minds_core.base.masking import mask  # here: importing the tracer (every plugin call uses it) stays light

        self._mask = mask
        self.path = path
        self.cap_bytes = cap_bytes
        self._file: Any = None
        self._written = 0
        self._suspended = False
        self._flushed = 0.0
        self._resumable = True  # until its first start: an existing trace there is continued

    def _start(self, tracer: Tracer) -> None:
        if self._continues():
            self._file = self.path.open("a", encoding="utf-8")
            self._written = self.path.stat().st_size
        else:
            self._file = self.path.open("w", encoding="utf-8")
            self._file.write("[\n")
            self._written = 2
        self._event({"ph": "M", "name": "process_name", "pid": tracer.pid, "tid": MAIN_LANE, "args": {"name": tracer.process}})
        self._event({"ph": "M", "name": "thread_name", "pid": tracer.pid, "tid": MAIN_LANE, "args": {"name": "main"}})

    def _event(self, event: dict[str, Any], flush: bool = False) -> None:
        line = self._mask(json.dumps(event, separators=(",", ":"), default=str)) + ",\n"  # a plugin's error may echo a secret
        self._file.write(line)
        self._written += len(line)
        now = time.monotonic()
        if flush or now - self._flushed >= FLUSH_SECONDS:
            self._file.flush()
            self._flushed = now

    def suspend(self) -> None:
        """Close the file for now, unfinished (no ``]``); the next event appends to it."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._suspended = True

    def _continues(self) -> bool:
        """Whether this file's first events go on an earlier process's trace (a resumed run): the file it left, its
        closing ``{}]`` or a last line cut short taken off. A full file, or one that is not a trace, starts over."""
        if self._resumable is False or not self.path.is_file() or self.path.stat().st_size >= self.cap_bytes:
            return False
        self._resumable = False  # once: after rotating, a new file starts
        with self.path.open("rb+") as file:
            if file.read(2) != b"[\n":
                return False
            file.seek(max(0, file.seek(0, os.SEEK_END) - 65536))
            start = file.tell()
            tail = file.read()
            if tail.endswith(b"{}]\n"):
                end = start + len(tail) - 4
            else:
                end = start + tail.rfind(b"\n") + 1
            file.truncate(max(end, 2))
        return True

    def _ready(self, tracer: Tracer) -> None:
        if self._file is None and self._suspended:
            self._file, self._suspended = self.path.open("a", encoding="utf-8"), False
        if self._file is None:
            self._start(tracer)
        elif self._written >= self.cap_bytes:
            self._file.close()
            os.replace(self.path, self.path.with_suffix(".1.json"))
            self._start(tracer)

    def opened(self, span: Span, tracer: Tracer) -> None:
        """A span that opens a track names it (its events come when it ends: a complete event holds both ends)."""
        if span.lane == span.id:
            self._ready(tracer)
            self._event(
                {"ph": "M", "name": "thread_name", "pid": tracer.pid, "tid": span.lane, "args": {"name": _track_label(span)}}
            )

    def closed(self, span: Span, end_ns: int, tracer: Tracer) -> None:
        self._ready(tracer)
        args = {**span.attrs, "span_id": span.id, "parent_id": span.parent}
        if span.error is not None:
            args["error"] = span.error
        event = {
            "ph": "X",
            "name": span.name,
            "cat": "error" if span.error is not None else "minds",
            "ts": round(tracer.wall_us(span.start_ns), 3),
            "dur": round((end_ns - span.start_ns) / 1000, 3),
            "pid": tracer.pid,
            "tid": span.lane,
            "args": args,
        }
        self._event(event, flush=span.parent is None)

    def counted(self, name: str, values: dict[str, float], at_ns: int, tracer: Tracer) -> None:
        self._ready(tracer)
        self._event(
            {"ph": "C", "name": name, "ts": round(tracer.wall_us(at_ns), 3), "pid": tracer.pid, "tid": MAIN_LANE, "args": values}
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.write("{}]\n")  # an empty last event: every event line above ends with a comma
            self._file.close()
            self._file = None


def _track_label(span: Span) -> str:
    shown = [str(span.attrs[k]) for k in ("environment", "task", "index", "route") if k in span.attrs]
    return " ".join([span.name, *shown])


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a trace file, whether or not it was closed (the array format's ``]`` is optional)."""
    text = path.read_text(encoding="utf-8").rstrip()
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    return [event for event in json.loads(text) if event]
