"""A two-turn guessing game whose step() speaks tinker-cookbook's words, or a gym-like mapping.

``style="cookbook"``: a dataclass with ``episode_done``, ``next_observation`` (text),
``next_stop_condition``, ``metrics`` and ``logs``, as tinker-cookbook's StepResult.
``style="mapping"``: ``{"reward", "done": False, "observation"}``.
``style="typo"``: the mapping with ``obsevation``, a key no harness reads.
"""

import random
from dataclasses import dataclass, field


@dataclass
class StepResult:
    reward: float
    episode_done: bool
    next_observation: object = None
    next_stop_condition: list = field(default_factory=lambda: ["\n\n"])
    metrics: dict = field(default_factory=dict)
    logs: dict = field(default_factory=dict)


class GuessTwice:
    """Asks for a vowel, says "try again" once; the second reply earns 1 for the secret vowel plus 0.1 per other letter in it."""

    def __init__(self, style: str) -> None:
        self.style = style
        self.rng = random.Random(3)
        self.secret = "a"
        self.turns = 0

    def initial_observation(self) -> str:
        self.secret = self.rng.choice("aeiou")
        return "Guess my vowel."

    def step(self, action: str):
        self.turns += 1
        last = self.turns >= 2
        letters = {c for c in action.lower() if c.isascii() and c.isalpha()}
        reward = float(self.secret in letters) + 0.1 * len(letters - {self.secret}) if last else 0.0
        reply = None if last else "Wrong. Try again."
        if self.style == "cookbook":
            return StepResult(reward, episode_done=last, next_observation=reply, metrics={"turn": self.turns}, logs={"said": action})
        key = "obsevation" if self.style == "typo" else "observation"
        return {"reward": reward, "done": last, key: reply}


def load_environment(style: str = "cookbook") -> GuessTwice:
    return GuessTwice(style)
