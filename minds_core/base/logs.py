"""Logging: structlog configured once, printed through the shared rich console on stderr.

Log lines go through the same ``rich.console.Console`` as the progress bar, so a
line printed while a bar is live appears above it instead of tearing it. Files
added with ``add_log_file`` (a run's train.log) get every line as plain text too.
Every line is masked: no secret value minds knows is printed or written.
"""

from __future__ import annotations

import logging
import sys
import warnings
from functools import cache
from typing import Any, TextIO

import structlog
from rich.console import Console

from minds_core.base.masking import mask

_log_files: list[TextIO] = []


def add_log_file(fh: TextIO) -> None:
    """Also write every log line, uncolored, to ``fh`` (until remove_log_file)."""
    _log_files.append(fh)


def remove_log_file(fh: TextIO) -> None:
    if fh in _log_files:
        _log_files.remove(fh)


class _Tee:
    """The final structlog processor: renders for the console, and as plain text for the log files."""

    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer
        self.plain = structlog.dev.ConsoleRenderer(colors=False)

    def __call__(self, logger: Any, name: str, event_dict: dict[str, Any]) -> Any:
        if _log_files:
            line = mask(self.plain(logger, name, dict(event_dict)))
            for fh in list(_log_files):
                try:
                    fh.write(f"{line}\n")
                    fh.flush()
                except OSError as exc:  # a full disk: the file is dropped, logging never ends a run
                    remove_log_file(fh)
                    console().print(f"minds: cannot write {getattr(fh, 'name', 'a log file')} ({exc.strerror}): logs go to stderr only")
        return mask(self.renderer(logger, name, event_dict))


@cache
def console() -> Console:
    """The one stderr console shared by logs and progress bars."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


class _ConsoleLogger:
    """A structlog logger that prints rendered lines on the shared console."""

    def msg(self, message: str) -> None:
        console().print(message, markup=False, highlight=False, emoji=False, soft_wrap=True)

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


def configure(log_format: str = "auto", level: str = "info") -> None:
    """Set up structlog: console rendering on a terminal, JSON lines otherwise."""
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    renderer: Any
    if log_format == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=console().is_terminal)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _Tee(renderer),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=lambda *args: _ConsoleLogger(),
        cache_logger_on_first_use=False,
    )
    warnings.showwarning = _log_warning


def _log_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, *_: Any) -> None:
    """Python warnings (from minds, a library or an environment) become log lines: JSON logs stay all JSON."""
    get_logger("python").warning(str(message), category=category.__name__, where=f"{filename}:{lineno}")


def get_logger(name: str) -> Any:
    """A structlog logger bound to a component name."""
    return structlog.get_logger(component=name)
