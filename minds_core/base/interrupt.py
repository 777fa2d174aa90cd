"""Ctrl-C and SIGTERM during training: finish the step in flight, save, stop; a second signal exits at once.

The first SIGINT or SIGTERM only sets a flag (and says so on stderr: at once, from the
handler, naming the sync plugin call that holds the event loop when one does); the training
loop reads it after each step, saves a resumable checkpoint and ends the run with
``RunInterrupted``. A second signal ends the process immediately with exit code
128 + signal number, as a ``kill -9`` would: every file of the run is written
line by line or renamed into place, so the run still resumes from its last
checkpoint.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from minds_core.base.blocking import blocking_now
from minds_core.base.errors import MindsError
from minds_core.base.logs import get_logger

log = get_logger("interrupt")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(MindsError):
    """Training stopped on a signal after saving a checkpoint; the exit code is 128 + the signal number."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class StopOnSignal:
    """Between ``install`` and ``restore``, SIGINT/SIGTERM ask the training loop to stop instead of killing it.

    ``resume_hint`` is the command that continues the run, shown when a second signal exits at once.
    """

    def __init__(self, resume_hint: str) -> None:
        self.resume_hint = resume_hint
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def requested(self) -> bool:
        """Whether a signal asked the run to stop."""
        return self.signum is not None

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def install(self) -> None:
        """Take over SIGINT and SIGTERM (from the event loop's thread; signals reach only the main thread, elsewhere a no-op).

        Installing again before ``restore`` changes nothing: the handlers to restore stay the ones found first.
        """
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        self._loop = asyncio.get_running_loop()
        for signum in SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)
        log.debug("Ctrl-C or SIGTERM now stops the run after the step in flight")

    def restore(self) -> None:
        """Give the signals back to their previous handlers."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __enter__(self) -> StopOnSignal:
        self.install()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.restore()

    def interrupted(self, step: int, steps: int) -> RunInterrupted:
        """The error that ends a run stopped by the signal after ``step`` (of ``steps``), its checkpoint saved."""
        return RunInterrupted(
            f"stopped by {self.signal_name} after step {step} ({step + 1} of {steps} done); checkpoint saved. "
            f"Continue with: {self.resume_hint}",
            self.signum or 0,
        )

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            name = signal.Signals(signum).name
            message = (
                f"minds: {name} again: exiting now; continue with: {self.resume_hint} "
                "(from its last checkpoint; from step 0 if none was saved)\n"
            )
            os.write(sys.stderr.fileno(), message.encode())
            os._exit(128 + signum)
        self.signum = signum
        blocked = blocking_now()
        if blocked is not None:  # the loop is held by plugin code: a message scheduled on it would wait as long
            message = (
                f"minds: stopping: waiting for {blocked.what} (blocked {blocked.seconds():.0f}s); "
                "press Ctrl-C again to exit now\n"
            )
            os.write(sys.stderr.fileno(), message.encode())
        elif self._loop is not None:  # logged from the loop, never from inside a write the signal interrupted
            self._loop.call_soon_threadsafe(self._announce)

    def _announce(self) -> None:
        log.warning(
            "stopping: the step in flight finishes, then a checkpoint is saved (press Ctrl-C again to exit at once)",
            signal=self.signal_name,
        )
