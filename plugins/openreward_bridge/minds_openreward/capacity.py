"""Session concurrency that adapts to the server: lower on HTTP 429, probe back up on success."""

from __future__ import annotations

import asyncio
import random


def backoff_seconds(attempt: int, base: float, cap: float = 30.0) -> float:
    """Exponential backoff with jitter for the ``attempt``-th retry (1-based)."""
    return min(cap, base * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)


class AdaptiveLimiter:
    """Caps concurrent sessions at ``limit`` (None: no cap until the server first says 429).

    A slot is taken before a session starts opening and given back after it
    closed (or failed to open). A capacity error lowers the limit to the
    sessions open at that moment (at least one); every ``limit`` successful
    openings in a row raise it by one, up to ``ceiling``. ``max_in_flight``
    records the most slots ever taken at once.
    """

    def __init__(self, ceiling: int | None = None) -> None:
        self.ceiling = ceiling
        self.limit = ceiling
        self.in_flight = 0
        self.open = 0
        self.max_in_flight = 0
        self.reductions = 0
        self._streak = 0
        self._condition: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _cond(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self._condition is None or self._loop is not loop:
            self._condition, self._loop = asyncio.Condition(), loop
        return self._condition

    async def acquire(self) -> None:
        """Wait for a free slot and take it."""
        cond = self._cond()
        async with cond:
            await cond.wait_for(lambda: self.limit is None or self.in_flight < self.limit)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    async def release(self, was_open: bool) -> None:
        """Give a slot back (``was_open``: its session had opened)."""
        cond = self._cond()
        async with cond:
            self.in_flight -= 1
            self.open -= was_open
            cond.notify_all()

    def opened(self) -> None:
        """A session opened: after a streak as long as the limit, allow one more (waiters wake on the next release)."""
        self.open += 1
        if self.limit is None or (self.ceiling is not None and self.limit >= self.ceiling):
            return
        self._streak += 1
        if self._streak >= self.limit:
            self.limit, self._streak = self.limit + 1, 0

    def refused(self) -> None:
        """The server is at capacity: hold no more sessions than are open now."""
        self.limit = max(1, min(self.open, self.limit if self.limit is not None else self.open))
        self._streak = 0
        self.reductions += 1
