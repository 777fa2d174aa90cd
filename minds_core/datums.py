"""Trajectories -> tinker.Datum: shifted by one, advantages and logprobs only on sampled tokens."""

from __future__ import annotations

from collections.abc import Sequence

import tinker


def build_datum(
    tokens: Sequence[int],
    sampled: Sequence[bool],
    logprobs: Sequence[float],
    advantages: Sequence[float],
    sequence_ratio_mask: bool = False,
) -> tinker.Datum:
    """One datum for a full sequence.

    ``model_input = tokens[:-1]`` and ``target_tokens = tokens[1:]``: input
    position i predicts token i + 1, so target i carries the sampler logprob and
    advantage of token i + 1 when that token was sampled, and 0 otherwise
    (prompt, tool output and template tokens). ``advantages`` is per token.
    ``sequence_ratio_mask`` adds that input (1 on sampled targets) for the
    ``gspo`` loss, whose sequence ratio averages over those tokens.
    """
    n = len(tokens)
    if n < 2:
        raise ValueError("a datum needs at least two tokens")
    if not len(sampled) == len(logprobs) == len(advantages) == n:
        raise ValueError(f"lengths differ: {n} tokens, {len(sampled)} mask, {len(logprobs)} logprobs, {len(advantages)} advantages")
    targets = list(tokens[1:])
    target_logprobs = [float(logprobs[i]) if sampled[i] else 0.0 for i in range(1, n)]
    target_advantages = [float(advantages[i]) if sampled[i] else 0.0 for i in range(1, n)]
    inputs = {
        "target_tokens": tinker.TensorData(data=targets, dtype="int64", shape=[n - 1]),
        "logprobs": tinker.TensorData(data=target_logprobs, dtype="float32", shape=[n - 1]),
        "advantages": tinker.TensorData(data=target_advantages, dtype="float32", shape=[n - 1]),
    }
    if sequence_ratio_mask:
        mask = [1.0 if sampled[i] else 0.0 for i in range(1, n)]
        inputs["sequence_ratio_mask"] = tinker.TensorData(data=mask, dtype="float32", shape=[n - 1])
    return tinker.Datum(model_input=tinker.types.ModelInput.from_ints(list(tokens[:-1])), loss_fn_inputs=inputs)
