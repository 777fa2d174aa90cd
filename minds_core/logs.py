"""Logging: structlog configured once, printed through the shared rich console on stderr.

Log lines go through the same ``rich.console.Console`` as the progress bar, so a
line printed while a bar is live appears above it instead of tearing it.
"""

from __future__ import annotations

import logging
import sys
from functools import cache
from typing import Any

import structlog
from rich.console import Console

LOG_FORMATS = ("auto", "console", "json")


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
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=lambda *args: _ConsoleLogger(),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """A structlog logger bound to a component name."""
    return structlog.get_logger(component=name)
