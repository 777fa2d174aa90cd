"""Trajectories -> tinker.Datum: shifted by one, advantages and logprobs only on sampled tokens."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import tinker

#: What every datum carries: the tokens each input position predicts, the sampler's log-probs, the advantages.
BASE_INPUTS = ("target_tokens", "logprobs", "advantages")

#: The further inputs a loss may ask for (``CustomLoss.inputs``, ``BUILTIN_LOSSES``): name -> its
#: per-target values from the sampled mask of the targets.
EXTRA_INPUTS: dict[str, Callable[[Sequence[bool]], list[float]]] = {
    # 1 on sampled targets: the tokens gspo's sequence ratio averages over
    "sequence_ratio_mask": lambda sampled: [1.0 if s else 0.0 for s in sampled],
}


def rl_datum(
    tokens: Sequence[int],
    sampled: Sequence[bool],
    logprobs: Sequence[float],
    advantages: Sequence[float],
    extra_inputs: Collection[str] = (),
) -> tinker.Datum:
    """One datum for a full sequence.

    ``model_input = tokens[:-1]`` and ``target_tokens = tokens[1:]``: input
    position i predicts token i + 1, so target i carries the sampler logprob and
    advantage of token i + 1 when that token was sampled, and 0 otherwise
    (prompt, tool output and template tokens). ``advantages`` is per token.
    ``extra_inputs`` names inputs of EXTRA_INPUTS the loss reads beyond BASE_INPUTS.
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
    for name in extra_inputs:
        inputs[name] = tinker.TensorData(data=EXTRA_INPUTS[name](sampled[1:]), dtype="float32", shape=[n - 1])
    return tinker.Datum(model_input=tinker.types.ModelInput.from_ints(list(tokens[:-1])), loss_fn_inputs=inputs)
