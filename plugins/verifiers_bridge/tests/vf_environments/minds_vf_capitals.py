"""A verifiers SingleTurnEnv over an in-memory dataset: name a country's capital."""

import verifiers as vf
from datasets import Dataset

ROWS = [("France", "Paris"), ("Japan", "Tokyo"), ("Peru", "Lima"), ("Kenya", "Nairobi"), ("Chile", "Santiago"), ("Egypt", "Cairo")]


def names_capital(parser: vf.Parser, completion: vf.Messages, answer: str) -> float:
    return float(answer.lower() in (parser.parse_answer(completion) or "").lower())


async def shares_letters(completion: vf.Messages, answer: str) -> float:
    text = str(completion[-1]["content"] or "").lower()
    return len(set(text) & set(answer.lower())) / len(set(answer.lower()))


def load_environment(num_rows: int = 6) -> vf.SingleTurnEnv:
    rows = [{"question": f"What is the capital of {country}?", "answer": city} for country, city in ROWS[:num_rows]]
    parser = vf.Parser()
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows[:2]),
        system_prompt="Answer with one word.",
        parser=parser,
        rubric=vf.Rubric(funcs=[names_capital, shares_letters], weights=[1.0, 0.5], parser=parser),
    )
