"""Built-in advantage estimators: a group's rewards -> one advantage per rollout."""

from __future__ import annotations

import math
from collections.abc import Sequence

#: Below this standard deviation a group counts as constant (group_norm gives zeros).
STD_EPSILON = 1e-8


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def is_constant(rewards: Sequence[float]) -> bool:
    """Whether every reward of the group is the same value (a group of 0 or 1 counts as constant).

    Such a group says nothing about which rollout was better: the centered
    estimators return exact zeros for it, never the float noise of
    ``r - mean`` (0.1 - mean([0.1] * 8) is -1.4e-17, not 0).
    """
    return all(r == rewards[0] for r in rewards)


def group_mean(rewards: Sequence[float]) -> list[float]:
    """r - mean(group): the seeds' centered advantage; exact zeros for a constant group."""
    if is_constant(rewards):
        return [0.0 for _ in rewards]
    mean = _mean(rewards)
    return [r - mean for r in rewards]


def group_norm(rewards: Sequence[float]) -> list[float]:
    """(r - mean) / sample stdev of the group; zeros when the group is constant or its stdev is below 1e-8."""
    if len(rewards) < 2 or is_constant(rewards):
        return [0.0 for _ in rewards]
    mean = _mean(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    if std < STD_EPSILON:
        return [0.0 for _ in rewards]
    return [(r - mean) / std for r in rewards]


def direct(rewards: Sequence[float]) -> list[float]:
    """The reward itself, no baseline (so a constant group still trains; see rollout.drop_constant_reward_groups)."""
    return [float(r) for r in rewards]


def rloo(rewards: Sequence[float]) -> list[float]:
    """r_i - mean of the OTHER rewards of the group (leave-one-out baseline); exact zeros for a constant group."""
    n = len(rewards)
    if n < 2 or is_constant(rewards):
        return [0.0 for _ in rewards]
    total = math.fsum(rewards)
    return [r - (total - r) / (n - 1) for r in rewards]


def no_reward(rewards: Sequence[float]) -> list[float]:
    """0 for every rollout: only per-token terms (the KL to trainer.kl_reference) train, as in on-policy distillation."""
    return [0.0 for _ in rewards]


ESTIMATORS = {
    "group_mean": (group_mean, "reward minus the group mean (centered)"),
    "group_norm": (group_norm, "centered and divided by the group's sample stdev"),
    "direct": (direct, "the raw reward"),
    "rloo": (rloo, "reward minus the mean of the other rollouts of the group"),
    "none": (no_reward, "no reward signal; with kl_penalty and kl_reference = a teacher: on-policy distillation"),
}


def kl_terms(sampler_logprobs: Sequence[float], base_logprobs: Sequence[float | None], sampled: Sequence[bool]) -> list[float]:
    """Per token, log q - log p_base (the sampled-token KL estimate); 0 where the token was not sampled."""
    return [(q - (b or 0.0)) if s else 0.0 for q, b, s in zip(sampler_logprobs, base_logprobs, sampled)]


def kl_penalized(advantage: float, terms: Sequence[float], coef: float) -> list[float]:
    """Per-token advantages A - coef * (log q - log p_base): drifting from the base model costs reward."""
    return [advantage - coef * t for t in terms]
