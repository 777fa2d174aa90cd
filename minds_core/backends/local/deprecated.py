"""The SDK's deprecated ``*_async`` spellings of client methods, for the local clients.

The SDK keeps ``forward_backward_async``, ``create_lora_training_client_async``,
``sample_async``, ... during a deprecation window: calling one warns
(``FutureWarning``) and gives a coroutine. A request method's twin resolves to
the request's future (``fut = await client.forward_backward_async(...)``, then
``await fut`` or ``fut.result()``); the twin of a method that makes a client,
samples or answers at once resolves to the value itself. Code written against
them (the OpenReward recipe's ``main.py``, older cookbook loops) runs unchanged.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["async_twin"]


def async_twin(name: str, *, awaits: bool) -> Callable[..., Coroutine[Any, Any, Any]]:
    """The deprecated ``<name>_async`` method: warns when called; awaited, calls ``name`` (awaiting its result if ``awaits``)."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        owner = type(self).__name__
        warnings.warn(
            f"DEPRECATED: {owner}.{name}_async() is deprecated and will be removed in a future tinker SDK version. "
            f"Use {owner}.{name}(...) instead.",
            FutureWarning,
            stacklevel=2,
        )

        async def run() -> Any:
            result = getattr(self, name)(*args, **kwargs)
            return await result if awaits and inspect.isawaitable(result) else result

        return run()

    method.__name__ = method.__qualname__ = f"{name}_async"
    method.__doc__ = f"Deprecated (as in the SDK): ``{name}``, as a coroutine" + (
        " resolving to its result." if awaits else " resolving to its future."
    )
    return method
