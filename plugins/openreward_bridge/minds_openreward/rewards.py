"""The seed's per-rollout reward: reduce the tool rewards, score unfinished episodes, clamp."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from minds_openreward.settings import BridgeSettings

_REDUCE: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": lambda values: float(sum(values)),
    "mean": statistics.fmean,
    "max": max,
    "min": min,
}


def rollout_reward(rewards: Sequence[float], finished: bool, settings: BridgeSettings) -> float | None:
    """The reduced reward, or None when there is nothing to reduce (a failed rollout).

    When the episode did not finish and ``nonterminal_reward`` is set, that value
    joins the list first; ``min_reward`` / ``max_reward`` clamp the result.
    """
    values = list(rewards)
    if not finished and settings.nonterminal_reward is not None:
        values.insert(0, settings.nonterminal_reward)
    if not values:
        return None
    reward = _REDUCE[settings.reward_reduction](values)
    if settings.min_reward is not None:
        reward = max(reward, settings.min_reward)
    if settings.max_reward is not None:
        reward = min(reward, settings.max_reward)
    return reward
