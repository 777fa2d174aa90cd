"""A verifiers ToolEnv over an in-memory dataset: add two numbers with the add tool."""

import verifiers as vf
from datasets import Dataset

PAIRS = [(2, 3), (4, 1), (7, 2), (5, 5)]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def states_sum(completion: vf.Messages, answer: str) -> float:
    return float(answer in str(completion[-1]["content"] or ""))


def load_environment(max_turns: int = 3) -> vf.ToolEnv:
    rows = [{"question": f"What is {a} + {b}? Use the add tool.", "answer": str(a + b)} for a, b in PAIRS]
    return vf.ToolEnv(
        dataset=Dataset.from_list(rows),
        tools=[add],
        max_turns=max_turns,
        rubric=vf.Rubric(funcs=[states_sum]),
    )
