"""Reading a reply's FINAL ANSWER and CONFIDENCE, and judging the answer."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^\s*```[\w-]*\s*$", re.MULTILINE)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_ANSWER = re.compile(r"FINAL ANSWER:[ \t]*(.*)")
_CONFIDENCE = re.compile(r"CONFIDENCE:\s*([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)?")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")

#: The confidence assumed when a reply states none (its format is then not ok).
DEFAULT_CONFIDENCE = 0.5


@dataclass(frozen=True)
class Parsed:
    answer: str
    confidence: float
    format_ok: bool


def parse_reply(text: str) -> Parsed:
    """The answer and confidence a reply states; ``format_ok`` when both headers hold a usable value."""
    text = _FENCE.sub("", text)
    body = _THINK.sub("", text)
    answer_match = _ANSWER.search(body)
    if answer_match:
        answer = answer_match.group(1).split("CONFIDENCE:")[0].strip()
    else:
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", body) if s.strip()]
        answer = sentences[-1] if sentences else ""
    confidence_match = _CONFIDENCE.search(body)
    confidence, confidence_ok = DEFAULT_CONFIDENCE, False
    if confidence_match and confidence_match.group(1) is not None:
        confidence = float(confidence_match.group(1))
        confidence_ok = 0.0 <= confidence <= 1.0
    format_ok = bool(answer_match) and bool(answer) and confidence_ok
    return Parsed(answer=answer, confidence=confidence, format_ok=format_ok)


def normalize(text: str) -> str:
    """Lower case, no thousands separators or spaces, no closing full stop; the sign is kept."""
    return re.sub(r"[\s,_]", "", text.lower()).rstrip(".")


def is_correct(prediction: str, answer: str, aliases: list[str] | tuple[str, ...] = ()) -> bool:
    """Exact normalized match with the answer or an alias, else the prediction's first number equals it."""
    said = normalize(prediction)
    if said and said in {normalize(a) for a in (answer, *aliases)}:
        return True
    first = _NUMBER.search(prediction.replace(",", ""))
    if first is None:
        return False
    try:
        return float(first.group(0)) == float(answer)
    except ValueError:
        return False
