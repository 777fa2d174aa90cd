"""A dataset environment in a src-layout project, importing a sibling through the repository root."""

from environments.letter_bank import LETTERS

from .scoring import names_letter, short


class FirstLetter:
    def __init__(self, count: int) -> None:
        self.dataset = [{"question": f"Which letter does '{word}' start with?", "answer": letter} for letter, word in LETTERS[:count]]
        self.rubric = Rubric([names_letter, short], [1.0, 0.5])


class Rubric:
    """The seed harness's rubric shape: funcs and weights."""

    def __init__(self, funcs, weights) -> None:
        self.funcs, self.weights = funcs, weights


def load_environment(count: int = 4) -> FirstLetter:
    return FirstLetter(count)
