"""The model-aware reward: how likely the CURRENT policy names the word from the numbers alone."""

from __future__ import annotations

from typing import Any

from minds_core import Context
from minds_ghost_trace.parsing import parse_code
from minds_ghost_trace.prompts import probe_target, probe_text

#: Added to the mean per-token log-probability so that typical rewards are positive.
OFFSET = 10.0

#: Reward for a completion with fewer than five integers: on the scale of valid rewards
#: (typically about -5..10), so one malformed rollout does not dwarf the differences
#: between valid ones once advantages are centred.
INVALID_PENALTY = -10.0

#: The lowest reward of a valid code: a valid answer whose target tokens average below
#: -19.5 log-prob per token is floored here, so it always beats an invalid one.
VALID_FLOOR = INVALID_PENALTY + 0.5


def probe_tokens(tokenizer: Any, code: tuple[int, ...], word: str) -> tuple[list[int], int]:
    """Tokens of probe + target (BOS first when the tokenizer has one) and the target's length."""
    prefix = tokenizer.encode(probe_text(code), add_special_tokens=False)
    if getattr(tokenizer, "bos_token_id", None) is not None:
        prefix = [tokenizer.bos_token_id, *prefix]
    target = tokenizer.encode(probe_target(word), add_special_tokens=False)
    return prefix + target, len(target)


async def target_logprobs(ctx: Context, code: tuple[int, ...], word: str) -> list[float]:
    """Log-probabilities of the target word's tokens after the probe, under ``ctx.sampler``."""
    import tinker

    tokens, n_target = probe_tokens(ctx.tokenizer, code, word)
    logprobs = await ctx.sampler.compute_logprobs(tinker.types.ModelInput.from_ints(tokens))
    return [float(lp) for lp in logprobs[-n_target:]]


def _target_word(answer: Any) -> str:
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError(
            f"ghost_trace.latent_logprob needs the target word as the task's answer, got {answer!r}; "
            "build tasks with Task(prompt, answer=word) (the ghost_trace environment does)"
        )
    return answer


async def latent_logprob(completion: str, answer: Any, ctx: Context) -> float:
    """Mean log-prob per token of `` word`` after ``Sequence: n1..n5. Guess the object:``, plus 10.

    At least VALID_FLOOR (-9.5); fewer than five integers in the completion scores INVALID_PENALTY (-10).
    """
    word = _target_word(answer)
    code = parse_code(completion)
    if code is None:
        return INVALID_PENALTY
    logprobs = await target_logprobs(ctx, code, word)
    return max(sum(logprobs) / len(logprobs) + OFFSET, VALID_FLOOR)
