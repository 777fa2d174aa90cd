"""Measurements shared by the rollouts that score with the same policy snapshot."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class Memo:
    """Results keyed by (scope, key); only the ``keep`` newest scopes are remembered.

    Concurrent callers share the one in-flight computation; a failed one is
    forgotten so that the next caller tries again.
    """

    def __init__(self, keep: int = 4) -> None:
        self._keep = keep
        self._scopes: OrderedDict[Hashable, dict[Hashable, asyncio.Future[Any]]] = OrderedDict()

    async def get(self, scope: Hashable, key: Hashable, compute: Callable[[], Awaitable[T]]) -> T:
        """The memoised ``await compute()`` for this scope and key."""
        results = self._scopes.setdefault(scope, {})
        self._scopes.move_to_end(scope)
        while len(self._scopes) > self._keep:
            self._scopes.popitem(last=False)
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


class _Same:
    """Equal only to a wrapper of the same object (holding it keeps its id from being reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


class SamplerMemo:
    """A Memo whose scopes are sampling clients, told apart by identity.

    A sampling client is a snapshot of the policy, so a measurement made with it
    holds for every rollout that scores with it: a group of G rollouts of one
    task measures once.
    """

    def __init__(self, keep: int = 4) -> None:
        self._memo = Memo(keep)

    async def get(self, sampler: Any, key: Hashable, compute: Callable[[], Awaitable[T]]) -> T:
        """The memoised ``await compute()`` for this sampler and key."""
        return await self._memo.get(_Same(sampler), key, compute)


#: The memo the environments of this plugin share.
MEMO = SamplerMemo()
