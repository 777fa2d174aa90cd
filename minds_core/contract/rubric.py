"""Rubrics: weighted reward functions that receive what they name."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from minds_core.base.blocking import plugin_call
from minds_core.base.errors import ConfigError

#: Names a reward function may ask for (see ``reward_inputs`` for what each holds).
REWARD_INPUTS = ("completion", "prompt", "task", "answer", "info", "state", "ctx", "messages")

#: Names a GROUP reward function may ask for: one list entry per member of the group (verifiers' plural
#: names), and ``ctx``. Naming any of them but ``ctx`` makes a function a group reward function.
GROUP_REWARD_INPUTS = ("completions", "prompts", "tasks", "answers", "infos", "ctx")

RewardFn = Callable[..., Any]


def is_group_reward(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` scores a whole group: it names one of GROUP_REWARD_INPUTS other than ``ctx``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return any(name in params for name in GROUP_REWARD_INPUTS if name != "ctx")


def check_reward_inputs(fn: Callable[..., Any], name: str) -> None:
    """A ConfigError naming ``fn``, the input it asks for that no rollout provides, and the accepted names.

    Parameters with a default, ``*args`` and ``**kwargs`` ask for nothing; a callable without a
    signature is not checked.
    """
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return
    accepted = GROUP_REWARD_INPUTS if is_group_reward(fn) else REWARD_INPUTS
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.default is not param.empty:
            continue
        if param.name not in accepted:
            kind = "group reward function" if accepted is GROUP_REWARD_INPUTS else "reward function"
            raise ConfigError(
                f"{kind} {name!r} asks for {param.name!r}, which no rollout provides; it may ask for: {', '.join(accepted)}"
            )


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


#: The largest reward magnitude accepted: beyond it a reward is invalid (``rollout.invalid_reward``), as NaN
#: is, so that sums, means and advantages of a batch stay finite (1e308 + 1e308 overflows).
MAX_REWARD = 1e12


def as_reward(value: Any) -> float | None:
    """A float within ±MAX_REWARD, or None when the value is None, NaN, infinite, out of range or not a number."""
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_REWARD else None


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
        for fn, name in zip(self.funcs, self.names):
            check_reward_inputs(fn, name)

    def add(self, fn: RewardFn, weight: float = 1.0, name: str | None = None) -> None:
        """Append ``fn``; a ConfigError when it asks for an input no rollout provides."""
        name = name or getattr(fn, "__name__", f"reward_{len(self.funcs) + 1}")
        check_reward_inputs(fn, name)
        self.funcs.append(fn)
        self.weights.append(weight)
        self.names.append(name)

    @classmethod
    def from_entries(cls, entries: Sequence[tuple[str, RewardFn, float]]) -> Rubric:
        """A rubric from (name, function, weight) triples."""
        return cls([f for _, f, _ in entries], [w for _, _, w in entries], [n for n, _, _ in entries])

    @property
    def has_group_rewards(self) -> bool:
        return any(is_group_reward(fn) for fn in self.funcs)

    async def score(self, available: Mapping[str, Any]) -> RubricScore:
        """Weighted sum of the per-rollout parts; a part that is not a finite number counts 0 and is named.

        Group reward functions are skipped here: ``score_group`` runs them once per group.
        """
        score = RubricScore()
        for fn, weight, name in zip(self.funcs, self.weights, self.names):
            if not is_group_reward(fn):
                score.add(name, weight, await plugin_call(f"reward function {name!r}", call_with_available, fn, available))
        return score

    async def score_group(self, available: Mapping[str, Any], size: int) -> list[RubricScore]:
        """The group reward functions, each called once with lists of ``size`` entries; one score per member.

        A function that raises, or returns anything but ``size`` values, raises (naming it).
        """
        scores = [RubricScore() for _ in range(size)]
        for fn, weight, name in zip(self.funcs, self.weights, self.names):
            if not is_group_reward(fn):
                continue
            values = await plugin_call(f"group reward function {name!r}", call_with_available, fn, available)
            if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) != size:
                got = f"{len(values)} values" if hasattr(values, "__len__") and not isinstance(values, (str, bytes)) else repr(values)[:80]
                raise ValueError(f"group reward function {name} must return one reward per member ({size}), got {got}")
            for score, value in zip(scores, values):
                score.add(name, weight, value)
        return scores


@attrs.define
class RubricScore:
    """A rubric's result: the weighted total, each part, and the parts that were not numbers."""

    total: float = 0.0
    parts: dict[str, float] = attrs.field(factory=dict)
    invalid: list[str] = attrs.field(factory=list)

    def add(self, name: str, weight: float, raw: Any) -> None:
        """Add one part: ``weight * raw`` when ``raw`` is a finite number, else name it invalid."""
        value = as_reward(raw)
        if value is None:
            self.invalid.append(name)
            return
        self.parts[name] = value
        self.total += weight * value

#: StepResult metric counting rubric parts that were not finite numbers (counted as 0).
INVALID_PARTS_METRIC = "invalid_reward_parts"
