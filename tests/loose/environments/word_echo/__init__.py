"""A seed-style folder environment: one stateful object, sync initial_observation() + step()."""

import random

from .words import WORDS


class WordEcho:
    """Asks for a random word; the reward is the share of its letters the reply contains."""

    def __init__(self, seed: int, prefix: str) -> None:
        self.rng = random.Random(seed)
        self.prefix = prefix
        self.word = ""
        self.steps = 0

    def initial_observation(self) -> str:
        self.word = self.rng.choice(WORDS)
        return f"{self.prefix} {self.word}"

    def step(self, action_text: str) -> dict:
        self.steps += 1
        letters = set(self.word)
        return {"reward": len(letters & set(action_text)) / len(letters), "metrics": {"letters": len(letters)}}


def load_environment(seed: int = 0, prefix: str = "Repeat the word:") -> WordEcho:
    return WordEcho(seed, prefix)
