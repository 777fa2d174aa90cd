"""Async initial_observation()/step() returning an object; the first reply is questioned once."""

import asyncio
import random
from dataclasses import dataclass, field


@dataclass
class Outcome:
    reward: float
    done: bool = True
    messages: list = field(default_factory=list)


class TwoTurnSum:
    """Asks for a sum, asks "are you sure?" once, rewards the digits of the sum in the final reply."""

    def __init__(self, low: int, high: int) -> None:
        self.rng = random.Random(7)
        self.low, self.high = low, high
        self.total = 0
        self.replies: list[str] = []

    async def initial_observation(self) -> str:
        await asyncio.sleep(0)
        a, b = self.rng.randint(self.low, self.high), self.rng.randint(self.low, self.high)
        self.total = a + b
        return f"What is {a} + {b}?"

    async def step(self, action_text: str) -> Outcome:
        await asyncio.sleep(0)
        self.replies.append(action_text)
        if len(self.replies) == 1:
            return Outcome(reward=0.0, done=False, messages=[{"role": "user", "content": "Are you sure? Answer again."}])
        digits = set(str(self.total))
        return Outcome(reward=len(digits & set(action_text)) / len(digits))


def load_environment(low: int = 1, high: int = 9) -> TwoTurnSum:
    return TwoTurnSum(low, high)
