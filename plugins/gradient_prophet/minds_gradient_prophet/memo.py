"""Measurements shared by the rollouts of one task that score with the same policy snapshot."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class SamplerMemo:
    """Results keyed by (sampling client, key); only the ``keep`` newest clients are remembered.

    A sampling client is a snapshot of the policy, so a measurement made with it
    holds for every rollout that scores with it: a group of G rollouts of one
    task measures once. Concurrent callers share the one in-flight measurement;
    a failed measurement is forgotten so that the next caller tries again.
    """

    def __init__(self, keep: int = 4) -> None:
        self._keep = keep
        self._by_sampler: OrderedDict[int, tuple[Any, dict[Hashable, asyncio.Future[Any]]]] = OrderedDict()

    async def get(self, sampler: Any, key: Hashable, compute: Callable[[], Awaitable[T]]) -> T:
        """The memoised ``await compute()`` for this sampler and key."""
        entry = self._by_sampler.get(id(sampler))
        if entry is None or entry[0] is not sampler:
            entry = (sampler, {})  # holding the sampler keeps its id from being reused
            self._by_sampler[id(sampler)] = entry
            while len(self._by_sampler) > self._keep:
                self._by_sampler.popitem(last=False)
        self._by_sampler.move_to_end(id(sampler))
        results = entry[1]
        future = results.get(key)
        if future is None or future.get_loop() is not asyncio.get_running_loop():
            future = asyncio.ensure_future(compute())
            results[key] = future
        try:
            return await asyncio.shield(future)
        except Exception:
            if results.get(key) is future:
                del results[key]
            raise


#: The memo the environments of this plugin share.
MEMO = SamplerMemo()
