"""ghost_trace as the seed harness had it: trivia with a stated confidence, its rows a ``datasets.Dataset``.

Output: ``FINAL ANSWER: <answer>`` and ``CONFIDENCE: <0..1>`` lines. Reward =
0.2 * format + 0.5 * accuracy + 0.3 * (1 - (clip(confidence, 0, 1) - accuracy)^2).
"""

from __future__ import annotations

import random
import re

import datasets

TRIVIA = [
    ("What is the capital of France?", "Paris"),
    ("How many days are in a week?", "7"),
    ("What is 12 minus 15?", "-3"),
    ("Which gas do plants take in?", "carbon dioxide"),
    ("What is the largest ocean?", "Pacific"),
    ("How many sides has a hexagon?", "6"),
]
SYSTEM = "Answer, then state your confidence.\nFINAL ANSWER: <answer>\nCONFIDENCE: <a number from 0 to 1>"


def build_dataset(num_examples: int = 6, seed: int = 0) -> datasets.Dataset:
    rows = [{"question": q, "answer": a} for q, a in TRIVIA]
    random.Random(seed).shuffle(rows)

    def with_prompt(row: dict) -> dict:
        return {"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": row["question"]}]}

    return datasets.Dataset.from_list(rows[:num_examples]).map(with_prompt)


def _normalized(text: str) -> str:
    return re.sub(r"[^a-z0-9\-. ]", "", text.lower()).strip()


def score(text: str, answer: str) -> float:
    text = re.sub(r"```[a-z]*", "", text)
    answer_match = re.search(r"FINAL ANSWER:\s*(.+)", text)
    confidence_match = re.search(r"CONFIDENCE:\s*(-?\d+(?:\.\d+)?)", text)
    predicted = answer_match.group(1).strip() if answer_match else ""
    confidence = float(confidence_match.group(1)) if confidence_match else 0.5
    well_formed = bool(answer_match and confidence_match and predicted and 0 <= confidence <= 1)
    accuracy = float(bool(predicted) and _normalized(predicted) == _normalized(answer))
    if not accuracy:
        number = re.search(r"-?\d+(?:\.\d+)?", predicted)
        accuracy = float(number is not None and number.group(0) == answer)
    clipped = min(max(confidence, 0.0), 1.0)
    return 0.2 * well_formed + 0.5 * accuracy + 0.3 * (1 - (clipped - accuracy) ** 2)
