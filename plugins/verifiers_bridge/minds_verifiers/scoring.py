"""A verifiers rubric made to score the way minds trains: failures counted, seed-era arguments supplied.

verifiers calls each reward function inside ``try``/``except`` and scores a
function that raises (or returns something ``float()`` refuses) as 0, with only
a log line. ``instrument`` wraps every function of a rubric (and of the members
of a ``RubricGroup``) so that such a failure is also recorded in the rollout's
``RolloutScoring``; the episode then fails the rollout instead of training on
the 0. The wrappers call the function leniently (``minds_core.envs.lenient``:
positional-only parameters, ``_``-named ones) and keep its ``__name__``, which
names its metric. A score-object provider gives every function an ``info``
with ``tinker_client`` (the rollout's policy sampler, with ``.tokenizer``) and
``tokenizer``, as the seed's trainer did, and the row's plain-string ``task``.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Iterator
from typing import Any

import attrs

from minds_core import PolicySampler, as_reward, lenient

#: Marks a function already wrapped (an environment object may be loaded twice).
_WRAPPED = "__minds_counted__"


@attrs.define
class RolloutScoring:
    """What one rollout's scoring receives and reports.

    ``sampler`` and ``tokenizer`` go into ``info`` as ``tinker_client`` and
    ``tokenizer``; ``task`` (when not None) is the row's plain-string ``task``;
    ``errors`` collects one line per reward function that failed.
    """

    sampler: PolicySampler
    tokenizer: Any
    task: str | None = None
    errors: list[str] = attrs.field(factory=list)


#: The scoring of the rollout being scored in this asyncio task (None outside a minds rollout).
SCORING: contextvars.ContextVar[RolloutScoring | None] = contextvars.ContextVar("minds_vf_scoring", default=None)


def members(rubric: Any) -> Iterator[Any]:
    """The rubric and, for a RubricGroup, every member rubric (depth first)."""
    yield rubric
    for member in getattr(rubric, "rubrics", None) or []:
        yield from members(member)


def instrument(rubric: Any) -> None:
    """Wrap every reward function of ``rubric`` (see the module docstring) and add the info provider, once."""
    if getattr(rubric, _WRAPPED, False):
        return
    for member in members(rubric):
        member.funcs = [_counted(fn) for fn in member.funcs]
    rubric.add_score_object_provider(_provided)
    setattr(rubric, _WRAPPED, True)


def _record(name: str, problem: str) -> None:
    scoring = SCORING.get()
    if scoring is not None:
        scoring.errors.append(f"reward function {name} {problem}")


def _checked(name: str, value: Any) -> Any:
    if as_reward(value) is None:
        _record(name, f"returned {value!r}, not a finite number")
    return value


def _counted(fn: Any) -> Any:
    if getattr(fn, _WRAPPED, False):
        return fn
    call = lenient(fn)
    name = call.__name__

    async def finish(pending: Any) -> Any:
        try:
            return _checked(name, await pending)
        except Exception as exc:
            _record(name, f"raised {type(exc).__name__}: {exc}")
            raise

    def counted(**available: Any) -> Any:
        try:
            value = call(**available)
        except Exception as exc:
            _record(name, f"raised {type(exc).__name__}: {exc}")
            raise
        return finish(value) if inspect.isawaitable(value) else _checked(name, value)

    counted.__name__ = name
    counted.__qualname__ = call.__qualname__
    setattr(counted, _WRAPPED, True)
    return counted


def _provided(state: Any) -> dict[str, Any]:
    scoring = SCORING.get()
    if scoring is None:
        return {}
    info = state.get("info") or {}
    provided: dict[str, Any] = {"info": {**info, "tinker_client": scoring.sampler, "tokenizer": scoring.tokenizer}}
    if scoring.task is not None:
        provided["task"] = scoring.task
    return provided
