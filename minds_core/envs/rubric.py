"""Rubrics: weighted reward functions that receive what they name."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

#: Names a reward function may ask for.
REWARD_ARGUMENTS = ("completion", "prompt", "task", "answer", "info", "state", "ctx", "messages")

RewardFn = Callable[..., Any]


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (sync and async environments alike)."""
    return await value if inspect.isawaitable(value) else value


def call_with_available(fn: Callable[..., Any], available: Mapping[str, Any]) -> Any:
    """Call ``fn`` with the arguments it names, taken from ``available``."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(**available)
    kwargs = {}
    for name, param in params.items():
        if name in available:
            kwargs[name] = available[name]
        elif param.default is inspect.Parameter.empty and param.kind is not inspect.Parameter.VAR_POSITIONAL:
            label = getattr(fn, "__qualname__", repr(fn))
            raise TypeError(
                f"reward function {label} asks for {name!r}; it may ask for: {', '.join(sorted(available))}"
            )
    return fn(**kwargs)


def as_reward(value: Any) -> float | None:
    """A finite float, or None when the value is None, NaN, infinite or not a number."""
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@attrs.define
class Rubric:
    """A weighted list of reward functions; ``score`` returns the total and each part."""

    funcs: list[RewardFn] = attrs.field(factory=list)
    weights: list[float] = attrs.field(factory=list)
    names: list[str] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        if not self.weights:
            self.weights = [1.0] * len(self.funcs)
        if not self.names:
            self.names = [getattr(f, "__name__", f"reward_{i}") for i, f in enumerate(self.funcs)]
        if not len(self.funcs) == len(self.weights) == len(self.names):
            raise ValueError(f"rubric has {len(self.funcs)} functions but {len(self.weights)} weights")

    def add(self, fn: RewardFn, weight: float = 1.0, name: str | None = None) -> None:
        self.funcs.append(fn)
        self.weights.append(weight)
        self.names.append(name or getattr(fn, "__name__", f"reward_{len(self.funcs)}"))

    async def score(self, available: Mapping[str, Any]) -> RubricScore:
        """Weighted sum of the parts; a part that is not a finite number counts 0 and is named."""
        score = RubricScore()
        for fn, weight, name in zip(self.funcs, self.weights, self.names):
            value = as_reward(await maybe_await(call_with_available(fn, available)))
            if value is None:
                score.invalid.append(name)
                continue
            score.parts[name] = value
            score.total += weight * value
        return score


@attrs.define
class RubricScore:
    """A rubric's result: the weighted total, each part, and the parts that were not numbers."""

    total: float = 0.0
    parts: dict[str, float] = attrs.field(factory=dict)
    invalid: list[str] = attrs.field(factory=list)


def rubric_from(pairs: Sequence[tuple[str, RewardFn, float]]) -> Rubric:
    """A rubric from (name, function, weight) triples."""
    return Rubric([f for _, f, _ in pairs], [w for _, _, w in pairs], [n for n, _, _ in pairs])

#: StepResult metric counting rubric parts that were not finite numbers (counted as 0).
INVALID_PARTS_METRIC = "invalid_reward_parts"
