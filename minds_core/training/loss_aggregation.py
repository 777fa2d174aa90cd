"""How a batch's per-token policy terms are combined into one loss (``trainer.loss_aggregation``).

The service's losses SUM their per-token terms. Every built-in RL objective is
positively homogeneous in the advantage (``f(r, c*A) = c * f(r, A)`` for
``c > 0``: importance sampling, PPO, CISPO, GSPO), so an aggregation is applied
by scaling each sequence's per-token advantages by one factor before the datums
are built. ``L_i`` is the number of sampled tokens of sequence ``i`` and ``N``
the number of sequences in the batch (every successful rollout of every group
that was not dropped, including those whose advantage is 0):

| mode | loss | used by |
|---|---|---|
| sum | ``sum_i sum_t l_it`` (the service's own sum) | Tinker's built-ins |
| token_mean | ``sum_i sum_t l_it / sum_i L_i`` | DAPO |
| sequence_mean | ``1/N sum_i (1/L_i) sum_t l_it`` | GRPO, GSPO |
| fixed_length | ``1/N sum_i sum_t l_it / max_tokens`` | Dr. GRPO (a constant normaliser) |
"""

from __future__ import annotations

from collections.abc import Sequence

from minds_core.config.choices import AGGREGATIONS


def token_scales(mode: str, lengths: Sequence[int], max_tokens: int) -> list[float]:
    """The factor each sequence's per-token advantages are multiplied by; ``lengths`` are sampled-token counts."""
    n = len(lengths)
    if mode == "sum":
        return [1.0] * n
    if mode == "token_mean":
        total = sum(lengths)
        return [1.0 / total if total else 0.0] * n
    if mode == "sequence_mean":
        return [1.0 / (n * length) if length else 0.0 for length in lengths]
    if mode == "fixed_length":
        return [1.0 / (n * max_tokens)] * n
    raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {', '.join(AGGREGATIONS)}")
