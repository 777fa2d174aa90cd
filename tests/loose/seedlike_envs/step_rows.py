"""A list of chat-message rows scored by step(text) on the one shared object."""

from types import SimpleNamespace


class VowelCounter:
    """Rewards replies for their share of vowels; counts the step() calls it received."""

    def __init__(self) -> None:
        self.dataset = [
            {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Name a {thing}."}]}
            for thing in ("color", "fruit", "river", "planet")
        ]
        self.calls = 0

    def step(self, action_text: str) -> SimpleNamespace:
        self.calls += 1
        letters = [c for c in action_text.lower() if c.isalpha()]
        return SimpleNamespace(reward=sum(c in "aeiou" for c in letters) / max(1, len(letters)))


def load_environment() -> VowelCounter:
    return VowelCounter()
