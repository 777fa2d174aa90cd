"""Futures of the local backend: the SDK's own ``APIFuture``, fed by worker threads."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

T = TypeVar("T")

__all__ = ["RequestQueue", "completed_future", "failed_future"]


class RequestQueue:
    """One worker thread that runs requests strictly in submission order.

    Each request's outcome (value or exception) goes to its own future only, so
    a failed request never stops the ones queued behind it.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def submit(self, fn: Callable[[], T]) -> AwaitableConcurrentFuture[T]:
        """Queue ``fn``; await the returned future or call ``.result()`` on it."""
        try:
            return AwaitableConcurrentFuture(self._executor.submit(fn))
        except RuntimeError as exc:
            raise RuntimeError(f"{self._name} is closed") from exc

    def close(self) -> None:
        """Refuse new requests; the queued ones still run."""
        self._executor.shutdown(wait=False)


def completed_future(value: T) -> AwaitableConcurrentFuture[T]:
    """An already resolved future."""
    future: Future[T] = Future()
    future.set_result(value)
    return AwaitableConcurrentFuture(future)


def failed_future(error: BaseException) -> AwaitableConcurrentFuture[T]:
    """An already failed future: awaiting it or calling ``.result()`` raises ``error``."""
    future: Future[T] = Future()
    future.set_exception(error)
    return AwaitableConcurrentFuture(future)
