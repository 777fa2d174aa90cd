"""Policy losses: Tinker's built-ins by name, and custom losses run via forward_backward_custom."""

from __future__ import annotations

from typing import Any

import attrs

from minds_core.base.errors import ConfigError
from minds_core.contract.parts import CustomLoss
from minds_core.training.columns import datum_column


@attrs.frozen
class BuiltinLoss:
    """A loss the service computes itself, registered under its Tinker name."""

    #: what it computes, for ``minds plugins``
    description: str
    #: the datum inputs it reads beyond target_tokens, logprobs and advantages (names of ``datums.EXTRA_INPUTS``)
    inputs: tuple[str, ...] = ()


#: Losses the service computes itself (see shared/reference/tinker.md for the formulas).
BUILTIN_LOSSES = {
    "importance_sampling": BuiltinLoss("sum of r * A, r = p / q (REINFORCE with an importance ratio)"),
    "ppo": BuiltinLoss("clipped importance ratio (clip_low_threshold, clip_high_threshold)"),
    "cispo": BuiltinLoss("clipped ratio as a stop-gradient weight on log p * A"),
    "dro": BuiltinLoss("log p * A with a quadratic penalty on log p - log q (beta)"),
    "gspo": BuiltinLoss(
        "PPO's clip on the sequence-level ratio exp(mean log p/q) (GSPO-token; reads sequence_ratio_mask)",
        inputs=("sequence_ratio_mask",),
    ),
}


def loss_inputs(loss: str | CustomLoss, key: str = "trainer.loss_fn") -> tuple[str, ...]:
    """The datum inputs a registered loss reads beyond the base ones; a ConfigError naming ``key`` when minds cannot make one.

    A service loss name minds does not know (a plugin's) reads none.
    """
    # imported here: datums imports tinker, and `minds plugins` loads this module
    from minds_core.rl.topk_distill import TEACHER_INPUTS
    from minds_core.training.datums import EXTRA_INPUTS

    declared = loss.inputs if isinstance(loss, CustomLoss) else BUILTIN_LOSSES.get(loss, BuiltinLoss("")).inputs
    known = (*EXTRA_INPUTS, *TEACHER_INPUTS)
    unknown = [name for name in declared if name not in known]
    if unknown:
        raise ConfigError(
            f"{key}: the loss reads datum inputs minds cannot make: {', '.join(unknown)}; "
            f"a loss may ask for: {', '.join(known)}"
        )
    return declared


def sequence_mean_reinforce(data: list[Any], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
    """REINFORCE with each sequence's term averaged over its trained tokens.

    The built-ins sum over tokens, so long completions weigh more; this loss
    gives every rollout the same weight regardless of length.
    """
    total = logprobs[0].new_zeros(())
    tokens = 0
    for datum, lp in zip(data, logprobs):
        advantages = datum_column(datum, "advantages").to(lp.dtype)
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
