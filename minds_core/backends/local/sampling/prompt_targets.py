"""``target_prompt_logprobs``: the log-probs of chosen token ids at each prompt position, in the SDK's layout.

The request is an int64 tensor ``[len(prompt) - 1, K]``: cell ``[i, j]`` names a token
id scored at prompt position ``i + 1``, i.e. ``log p(id | prompt[: i + 1])``; ``-1``
requests nothing. It may be sparse CSR, where unlisted cells request nothing. The
answer is a float32 tensor of the same shape and layout (the same CSR indices when
sparse), 0.0 where nothing was requested. Log-probs are the model's own, at
temperature 1, as every other log-prob the sampler reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tinker import types

from ..model.errors import LocalBadRequestError

__all__ = ["PromptTargets", "check_target_tensor"]


def check_target_tensor(tensor: types.TensorData) -> None:
    """What the SDK's ``SamplingClient.sample`` refuses at call time, refused the same way (``ValueError``)."""
    if tensor.dtype != "int64":
        raise ValueError(f"target_prompt_logprobs must be an int64 tensor of token ids, got {tensor.dtype}")
    if tensor.shape is None or len(tensor.shape) != 2:
        raise ValueError(f"target_prompt_logprobs must be 2-D, [len(prompt) - 1, K], got shape {tensor.shape}")


@dataclass(frozen=True)
class PromptTargets:
    """A validated ``target_prompt_logprobs`` request: dense ids (``-1`` = none) and the request's layout."""

    ids: torch.Tensor
    """``[len(prompt) - 1, K]`` int64 token ids; ``-1`` where nothing is requested."""
    request: types.TensorData
    """The request's tensor, whose shape and CSR indices (when sparse) the answer takes."""

    @classmethod
    def parse(cls, tensor: types.TensorData, prompt_length: int, vocab_size: int) -> PromptTargets:
        """Check ``tensor`` against the prompt and vocabulary (a 400 naming the problem)."""
        check_target_tensor(tensor)
        assert tensor.shape is not None
        if tensor.shape[0] != prompt_length - 1:
            raise LocalBadRequestError(
                f"target_prompt_logprobs must have len(prompt) - 1 = {prompt_length - 1} rows, got {tensor.shape[0]}"
            )
        try:
            ids = tensor.to_torch(pad_value=-1).to(torch.int64)
        except (RuntimeError, ValueError) as exc:
            raise LocalBadRequestError(f"target_prompt_logprobs is not a valid tensor: {exc}") from None
        bad = ids[(ids < -1) | (ids >= vocab_size)]
        if len(bad):
            raise LocalBadRequestError(
                f"target_prompt_logprobs holds token id {int(bad[0])}: not -1, and outside the vocabulary "
                f"(0..{vocab_size - 1})"
            )
        return cls(ids, tensor)

    def scores(self, logits: torch.Tensor) -> types.TensorData:
        """The answer, from the prompt's logits ``[len(prompt), V]``."""
        ids = self.ids.to(logits.device)
        logprobs = torch.log_softmax(logits[:-1].float(), dim=-1)
        values = logprobs.gather(1, ids.clamp(min=0)).masked_fill(ids < 0, 0.0).cpu()
        crow, col = self.request.sparse_crow_indices, self.request.sparse_col_indices
        if crow is None or col is None:
            return types.TensorData.from_torch(values)
        rows = torch.repeat_interleave(torch.arange(len(crow) - 1), torch.tensor(crow).diff())
        listed = values[rows, torch.tensor(col, dtype=torch.int64)]
        return types.TensorData(
            data=listed.numpy(),
            dtype="float32",
            shape=list(values.shape),
            sparse_crow_indices=crow,
            sparse_col_indices=col,
        )
