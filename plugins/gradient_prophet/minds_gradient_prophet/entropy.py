"""entropy_intuition: pick a number, then say how spread out your own choice is."""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from minds_core import (
    Context,
    Message,
    Rubric,
    SingleTurnEnvironment,
    Task,
    arg,
    at_least,
    env_args,
    non_empty_subset_of,
    report_metric,
)
from minds_gradient_prophet.memo import MEMO
from minds_gradient_prophet.parsing import header_number
from minds_gradient_prophet.policy_scores import continuation_logprob
from minds_gradient_prophet.scoring import linear_closeness, normalized_entropy

ENTROPY_REWARD = "entropy_intuition.entropy"


@attrs.frozen
class Draw:
    """One number-picking task: what the prompt asks for and the numbers it allows."""

    kind: str
    instruction: str
    allowed: tuple[int, ...]


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))


def _product(rng: random.Random) -> Draw:
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    return Draw("product", f"Give the product of {a} and {b}.", (a * b,))


def _primes(rng: random.Random) -> Draw:
    lo = rng.randint(2, 60)
    hi = lo + rng.randint(15, 30)
    allowed = tuple(n for n in range(lo, hi + 1) if _is_prime(n))
    return Draw("primes", f"Pick any prime number from {lo} to {hi}.", allowed)


def _evens(rng: random.Random) -> Draw:
    lo = 2 * rng.randint(1, 40)
    hi = lo + 2 * rng.randint(4, 9)
    return Draw("evens", f"Pick any even number from {lo} to {hi}.", tuple(range(lo, hi + 1, 2)))


def _uniform(rng: random.Random) -> Draw:
    lo = rng.randint(1, 90)
    hi = lo + rng.randint(4, 14)
    text = f"Pick a whole number from {lo} to {hi}, giving every one of them the same chance."
    return Draw("uniform", text, tuple(range(lo, hi + 1)))


def _leaning(step: int) -> Callable[[random.Random], Draw]:
    def draw(rng: random.Random) -> Draw:
        lo = rng.randint(1, 80)
        hi = lo + 19
        text = f"Pick a whole number from {lo} to {hi}; you may favour multiples of {step}."
        return Draw(f"multiples_of_{step}", text, tuple(range(lo, hi + 1)))

    return draw


GENERATORS: dict[str, Callable[[random.Random], Draw]] = {
    "product": _product,
    "primes": _primes,
    "evens": _evens,
    "uniform": _uniform,
    "multiples_of_5": _leaning(5),
    "multiples_of_10": _leaning(10),
}


def entropy_prompt(draw: Draw) -> str:
    """The task text: the draw, then the three-line reply format."""
    return (
        f"{draw.instruction}\n\n"
        "Then describe how the choice felt, and estimate how spread out your own choice is. "
        "Reply in exactly three lines:\n"
        "NUMBER: <your number>\n"
        "FEELING: <a few words>\n"
        "ENTROPY: <from 0 to 1: 0 if you would give this same number every time you were asked, "
        "1 if every allowed number were equally likely>"
    )


async def choice_entropy(ctx: Context, prompt: Sequence[Message], allowed: Sequence[int]) -> float:
    """H_norm of the policy's choice: its probability of each allowed ``NUMBER: n`` line, plus leftover."""
    context = [*ctx.renderer.prompt_tokens(list(prompt)), *ctx.renderer.encode("NUMBER:")]
    logprobs = await asyncio.gather(
        *(continuation_logprob(ctx.sampler, context, ctx.renderer.encode(f" {n}\n")) for n in allowed)
    )
    return normalized_entropy([math.exp(lp) for lp in logprobs])


async def entropy_reward(
    completion: str, messages: list[Message], info: dict[str, Any], ctx: Context, state: dict[str, Any]
) -> float:
    """max(0, 1 - |ENTROPY - H_norm|); 0 when the reply states no entropy."""
    allowed = tuple(info["allowed"])
    number = header_number(completion, "NUMBER")
    predicted = header_number(completion, "ENTROPY")
    report_metric(state, "entropy_intuition/number_allowed", float(number is not None and number in allowed))
    report_metric(state, "entropy_intuition/no_prediction", float(predicted is None))
    if predicted is None:
        return 0.0
    prompt = [m for m in messages if m.get("role") != "assistant"]
    key = ("entropy", json.dumps(prompt, sort_keys=True), allowed)
    h_norm = await MEMO.get(ctx.sampler, key, lambda: choice_entropy(ctx, prompt, allowed))
    report_metric(state, "entropy_intuition/h_norm", h_norm)
    return linear_closeness(h_norm, predicted)


def make_tasks(kinds: Sequence[str], count: int, seed: int, split: str) -> list[Task]:
    """``count`` tasks, each drawn from a kind chosen uniformly, reproducible from the seed and split."""
    rng = random.Random(f"{seed}:{split}")
    tasks = []
    for i in range(count):
        draw = GENERATORS[rng.choice(list(kinds))](rng)
        info = {"kind": draw.kind, "allowed": list(draw.allowed)}
        tasks.append(Task(prompt=entropy_prompt(draw), answer=list(draw.allowed), info=info, id=f"{split}-{i}"))
    return tasks


@attrs.frozen
class EntropyIntuitionArgs:
    """The ``[env.args]`` of entropy_intuition."""

    kinds: list[str] = arg(list(GENERATORS), non_empty_subset_of(GENERATORS), doc="the kinds of choice drawn")
    num_examples: int = arg(500, at_least(1), doc="tasks in the train split")
    num_eval: int = arg(50, at_least(0), doc="tasks in the eval split")
    seed: int = arg(0, doc="seed of the tasks drawn")


def load_entropy_intuition(**args: Any) -> SingleTurnEnvironment:
    """The entropy_intuition environment (arguments: EntropyIntuitionArgs)."""
    chosen = env_args(EntropyIntuitionArgs, args, env="entropy_intuition")
    tasks = {
        "train": make_tasks(chosen.kinds, chosen.num_examples, chosen.seed, "train"),
        "eval": make_tasks(chosen.kinds, chosen.num_eval, chosen.seed, "eval"),
    }
    return SingleTurnEnvironment(tasks, Rubric([entropy_reward], [1.0], [ENTROPY_REWARD]))
