"""A dataset of question/answer rows scored by a verifiers Rubric (sync and async functions, a parser)."""

import verifiers as vf
from datasets import Dataset

CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Peru", "Lima"), ("Kenya", "Nairobi"), ("Chile", "Santiago")]


def mentions_answer(completion: str, answer: str) -> float:
    return float(answer.lower() in completion.lower())


async def shares_letters(parser: vf.Parser, completion: str, answer: str, state: dict) -> float:
    parsed = parser.parse_answer(completion) or ""
    state["parsed"] = parsed
    return len(set(parsed.lower()) & set(answer.lower())) / len(set(answer.lower()))


def short_reply(completion: str, info: dict) -> float:
    return float(len(completion) <= info["max_chars"])


class CapitalQuiz:
    def __init__(self, max_chars: int) -> None:
        rows = [{"question": f"What is the capital of {c}?", "answer": a, "info": {"max_chars": max_chars}} for c, a in CAPITALS]
        self.dataset = Dataset.from_list(rows)
        self.eval_dataset = Dataset.from_list(rows[:2])
        self.rubric = vf.Rubric(funcs=[mentions_answer, shares_letters, short_reply], weights=[1.0, 0.5, 0.1])


def load_environment(max_chars: int = 40) -> CapitalQuiz:
    return CapitalQuiz(max_chars)
