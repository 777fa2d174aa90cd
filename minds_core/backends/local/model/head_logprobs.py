"""Target log-probs from final hidden states, the output layer applied in chunks of tokens.

The logits of a 151,936-token vocabulary take 9 GiB in float32 for 16k tokens: they
are never held whole. Each chunk of tokens goes through the output layer (its LoRA
included), a float32 log-softmax normaliser, and keeps only the picked columns. With
gradients on, a chunk is recomputed in the backward pass (activation checkpointing),
so neither pass holds more than one chunk's logits at a time, whatever the number of
tokens.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["LOGITS_PER_CHUNK", "OutputHead", "chunk_tokens", "target_logprobs"]

LOGITS_PER_CHUNK = 1 << 26
"""Logits computed at once (256 MiB in float32): the chunk is this many over the vocabulary size, in tokens
(441 tokens of a 151,936-token vocabulary)."""


def chunk_tokens(vocab_size: int) -> int:
    """Tokens per chunk for a vocabulary of ``vocab_size``."""
    return max(1, LOGITS_PER_CHUNK // vocab_size)


class OutputHead:
    """The output layer of a causal LM (``get_output_embeddings()``, LoRA-wrapped or not) as log-probs of targets.

    ``softcap`` is the model's final logit soft-capping (``config.final_logit_softcapping``,
    Gemma-style: ``cap * tanh(logits / cap)``), None where it has none.
    """

    def __init__(self, layer: nn.Module, vocab_size: int, softcap: float | None = None) -> None:
        self.layer = layer
        self.softcap = softcap
        self.chunk = chunk_tokens(vocab_size)

    def logprobs(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``log p(target)`` in float32 ``[N, W]``, from hidden states ``[N, H]`` and target ids ``[N, W]``."""
        recompute = torch.is_grad_enabled()
        pieces = []
        for start in range(0, hidden.shape[0], self.chunk):
            h, t = hidden[start : start + self.chunk], targets[start : start + self.chunk]
            pieces.append(checkpoint(self._picked, h, t, use_reentrant=False) if recompute else self._picked(h, t))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    def _picked(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.layer(hidden)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return target_logprobs(logits, targets)  # normalised in float32: one chunk's copy


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log p(target)`` at each position: logits ``[T, V]``, targets ``[T]`` or ``[T, K]``."""
    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1) if targets.dim() == 1 else targets)  # [T, 1] or [T, K], T may be 0
    return (picked - torch.logsumexp(logits, dim=-1, keepdim=True)).reshape(targets.shape)
