"""Policy losses: Tinker's built-ins by name, and custom losses run via forward_backward_custom."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

#: Losses the service computes itself (see shared/reference/tinker.md for the formulas).
BUILTIN_LOSSES = {
    "importance_sampling": "sum of r * A, r = p / q (REINFORCE with an importance ratio)",
    "ppo": "clipped importance ratio (clip_low_threshold, clip_high_threshold)",
    "cispo": "clipped ratio as a stop-gradient weight on log p * A",
    "dro": "log p * A with a quadratic penalty on log p - log q (beta)",
    "gspo": "PPO's clip on the sequence-level ratio exp(mean log p/q) (GSPO-token; needs sequence_ratio_mask)",
}


@attrs.frozen
class CustomLoss:
    """A loss computed on the client: ``fn(data, logprobs) -> (loss, metrics)``.

    ``logprobs[i]`` is a torch tensor (requires grad) of the target-token
    log-probabilities of ``data[i]``; the loss is a scalar tensor.
    """

    fn: Callable[[list[Any], list[Any]], tuple[Any, dict[str, float]]]


def _column(datum: Any, key: str) -> Any:
    import torch

    value = datum.loss_fn_inputs[key]
    return value.to_torch() if hasattr(value, "to_torch") else torch.as_tensor(value)


def sequence_mean_reinforce(data: list[Any], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
    """REINFORCE with each sequence's term averaged over its trained tokens.

    The built-ins sum over tokens, so long completions weigh more; this loss
    gives every rollout the same weight regardless of length.
    """
    total = logprobs[0].new_zeros(())
    tokens = 0
    for datum, lp in zip(data, logprobs):
        advantages = _column(datum, "advantages").to(lp.dtype)
        trained = advantages != 0
        count = int(trained.sum())
        tokens += count
        if count:
            total = total - (advantages * lp)[trained].sum() / count
    return total, {"trained_tokens:sum": float(tokens)}


CUSTOM_LOSSES = {
    "sequence_mean_reinforce": (
        CustomLoss(sequence_mean_reinforce),
        "REINFORCE averaged per sequence (custom, via forward_backward_custom)",
    ),
}
