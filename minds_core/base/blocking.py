"""Plugin code that runs synchronously on the event loop's thread, timed and named.

Sync reward functions and episode methods run on the event loop's thread, by design: code that
installs signal handlers (math_verify's SIGALRM timeouts) or holds thread-bound state (a sqlite
connection, a tokenizer) works only there. While one runs, nothing else does: no other rollout
samples or scores, no signal is acted on; the same holds of an ``async def`` between two awaits
(``time.sleep`` in it blocks as much). ``plugin_call`` records which call is running and since
when, so that

- a Ctrl-C or SIGTERM names it at once (``blocking_now``, read by ``minds_core.base.interrupt``), and
- ``rollout.timeout`` charges the time only to the rollouts that waited on it: each rollout (or
  group being scored) runs under a ``Stopwatch``, which excuses the time the loop spent in other
  rollouts' sync calls, and names its own longest sync call when it overruns (``within_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import time
import types
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any, TypeVar

import attrs

from minds_core.base.tracing.spans import span

T = TypeVar("T")


@attrs.define
class SyncCall:
    """A sync plugin call running now on the event loop's thread."""

    what: str  #: what it is, as messages name it: "reward function 'math.correct'", "episode MyEpisode.step"
    started: float  #: time.monotonic() when it began
    inner: tuple[str, float] | None = None  #: (what, seconds) of the longest call made inside it (a step's reward)

    def seconds(self) -> float:
        return time.monotonic() - self.started


@attrs.define
class _Ledger:
    """Seconds the event loop has spent in sync plugin calls since the process started."""

    total: float = 0.0


_LEDGER = _Ledger()
_running: SyncCall | None = None


@attrs.define
class Stopwatch:
    """The time one rollout (or one group's scoring) is charged: its wall time less the seconds the loop spent in
    other rollouts' sync calls meanwhile. Remembers its own longest sync call, to name it when it overruns."""

    started: float = attrs.field(factory=time.monotonic)
    ledger_at_start: float = attrs.field(factory=lambda: _LEDGER.total)
    own: float = 0.0  #: seconds of its own sync calls
    longest: tuple[str, float] | None = None  #: (what, seconds) of its longest sync call

    def charged(self) -> float:
        """Seconds charged so far."""
        others = (_LEDGER.total - self.ledger_at_start) - self.own
        return time.monotonic() - self.started - others

    def overran(self, timeout: float) -> str:
        """Why it timed out, naming its longest sync call when that took a good share of ``timeout``."""
        message = f"timed out after {timeout:g} s"
        if self.longest is not None and self.longest[1] >= min(1.0, timeout / 4):
            what, seconds = self.longest
            message += (
                f": {what} ran {seconds:.1f} s synchronously, blocking the event loop (rollout.timeout cannot cut off "
                "sync code: make it async, or faster; see docs/plugins.md)"
            )
        return message


_stopwatch: contextvars.ContextVar[Stopwatch | None] = contextvars.ContextVar("minds_stopwatch", default=None)


def blocking_now() -> SyncCall | None:
    """The sync plugin call the event loop's thread is in now (None: none). Safe to read from a signal handler."""
    return _running


@contextlib.contextmanager
def _timed(what: str) -> Iterator[None]:
    global _running
    outer = _running
    call = _running = SyncCall(what, time.monotonic())
    try:
        yield
    finally:
        _running = outer
        seconds = call.seconds()
        named = call.inner if call.inner is not None and call.inner[1] >= seconds / 2 else (what, seconds)
        if outer is not None:  # a call nested in another (an episode's step calling its rubric) is counted once,
            if outer.inner is None or named[1] > outer.inner[1]:  # by the outer, named as the inner that took most
                outer.inner = named
        else:
            _LEDGER.total += seconds
            watch = _stopwatch.get()
            if watch is not None:
                watch.own += seconds
                if watch.longest is None or seconds > watch.longest[1]:
                    watch.longest = named


async def plugin_call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on this thread, its sync part timed as ``what``; an awaitable result is awaited, each
    stretch of it that runs on this thread (an ``async def`` between two awaits: ``time.sleep`` there blocks as
    much) timed as ``what`` too.

    The call is traced as a span (``span_name(what)``) whose ``call`` attribute is ``what``."""
    with span(span_name(what), call=what):
        with _timed(what):
            value = fn(*args, **kwargs)
        return await _stepped(what, value.__await__()) if inspect.isawaitable(value) else value


@types.coroutine
def _stepped(what: str, steps: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """Await an awaitable's iterator (``__await__()``) step by step, each step timed as ``what``; what the event
    loop sends or throws in (a cancellation) is passed on to it."""
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        try:
            with _timed(what):
                waiting_on = steps.throw(thrown) if thrown is not None else steps.send(sent)
        except StopIteration as done:
            return done.value
        sent, thrown = None, None
        try:
            sent = yield waiting_on
        except GeneratorExit:
            steps.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - the loop's cancellation (or any error), for the awaitable
            thrown = exc


def span_name(what: str) -> str:
    """The span of a plugin call: ``<name> reward`` for a reward function, ``env.<method>`` for an environment's
    method (``episode Foo.step`` -> ``env.step``)."""
    if what.startswith(("reward function ", "group reward function ")):
        return f"{what.split('function ', 1)[1].strip(chr(39))} reward"
    return f"env.{what.rsplit('.', 1)[-1]}" if "." in what else what


async def within_timeout(work: Awaitable[T], timeout: float) -> T:
    """``work``, cut off once ``timeout`` seconds (0: none) are charged to it (``Stopwatch``): a TimeoutError
    whose message names its own sync call that overran. Time other rollouts' sync calls held the loop is excused;
    work that finished only because its own sync code ran past the timeout (which nothing can cut off) timed out too."""
    watch = Stopwatch()
    token = _stopwatch.set(watch)
    try:
        task = asyncio.ensure_future(work)  # the task copies this context: its sync calls are charged to ``watch``
    finally:
        _stopwatch.reset(token)
    if timeout <= 0:
        return await task
    try:
        while not task.done():
            left = timeout - watch.charged()
            if left <= 0:
                raise TimeoutError(watch.overran(timeout))
            await asyncio.wait({task}, timeout=left)
        if watch.charged() > timeout and watch.own > 0:  # done, but late: its own sync code ran past the timeout
            raise TimeoutError(watch.overran(timeout))
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
