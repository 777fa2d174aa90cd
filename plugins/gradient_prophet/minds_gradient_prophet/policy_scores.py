"""Reading the CURRENT policy's log-probabilities through its sampling client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

# tinker imports torch, so it is imported where it is used: `minds plugins` stays light.


class MeasurementError(RuntimeError):
    """The policy could not be measured (a service error, or an answer that was not scored)."""


def encode_context(tokenizer: Any, text: str) -> list[int]:
    """Tokens of a context that starts a sequence (with the tokenizer's own leading specials)."""
    return list(tokenizer.encode(text))


def encode_continuation(tokenizer: Any, text: str) -> list[int]:
    """Tokens of text that continues a sequence (no added specials)."""
    tokens = list(tokenizer.encode(text, add_special_tokens=False))
    if not tokens:
        raise MeasurementError(f"the text {text!r} encodes to no tokens")
    return tokens


async def continuation_logprob(sampler: Any, context: Sequence[int], continuation: Sequence[int]) -> float:
    """``log P(continuation | context)``: the summed log-probs of the continuation's tokens."""
    from tinker import types

    tokens = [*context, *continuation]
    logprobs = await sampler.compute_logprobs(types.ModelInput.from_ints(tokens))
    scored = logprobs[len(context) :]
    if len(scored) != len(continuation) or any(lp is None for lp in scored):
        raise MeasurementError(
            f"compute_logprobs returned {len(logprobs)} values with gaps for a {len(tokens)}-token sequence"
        )
    return float(sum(scored))


async def next_token_topk(sampler: Any, context: Sequence[int], follower: int, k: int) -> dict[int, float]:
    """The top-``k`` log-probs of the next token after ``context`` (token id -> log-prob).

    Read from the top-k prompt log-probs of ``context + [follower]`` at the
    follower's position; ``follower`` only fills that position.
    """
    from tinker import types

    response = await sampler.sample(
        types.ModelInput.from_ints([*context, follower]),
        num_samples=1,
        sampling_params=types.SamplingParams(max_tokens=1, temperature=0.0),
        include_prompt_logprobs=True,
        topk_prompt_logprobs=k,
        prompt_logprobs_last_n=1,
    )
    rows = response.topk_prompt_logprobs
    if not rows or len(rows) != len(context) + 1 or not rows[-1]:
        raise MeasurementError(
            "the sampler returned no top-k prompt log-probs; the surprise task needs a backend "
            "that supports sample(..., topk_prompt_logprobs=k)"
        )
    return {int(token): float(lp) for token, lp in rows[-1]}


async def next_token_logprobs(sampler: Any, context: Sequence[int], tokens: Iterable[int]) -> dict[int, float]:
    """``log P(token | context)`` for each of ``tokens`` (one scoring call each, concurrently)."""
    wanted = sorted(set(tokens))
    values = await asyncio.gather(*(continuation_logprob(sampler, context, [t]) for t in wanted))
    return dict(zip(wanted, values))
