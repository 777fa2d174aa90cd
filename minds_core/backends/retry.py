"""Requests to the training service during a run: transient failures retried with backoff, the rest reported.

A request fails transiently when the connection broke or timed out, or the
service answered 408, 409, 429 or 5xx, or it ran and failed on the service's
side (``RequestFailedError`` of category ``server``); such a request is sent
again after 1, 2, 4 ... seconds. Any other failure (the service rejected the
request: a loss it does not support, a bad argument) and a transient one
still failing after the last attempt raise ``ServiceCallError``: one message
naming where in the run it happened, the request and the service's answer.

A service that stops answering altogether (its process killed, its machine gone) is
not left to the SDK, which retries a lost connection for many minutes: with a
``Backoff.watch`` (``connection.ServiceWatch``, ``tinker.unreachable_timeout``) a
request in flight fails as soon as the watch finds the service lost (``ServiceLost``),
and so does any wait ``guarded`` by it (a step's sampling).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import tinker

from minds_core.base.errors import MindsError
from minds_core.base.logs import get_logger

T = TypeVar("T")
log = get_logger("service")

#: HTTP statuses that mean "try again" (as the SDK's own retries read them), besides 5xx.
RETRY_STATUSES = frozenset({408, 409, 429})

#: Service errors when a client is created that mean the request was wrong (bad model name, key, checkpoint).
REJECTIONS = (tinker.BadRequestError, tinker.AuthenticationError, tinker.PermissionDeniedError, tinker.NotFoundError)


def is_transient(error: BaseException) -> bool:
    """Whether sending the same request again may succeed."""
    if isinstance(error, tinker.APIConnectionError):  # APITimeoutError too
        return True
    if isinstance(error, tinker.APIStatusError):
        return error.status_code in RETRY_STATUSES or error.status_code >= 500
    if isinstance(error, tinker.RequestFailedError):
        return str(error.category) == "server"
    return False


class ServiceLost(Exception):
    """The service has not answered at all (connections refused or unanswered) for ``tinker.unreachable_timeout`` s."""


@attrs.frozen
class Backoff:
    """How often and how patiently a transient failure is retried."""

    attempts: int = 4  #: tries in all, the first included
    first_delay: float = 1.0  #: seconds before the second try; doubled before each next one
    max_delay: float = 30.0  #: no wait is longer
    #: the service's liveness (``connection.ServiceWatch``; None: not watched): once it is lost, requests fail at once
    watch: Any = None

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failed try."""
        return min(self.first_delay * 2 ** (failures - 1), self.max_delay)


class ServiceCallError(MindsError):
    """A request to the training service failed for good during a run (exit code 1).

    ``intact_after`` is set by the trainer when nothing of the failed step reached
    the training state: it still holds exactly the update of that step, which can
    be saved as its checkpoint.
    """

    def __init__(self, where: str, request: str, error: BaseException, attempts: int, after: str = "") -> None:
        self.where, self.request, self.error, self.attempts = where, request, error, attempts
        self.intact_after: int | None = None
        answer = " ".join(f"{type(error).__name__}: {error}".split())
        if isinstance(error, ServiceLost):
            what = f"{request} got no answer"
        elif is_transient(error):
            what = f"{request} still failed after {attempts} attempts"
        else:
            what = f"the service rejected {request}"
        super().__init__(f"{where}: {what} ({answer})" + (f"; {after}" if after else ""))

    def resumable(self, run_dir: Path, last_step: int | None) -> ServiceCallError:
        """The same error, its message ending with what the run kept and how to continue it."""
        if last_step is None:
            after = "no checkpoint was saved before it, so a new run starts over"
        else:
            after = f"the last checkpoint is step {last_step}: minds run --resume {run_dir} continues from step {last_step + 1}"
        return ServiceCallError(self.where, self.request, self.error, self.attempts, after)


async def call_service(
    where: str, request: str, send: Callable[[], Awaitable[T]], backoff: Backoff, sent: Awaitable[T] | None = None
) -> tuple[T, int]:
    """The result of ``send()`` (or of ``sent``, a first try already in flight) and the tries it took.

    Transient failures are retried after ``backoff``'s delays; others, and the last
    try's, raise ``ServiceCallError``. Errors that are not the service's propagate.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return await guarded(sent if attempt == 1 and sent is not None else send(), backoff), attempt
        except ServiceLost as exc:
            raise ServiceCallError(where, request, exc, attempt) from None
        except tinker.TinkerError as exc:
            if not is_transient(exc) or attempt >= backoff.attempts:
                raise ServiceCallError(where, request, exc, attempt) from exc
            delay = backoff.delay(attempt)
            log.warning("service request failed, retrying", where=where, request=request, attempt=attempt,
                        retry_in=delay, error=f"{type(exc).__name__}: {exc}")  # fmt: skip
            await asyncio.sleep(delay)


async def guarded(pending: Awaitable[T], backoff: Backoff) -> T:
    """``await pending``, or ``ServiceLost`` as soon as ``backoff.watch`` finds the service gone."""
    if backoff.watch is None:
        return await pending
    return await backoff.watch.guard(pending)


def send_now(send: Callable[[], Awaitable[T]]) -> Awaitable[T]:
    """``send()``, its request in flight; a service error raised while sending is raised when awaited."""
    try:
        return send()
    except tinker.TinkerError as exc:
        return _failed(exc)


async def _failed(error: BaseException) -> Any:
    raise error


async def settle(pending: Awaitable[Any], backoff: Backoff) -> None:
    """Wait for a request whose result no longer matters (its service errors are dropped; a lost service ends the wait)."""
    try:
        await guarded(pending, backoff)
    except (tinker.TinkerError, ServiceLost):
        pass
