"""A verifiers environment whose rubric scores whole groups (the bridge refuses it)."""

import verifiers as vf
from datasets import Dataset


def relative_length(completions: list[vf.Messages]) -> list[float]:
    lengths = [len(str(c[-1]["content"] or "")) for c in completions]
    return [n / max(1, max(lengths)) for n in lengths]


def load_environment() -> vf.SingleTurnEnv:
    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "Hi?", "answer": ""}]), rubric=vf.Rubric(funcs=[relative_length]))
