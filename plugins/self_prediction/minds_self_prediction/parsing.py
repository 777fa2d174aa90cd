"""Reading ``FINAL ANSWER:`` and ``CONFIDENCE:`` out of a reply."""

from __future__ import annotations

import re

import attrs

from minds_core import normalize_minus, strip_code_fences, strip_think

#: Confidence assumed when none can be read.
DEFAULT_CONFIDENCE = 0.5

_ANSWER_HEADER = re.compile(r"FINAL\s+ANSWER\s*:", re.IGNORECASE)
_CONFIDENCE_HEADER = re.compile(r"CONFIDENCE\s*:", re.IGNORECASE)
_DECIMAL = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_DECORATION = " \t*_`\"'"


@attrs.frozen
class Parsed:
    """What a reply says: its answer, its confidence, and whether it followed the format."""

    answer: str
    confidence: float
    format_ok: bool


def clean(text: str) -> str:
    """The reply without code fences or thinking, with typographic minus signs as ``-``."""
    return strip_think(strip_code_fences(normalize_minus(text)))


def _after_last(header: re.Pattern[str], text: str) -> str | None:
    """The text after the last occurrence of ``header``, or None without one."""
    matches = list(header.finditer(text))
    return text[matches[-1].end() :] if matches else None


def read_confidence(text: str) -> float | None:
    """The first number after the last ``CONFIDENCE:``; None when there is none."""
    after = _after_last(_CONFIDENCE_HEADER, text)
    match = _DECIMAL.search(after) if after is not None else None
    return float(match.group()) if match else None


def _strip_answer(text: str) -> str:
    return text.strip(_DECORATION).removesuffix(".").strip(_DECORATION)


def read_answer(text: str) -> tuple[str, bool]:
    """The answer and whether a ``FINAL ANSWER:`` header gave it.

    With the header: the rest of its line, or the next line when that is empty
    (up to a ``CONFIDENCE:`` on the same line).
    Without: the last sentence of the reply, ``CONFIDENCE:`` lines left out.
    """
    after = _after_last(_ANSWER_HEADER, text)
    if after is not None:
        line = _CONFIDENCE_HEADER.split(after.lstrip().split("\n", 1)[0], 1)[0]
        return _strip_answer(line), True
    body = "\n".join(line for line in text.splitlines() if not _CONFIDENCE_HEADER.search(line))
    sentences = [s for s in (_strip_answer(part) for part in _SENTENCE_END.split(body)) if s]
    return (sentences[-1] if sentences else ""), False


def parse_response(completion: str) -> Parsed:
    """Answer, confidence (DEFAULT_CONFIDENCE when unreadable) and format validity of a reply.

    The format is valid only when both headers are present, the answer is not
    empty and the confidence is a number in [0, 1].
    """
    text = clean(completion)
    answer, has_answer_header = read_answer(text)
    confidence = read_confidence(text)
    format_ok = has_answer_header and bool(answer) and confidence is not None and 0.0 <= confidence <= 1.0
    return Parsed(answer, DEFAULT_CONFIDENCE if confidence is None else confidence, format_ok)
