"""Scenarios, reply parsing and the self-entropy reward of entropy_intuition."""

from __future__ import annotations

import asyncio
import math
import random
import re
from dataclasses import dataclass, field

import tinker

INSTRUCTIONS = (
    "Choose {description}.\n"
    "Then describe in a few words how the choice felt, and estimate the normalized entropy of your "
    "own choice: 0 if only one number could come out, 1 if every allowed number was equally likely.\n"
    "Reply with exactly three lines:\n"
    "NUMBER: <your number>\n"
    "FEELING: <a few words>\n"
    "ENTROPY: <a number between 0 and 1>"
)

#: What the policy writes before its number; the allowed numbers are scored after it.
ANSWER_PREFIX = "NUMBER: "

_PRIMES = [p for p in range(2, 100) if all(p % d for d in range(2, int(p**0.5) + 1))]


@dataclass(frozen=True)
class Scenario:
    kind: str
    description: str
    allowed: tuple[int, ...]


def _draw_scenario(rng: random.Random) -> Scenario:
    kind = rng.choice(["product", "primes", "evens", "uniform", "multiples"])
    if kind == "product":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return Scenario(kind, f"the number that is the product of {a} and {b}", (a * b,))
    if kind == "primes":
        low = rng.choice([10, 20, 30, 40])
        allowed = tuple(p for p in _PRIMES if low <= p <= low + 25)
        return Scenario(kind, f"a prime number from {low} to {low + 25}", allowed)
    if kind == "evens":
        low = rng.randrange(2, 40, 2)
        return Scenario(kind, f"an even number from {low} to {low + 14}", tuple(range(low, low + 15, 2)))
    if kind == "uniform":
        high = rng.randint(4, 10)
        return Scenario(kind, f"a whole number from 1 to {high}, each equally good", tuple(range(1, high + 1)))
    step = rng.choice([5, 10])
    allowed = tuple(range(step, step * 10 + 1, step))
    return Scenario(kind, f"a multiple of {step} from {step} to {step * 10}, whichever you like best", allowed)


def normalized_entropy(probabilities: list[float]) -> float:
    """Shannon entropy of the allowed numbers' probabilities plus the leftover mass as one more bucket,
    divided by log(K + 1) for K allowed numbers (so that it lies in [0, 1], also for K = 1)."""
    leftover = max(0.0, 1.0 - sum(probabilities))
    buckets = [p for p in [*probabilities, leftover] if p > 0]
    return -sum(p * math.log(p) for p in buckets) / math.log(len(probabilities) + 1)


_LINE = {name: re.compile(rf"^\s*{name}:\s*(.*)$", re.MULTILINE) for name in ("NUMBER", "FEELING", "ENTROPY")}
_FLOAT = re.compile(r"[-+]?\d*\.?\d+")


def parse_reply(text: str) -> dict[str, object]:
    """``number`` (int or None), ``feeling`` (text) and ``entropy`` (float or None) as the reply states them."""
    found = {name: (m.group(1).strip() if (m := pattern.search(text)) else "") for name, pattern in _LINE.items()}
    number = re.match(r"[-+]?\d+", found["NUMBER"])
    entropy = _FLOAT.match(found["ENTROPY"])
    return {
        "number": int(number.group(0)) if number else None,
        "feeling": found["FEELING"],
        "entropy": float(entropy.group(0)) if entropy else None,
    }


@dataclass
class EntropyIntuitionEnv:
    seed: int = 0
    sampling_client: object = None
    scenario: Scenario | None = None
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def build(self, sampling_client: object) -> None:
        self.sampling_client = sampling_client

    def initial_observation(self) -> str:
        self.scenario = _draw_scenario(self.rng)
        return self.prompt()

    def prompt(self) -> str:
        assert self.scenario is not None
        return INSTRUCTIONS.format(description=self.scenario.description)

    async def choice_probabilities(self) -> list[float]:
        """The policy's probability of answering each allowed number (then a newline) after the prompt."""
        assert self.scenario is not None and self.sampling_client is not None
        tokenizer = self.sampling_client.tokenizer
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": self.prompt()}], tokenize=False, add_generation_prompt=True
        )
        context = tokenizer.encode(rendered + ANSWER_PREFIX, add_special_tokens=False)

        async def probability(number: int) -> float:
            answer = tokenizer.encode(f"{number}\n", add_special_tokens=False)
            logprobs = await self.sampling_client.compute_logprobs(tinker.types.ModelInput.from_ints(context + answer))
            return math.exp(sum(logprobs[len(context) :]))

        return list(await asyncio.gather(*(probability(n) for n in self.scenario.allowed)))

    async def step(self, action: str) -> dict:
        """Reward max(0, 1 - |stated - true normalized entropy|); 0 when no ENTROPY is stated."""
        assert self.scenario is not None
        parsed = parse_reply(action)
        truth = normalized_entropy(await self.choice_probabilities())
        stated = parsed["entropy"]
        reward = 0.0 if stated is None else max(0.0, 1.0 - abs(stated - truth))
        metrics = {
            "true_entropy": truth,
            "entropy_stated": float(stated is not None),
            "number_allowed": float(parsed["number"] in self.scenario.allowed),
            "feeling_given": float(bool(parsed["feeling"])),
        }
        return {"reward": reward, "done": True, "metrics": metrics}


def load_environment(seed: int = 0) -> EntropyIntuitionEnv:
    return EntropyIntuitionEnv(seed=seed)
