"""The three reward parts: format, accuracy, calibration."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from minds_core import normalize_minus
from minds_self_prediction.parsing import parse_response

# A number with an optional sign, optional thousands separators and decimals.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def normalize(text: str) -> str:
    """Lower-case, no spaces, no trailing full stop; signs are kept ("-123" != "123")."""
    text = normalize_minus(text).strip().lower().removesuffix(".")
    return re.sub(r"\s+", "", text)


def first_number(text: str) -> Decimal | None:
    """The first number in ``text`` with its sign, or None."""
    match = _NUMBER.search(normalize_minus(text))
    if match is None:
        return None
    try:
        return Decimal(match.group().replace(",", ""))
    except InvalidOperation:
        return None


def is_correct(prediction: str, answer: str, aliases: Iterable[str] = ()) -> bool:
    """Exact normalized match with the answer or an alias, else equal first numbers."""
    if not prediction.strip():
        return False
    predicted = normalize(prediction)
    if any(predicted == normalize(expected) for expected in (answer, *aliases)):
        return True
    mine, theirs = first_number(prediction), first_number(answer)
    return mine is not None and theirs is not None and mine == theirs


def _expected(answer: Any, info: Mapping[str, Any] | None) -> tuple[str, list[str]]:
    if answer is None or not str(answer).strip():
        raise ValueError(
            "self_prediction rewards need the correct answer as the task's answer, got "
            f"{answer!r}; build tasks with Task(prompt, answer='42', info={{'aliases': [...]}})"
        )
    return str(answer), list((info or {}).get("aliases", []))


def format_reward(completion: str) -> float:
    """1.0 when both headers are there, the answer is not empty and the confidence is in [0, 1]."""
    return float(parse_response(completion).format_ok)


def accuracy_reward(completion: str, answer: Any, info: Mapping[str, Any] | None = None) -> float:
    """1.0 when the stated answer is correct (signs matter), else 0.0."""
    expected, aliases = _expected(answer, info)
    return float(is_correct(parse_response(completion).answer, expected, aliases))


def calibration_reward(completion: str, answer: Any, info: Mapping[str, Any] | None = None) -> float:
    """1 - (confidence clipped to [0, 1] - accuracy)^2: a Brier score turned into a reward."""
    parsed = parse_response(completion)
    expected, aliases = _expected(answer, info)
    accuracy = float(is_correct(parsed.answer, expected, aliases))
    confidence = min(max(parsed.confidence, 0.0), 1.0)
    return 1.0 - (confidence - accuracy) ** 2
