"""Reading the five code numbers out of a completion."""

from __future__ import annotations

import re

from minds_core import normalize_minus

#: How many integers a completion must contain.
CODE_LENGTH = 5

# A whole integer with an optional sign: not glued to a word ("x7", "7b"), not part
# of a decimal ("2.5"); a trailing full stop ("5.") still ends the number.
_INTEGER = re.compile(r"(?<![\w.])[-+]?\d+(?![\w]|\.\d)")


def integers(text: str) -> list[int]:
    """Every whole integer in ``text``, in order; typographic minus signs count as minus."""
    return [int(match) for match in _INTEGER.findall(normalize_minus(text))]


def parse_code(completion: str) -> tuple[int, ...] | None:
    """The last five integers of the completion, or None when it holds fewer than five."""
    found = integers(completion)
    if len(found) < CODE_LENGTH:
        return None
    return tuple(found[-CODE_LENGTH:])


def format_code(code: tuple[int, ...]) -> str:
    """Numbers as the probe shows them: ``"12, 7, 300, 45, 9"``."""
    return ", ".join(str(n) for n in code)
