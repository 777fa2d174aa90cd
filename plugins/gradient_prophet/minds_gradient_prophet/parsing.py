"""Reading the policy's replies: JSON arrays in prose, and ``HEADER: value`` lines."""

from __future__ import annotations

import json
import math
import re

from minds_core import normalize_minus, strip_code_fences

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _clean(text: str) -> str:
    """Drop code-fence markers and normalise typographic minus signs."""
    return normalize_minus(strip_code_fences(text))


def _finite(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and (found := _NUMBER.search(value)):
        number = float(found.group(0))
    else:
        return None
    return number if math.isfinite(number) else None


def _from_json(segment: str) -> list[float | None] | None:
    try:
        value = json.loads(segment)
    except (json.JSONDecodeError, RecursionError):
        return None
    return [_finite(v) for v in value] if isinstance(value, list) else None


def _from_text(body: str) -> list[float | None]:
    parts = body.split(",") if "," in body else body.split()
    if parts and not parts[-1].strip():  # a trailing comma
        parts = parts[:-1]
    return [_finite(part) for part in parts]


def _usable(values: list[float | None] | None) -> bool:
    return bool(values) and any(v is not None for v in values)


def parse_number_array(text: str, length: int | None = None) -> list[float | None] | None:
    """The numbers of the array the reply ends with, or None when it holds none.

    Positions are kept: an element that is not a finite number is None, so the
    elements after it keep their index. Tolerates prose around the array, code
    fences, numbers written as strings, trailing commas, malformed JSON and an
    unclosed last array. The last array wins, except that when ``length`` is
    given the last array of exactly that length is preferred.
    """
    cleaned = _clean(text)
    candidates: list[list[float | None]] = []
    for match in re.finditer(r"\[([^\[\]]*)\]", cleaned):
        parsed = _from_json(match.group(0))
        if parsed is None:
            parsed = _from_text(match.group(1))
        if _usable(parsed):
            candidates.append(parsed)
    opened = cleaned.rfind("[")
    if opened != -1 and "]" not in cleaned[opened:]:
        tail = _from_text(cleaned[opened + 1 :])
        if _usable(tail):
            candidates.append(tail)
    if not candidates:
        return None
    if length is not None:
        for candidate in reversed(candidates):
            if len(candidate) == length:
                return candidate
    return candidates[-1]


def _header(text: str, name: str) -> re.Match[str] | None:
    pattern = rf"^[ \t>*_#-]*{name}[ \t*_]*:[ \t*_]*(.*)$"
    matches = list(re.finditer(pattern, text, flags=re.IGNORECASE | re.MULTILINE))
    return matches[-1] if matches else None


def header_number(text: str, name: str) -> float | None:
    """The first number on the last ``NAME:`` line, or None (missing header or no number)."""
    match = _header(_clean(text), name)
    if match is None:
        return None
    found = _NUMBER.search(match.group(1))
    return _finite(found.group(0)) if found else None


def header_text(text: str, name: str, *, to_end: bool = False) -> str | None:
    """The text after the last ``NAME:`` header (its line, or everything after it), or None."""
    cleaned = _clean(text)
    match = _header(cleaned, name)
    if match is None:
        return None
    value = cleaned[match.start(1) :] if to_end else match.group(1)
    value = value.strip().strip("*_").strip()
    return value or None
