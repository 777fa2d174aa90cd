"""A dataset whose rows have no ``answer``; one reward function still names it."""

from types import SimpleNamespace

QUESTIONS = ["Say nothing.", "Describe the sea.", "Name a bird.", "Count to three."]


def matches_answer(completion: str, answer: str) -> float:
    return float(completion.strip() == answer)


def wordy(completion: str) -> float:
    return min(1.0, len(completion.split()) / 5)


def load_environment() -> SimpleNamespace:
    return SimpleNamespace(
        dataset=[{"question": q} for q in QUESTIONS],
        rubric=SimpleNamespace(funcs=[matches_answer, wordy], weights=[1.0, 0.1]),
    )
