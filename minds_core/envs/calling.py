"""Reward functions written for other frameworks, called the way those frameworks call them.

verifiers-style functions take what they name (``completion``, ``answer``,
``parser``, ...), may take everything through ``**kwargs`` (often spelled
``**_``), may declare positional-only parameters, and by convention name an
unused parameter ``_`` (or ``_x``). ``lenient`` turns such a function into one
that takes everything by keyword, which is what ``call_with_available`` and
verifiers' rubrics pass when a function has ``**kwargs``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

_EMPTY = inspect.Parameter.empty


def lenient(fn: Callable[..., Any], objects: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """``fn`` as ``call(**available)``: each parameter gets the value of its name.

    ``objects`` (a rubric's class objects such as ``parser``) fill names the
    caller does not give. Positional-only parameters are passed by position, a
    ``**kwargs`` parameter receives every other name, a parameter with a default
    that no name fills keeps its default, and one without a default whose name
    starts with ``_`` gets None. Any other missing name is a TypeError that
    lists what was available. The result keeps ``fn``'s ``__name__``; its
    ``names`` are the parameter names ``fn`` declares.
    """
    extra = dict(objects or {})
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature: pass everything by keyword
        params = [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    label = getattr(fn, "__qualname__", None) or repr(fn)
    named = {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}

    def call(**available: Any) -> Any:
        given = {**extra, **available}
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        positional_open = True  # positional-only parameters stop at the first one left to its default
        for p in params:
            if p.kind is p.VAR_POSITIONAL:
                continue
            if p.kind is p.VAR_KEYWORD:
                kwargs.update({k: v for k, v in given.items() if k not in named})
                continue
            if p.name in given:
                value = given[p.name]
            elif p.default is not _EMPTY:
                positional_open = positional_open and p.kind is not p.POSITIONAL_ONLY
                continue
            elif p.name.startswith("_"):
                value = None
            else:
                raise TypeError(f"reward function {label} asks for {p.name!r}; it may ask for: {', '.join(sorted(given))}")
            if p.kind is p.POSITIONAL_ONLY:
                if not positional_open:
                    raise TypeError(f"reward function {label}: positional-only {p.name!r} follows one left to its default")
                args.append(value)
            else:
                kwargs[p.name] = value
        return fn(*args, **kwargs)

    call.names = frozenset(named)  # type: ignore[attr-defined]
    call.__name__ = getattr(fn, "__name__", "reward")
    call.__qualname__ = label
    call.__doc__ = getattr(fn, "__doc__", None)
    return call
