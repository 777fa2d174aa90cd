"""Event loops that outlive one call: for plugins whose synchronous entry points drive async code.

A Ray worker playing episodes, or a process hosting local environment servers, needs one
event loop that stays up between calls (clients and servers made on it keep working);
``background_loop(name)`` gives each name one such loop, running in a daemon thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from typing import Any

_loops: dict[str, asyncio.AbstractEventLoop] = {}
_lock = threading.Lock()


def background_loop(name: str) -> asyncio.AbstractEventLoop:
    """The process's event loop called ``name`` (also its thread's name), started on first use.

    Submit work with ``asyncio.run_coroutine_threadsafe(coro, background_loop(name))``.
    """
    with _lock:
        if name not in _loops:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name=name, daemon=True).start()
            _loops[name] = loop
        return _loops[name]


def run_to_completion(value: Any) -> Any:
    """``value`` itself, or, when it is awaitable, its result, run on an event loop of its own in a thread
    (loading code is synchronous but may be called while the run's own loop is running)."""
    if not inspect.isawaitable(value):
        return value
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _awaited(value)).result()


async def _awaited(value: Any) -> Any:
    return await value
