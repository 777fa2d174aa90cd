"""A plugin's failure: which exceptions from plugin code fail only what it was doing, and their stored text.

Plugin code (an environment, a reward function, ``close()``) may raise anything,
``sys.exit`` included: ``raised_by_plugin`` tells a failure of that code (counted
against its rollout) from a stop that minds or the user asked for (passed on).
``contained`` awaits plugin code so that such a failure comes out as an ordinary
``PluginExit`` (asyncio re-raises SystemExit and KeyboardInterrupt out of the event
loop from any task they escape). ``error_text`` is what is stored and shown of a
failure, bounded in size.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

#: The longest error text stored for a rollout (rollouts.jsonl, the report, logs); longer ones are cut.
MAX_ERROR_CHARS = 4096


def raised_by_plugin(error: BaseException) -> bool:
    """Whether ``error``, raised while plugin code ran, is that code's own failure (not a stop minds or the user asked for).

    Every Exception is, and so are ``SystemExit`` (a plugin's ``sys.exit``) and ``GeneratorExit``.
    A ``CancelledError`` is minds' own when the running task was cancelled (``Task.cancelling()``),
    else code raised it. A ``KeyboardInterrupt`` is the user's Ctrl-C only while Python's default
    SIGINT handler is installed: while training (``interrupt.StopOnSignal``) or under ``asyncio.run``
    a signal never raises one, so one raised then came from code.
    """
    if isinstance(error, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop: nothing of minds' was cancelled
            return True
        return task is None or task.cancelling() == 0
    if isinstance(error, KeyboardInterrupt):
        return signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    return isinstance(error, (Exception, SystemExit, GeneratorExit))


class PluginExit(Exception):
    """A BaseException that plugin code raised as its own failure (``sys.exit``, ...), carried as an Exception."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error_text(error))
        self.error = error  #: what the plugin raised


async def contained(work: Awaitable[T]) -> T:
    """``await work``; a BaseException it raises as its own failure (``raised_by_plugin``) comes out as PluginExit."""
    try:
        return await work
    except Exception:
        raise
    except BaseException as exc:
        if not raised_by_plugin(exc):
            raise
        raise PluginExit(exc) from exc


def error_text(error: BaseException) -> str:
    """``Type: message`` of a plugin's error (of what it raised, for a PluginExit), cut to ``MAX_ERROR_CHARS``."""
    if isinstance(error, PluginExit):
        error = error.error
    text = f"{type(error).__name__}: {error}"
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return f"{text[:MAX_ERROR_CHARS]}... [cut: {len(text):,} characters in all]"
