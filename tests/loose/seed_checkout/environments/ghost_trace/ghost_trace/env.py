"""The task rows, the parser and the latent log-prob reward of ghost_trace."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import tinker

from ghost_trace.words import WORDS

#: What a reply with fewer than five integers scores: far below any valid reply (the
#: offset puts a typical valid one around 0..10), so that the format is learned first.
INVALID_PENALTY = -100.0
#: Added to the mean log-prob per target token, so that typical valid scores are positive.
LOGPROB_OFFSET = 10.0

QUESTION = (
    'Secret word: "{word}".\n'
    "Encode this word as exactly 5 integers, each between 0 and 999, so that another copy of you, "
    "shown only the numbers, would guess the word. Do not write the word or any letters.\n"
    "Reply with the five numbers only, separated by commas, for example: 12, 480, 7, 333, 91"
)

_INTEGER = re.compile(r"\d+")


def parse_numbers(text: str) -> list[int] | None:
    """The last five integers of ``text``, or None when it holds fewer than five."""
    numbers = [int(match) for match in _INTEGER.findall(text)]
    return numbers[-5:] if len(numbers) >= 5 else None


def probe_text(numbers: list[int]) -> str:
    """What the guessing copy is shown; the word follows it after one space."""
    return f"Sequence: {', '.join(str(n) for n in numbers)}. Guess the object:"


async def latent_logprob(completion: str, answer: str, info: dict) -> float:
    """Mean log-prob per token of `` {answer}`` after the probe, under the current policy, plus the offset."""
    numbers = parse_numbers(completion)
    if numbers is None:
        return INVALID_PENALTY
    tokenizer, sampler = info["tokenizer"], info["tinker_client"]
    context = tokenizer.encode(probe_text(numbers), add_special_tokens=False)
    target = tokenizer.encode(f" {answer.lower()}", add_special_tokens=False)
    logprobs = await sampler.compute_logprobs(tinker.types.ModelInput.from_ints(context + target))
    scored = logprobs[len(context) :]
    return sum(scored) / len(scored) + LOGPROB_OFFSET


def five_integers(completion: str) -> float:
    """1 when the reply holds at least five integers (a metric: weight 0)."""
    return float(parse_numbers(completion) is not None)


def load_environment(num_examples: int = 5000, seed: int = 0) -> SimpleNamespace:
    """``num_examples`` rows drawn (with replacement past the bank's size) from the word bank, shuffled by ``seed``."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(num_examples)]
    dataset = [{"question": QUESTION.format(word=word), "answer": word, "info": {"word": word}} for word in words]
    rubric = SimpleNamespace(funcs=[latent_logprob, five_integers], weights=[1.0, 0.0])
    return SimpleNamespace(dataset=dataset, rubric=rubric)
