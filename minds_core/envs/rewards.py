"""The core's own reward functions (registered in builtins, usable from any rubric config)."""

from __future__ import annotations

from collections.abc import Sequence

from minds_core.contract.environment import Context
from minds_core.envs.judge import LLMJudge


def length_penalty(completions: Sequence[str], ctx: Context) -> list[float]:
    """A group reward for brevity: Kimi k1.5's length reward, ``0.5 - (L - L_min) / (L_max - L_min)``.

    ``L`` is each completion's token count under the policy's tokenizer, and
    ``L_min``/``L_max`` the shortest and longest of its group: the shortest
    reply gets +0.5, the longest -0.5, and all 0 when every length is equal.
    (Kimi gates it by correctness; weight it against a correctness reward.)
    """
    if ctx.tokenizer is None:
        raise ValueError("minds.length_penalty counts tokens and needs ctx.tokenizer")
    lengths = [len(ctx.tokenizer.encode(text, add_special_tokens=False)) for text in completions]
    low, high = min(lengths), max(lengths)
    if high == low:
        return [0.0] * len(lengths)
    return [0.5 - (length - low) / (high - low) for length in lengths]


REWARD_FUNCTIONS = {
    "minds.judge": (LLMJudge, "LLM-as-judge: a judge model (service or OpenAI-compatible URL) scores each reply (args: question, model, ...)"),
    "minds.length_penalty": (length_penalty, "group reward: +0.5 for the group's shortest reply, -0.5 for its longest (Kimi k1.5)"),
}
