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

from minds_core.base.masking import mask

T = TypeVar("T")

#: The longest error text stored for a rollout (rollouts.jsonl, the report, logs); longer ones are cut.
MAX_ERROR_CHARS = 4096


def raised_by_plugin(error: BaseException) -> bool:
    """Whether ``error``, raised while plugin code ran, is that code's own failure (not a stop minds or the user asked for).

    Every Exception is, and so are ``SystemExit`` (a plugin's ``sys.exit``) and ``GeneratorExit``.
    A ``CancelledError`` is minds' own when the running task is being cancelled (``Task.cancelling()``),
    else code raised it. A ``KeyboardInterrupt`` is the user's Ctrl-C while Python's default SIGINT
    handler is installed, or once the task is being cancelled (``asyncio.run`` cancels on the first
    Ctrl-C and raises on the second); else it came from code: while training
    (``interrupt.StopOnSignal``) a signal never raises one.
    """
    if isinstance(error, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        return False
    if isinstance(error, (asyncio.CancelledError, KeyboardInterrupt)):
        return not _being_cancelled()
    return isinstance(error, (Exception, SystemExit, GeneratorExit))


def _being_cancelled() -> bool:
    """Whether the running asyncio task (if any) has been asked to cancel."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop
        return False
    return task is not None and task.cancelling() > 0


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
    """``Type: message`` of a plugin's error (of what it raised, for a PluginExit), cut to ``MAX_ERROR_CHARS``;
    secrets masked first (``masking.mask``), so that no cut of it, here or where it is quoted, leaves half of one."""
    if isinstance(error, PluginExit):
        error = error.error
    text = mask(f"{type(error).__name__}: {error}")
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return f"{text[:MAX_ERROR_CHARS]}... [cut: {len(text):,} characters in all]"
