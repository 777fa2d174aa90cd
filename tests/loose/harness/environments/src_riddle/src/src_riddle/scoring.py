"""Reward functions: one by name, one with positional-only and unused (``_``) parameters."""


def names_letter(completion: str, answer: str) -> float:
    return float(answer in completion.lower())


def short(completion, _unused, /):
    return float(len(completion) <= 20)
