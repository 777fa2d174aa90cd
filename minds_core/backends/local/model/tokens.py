"""Checking a request's tokens (a prompt's, a datum's) against a base model's vocabulary and context."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tinker import types

from .errors import LocalBadRequestError
from .models import BaseModel

__all__ = ["check_length", "check_tokens", "model_input_tokens"]


def model_input_tokens(model_input: types.ModelInput, what: str) -> list[int]:
    """The tokens of a ModelInput made of token chunks (images are not supported locally)."""
    try:
        tokens = model_input.to_ints()
    except ValueError as exc:
        raise LocalBadRequestError(f"{what}: the local backend takes token chunks only ({exc})") from None
    if not tokens:
        raise LocalBadRequestError(f"{what} is empty: give at least one token")
    return tokens


def check_tokens(tokens: torch.Tensor | Sequence[int], base: BaseModel, what: str) -> None:
    """Reject token ids outside ``0 .. vocab_size - 1`` (ids as given, before a tensor of them could overflow)."""
    if isinstance(tokens, torch.Tensor):
        bad = (tokens < 0) | (tokens >= base.vocab_size)
        first = int(tokens[bad][0]) if bad.any() else None
    else:
        first = next((token for token in tokens if not 0 <= token < base.vocab_size), None)
    if first is not None:
        raise LocalBadRequestError(
            f"{what} has token {first} outside the vocabulary of {base.name!r} (0..{base.vocab_size - 1})"
        )


def check_length(length: int, base: BaseModel, what: str) -> None:
    """Reject a sequence longer than the model's context."""
    if length > base.max_length:
        raise LocalBadRequestError(
            f"{what} has {length} tokens, more than the {base.max_length}-token context of {base.name!r}"
        )
