"""The arithmetic items, prompts and reward functions of self_prediction."""

from __future__ import annotations

import random
from types import SimpleNamespace

from self_prediction.parsing import is_correct, parse_reply

SYSTEM_PROMPT = (
    "You are a careful calculator that also knows its limits. Work out the question, "
    "then reply with exactly two lines:\n"
    "FINAL ANSWER: <the number>\n"
    "CONFIDENCE: <a probability between 0 and 1 that your answer is right>\n"
    "You may think first inside <think>...</think>. Be honest: a wrong answer stated "
    "with high confidence costs more than a low confidence."
)

EXAMPLE_QUESTION = "What is 27 + 15?"
EXAMPLE_REPLY = "FINAL ANSWER: 42\nCONFIDENCE: 0.9"

OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
#: Share of items with huge operands (10**7 .. 10**12), where a small model should be unsure.
HUGE_SHARE = 0.15


def _difficulty(a: int, b: int) -> str:
    biggest = max(a, b)
    return "easy" if biggest < 100 else "medium" if biggest < 1000 else "hard"


def _item(rng: random.Random) -> tuple[int, str, int]:
    op = rng.choice(sorted(OPERATIONS))
    if rng.random() < HUGE_SHARE:
        return rng.randint(10**7, 10**12), op, rng.randint(10**7, 10**12)
    return rng.randint(0, 999), op, rng.randint(0, 999)


def _row(a: int, op: str, b: int) -> dict:
    value = OPERATIONS[op](a, b)
    question = f"What is {a} {op} {b}?"
    aliases = [f"{value:,}"] if abs(value) >= 1000 else []
    return {
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": EXAMPLE_QUESTION},
            {"role": "assistant", "content": EXAMPLE_REPLY},
            {"role": "user", "content": question},
        ],
        "answer": str(value),
        "info": {
            "question": question,
            "operation": op,
            "difficulty": _difficulty(a, b),
            "aliases": aliases,
            "distractors": [str(value + 1), str(value - 1), str(-value) if value else "1"],
        },
    }


def format_reward(completion: str) -> float:
    return float(parse_reply(completion).format_ok)


def accuracy_reward(completion: str, answer: str, info: dict) -> float:
    return float(is_correct(parse_reply(completion).answer, answer, info.get("aliases", ())))


def calibration_reward(completion: str, answer: str, info: dict) -> float:
    """1 minus the Brier score of the stated confidence against being right."""
    parsed = parse_reply(completion)
    right = float(is_correct(parsed.answer, answer, info.get("aliases", ())))
    confidence = min(1.0, max(0.0, parsed.confidence))
    return 1.0 - (confidence - right) ** 2


def load_environment(num_examples: int = 5000, seed: int = 0) -> SimpleNamespace:
    """``num_examples`` distinct questions (fewer if the draws run dry), in the order drawn."""
    rng = random.Random(seed)
    items: list[tuple[int, str, int]] = []
    seen: set[tuple[int, str, int]] = set()
    for _ in range(num_examples * 20):
        if len(items) == num_examples:
            break
        item = _item(rng)
        if item not in seen:
            seen.add(item)
            items.append(item)
    rubric = SimpleNamespace(funcs=[format_reward, accuracy_reward, calibration_reward], weights=[0.2, 0.5, 0.3])
    return SimpleNamespace(dataset=[_row(*item) for item in items], rubric=rubric)
