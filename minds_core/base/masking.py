"""Masking: every secret value this process knows, replaced by *** wherever output leaves it.

Loading a config remembers its secret values (``seal``: the values of secret-named
keys, URL passwords, header values, and the secret-named environment variables
such as ``TINKER_API_KEY``). ``mask`` then hides them, and any URL password or
secret-named query parameter, in a text; ``mask_data`` in the strings of a
record. They are applied where output leaves the process: the run folder's
files (``run_directory``, ``config.yaml``, ``train.log``), log lines
(``logs``), the W&B sink, and the ``minds`` command's stdout and stderr
(``masked_streams``, ``excepthook``), so a plugin's exception or print that
echoes a secret is stored and shown masked.

Values shorter than ``MIN_CHARS`` are redacted by key (``secrets``) but
not searched for in text: masking every ``"1234"`` would garble numbers and prose.
"""

from __future__ import annotations

import html
import json
import re
import sys
import traceback
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TextIO

from minds_core.base.secrets import REDACTED, redact_text, secret_values

#: The shortest secret value searched for in text.
MIN_CHARS = 6

_known: frozenset[str] = frozenset()
_pattern: re.Pattern[str] | None = None


def remember(values: Iterable[str]) -> None:
    """Mask ``values`` (and their JSON-, HTML- and repr-escaped spellings) from now on."""
    global _known, _pattern
    spellings = set(_known)
    for value in values:
        if len(value) >= MIN_CHARS:
            spellings.update({value, json.dumps(value)[1:-1], html.escape(value), repr(value)[1:-1]})
    if spellings != _known:
        _known = frozenset(spellings)
        _pattern = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))


def seal(config_data: Any) -> None:
    """Remember the secrets of a config (plain data, before or after validation) and of the environment."""
    remember(secret_values(config_data))


def mask(text: str) -> str:
    """``text`` with every known secret value, URL password and secret query parameter replaced by ***."""
    if _pattern is not None:
        text = _pattern.sub(REDACTED, text)
    return redact_text(text) if ("://" in text or "=" in text) else text


def mask_data(value: Any) -> Any:
    """A copy of a record (mappings, lists, strings, numbers) with its strings, keys included, masked."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        return {mask_data(k): mask_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_data(v) for v in value]
    return value


class MaskedStream:
    """A text stream that masks what is written to it; everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(mask(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextmanager
def masked_streams() -> Iterator[None]:
    """Mask ``sys.stdout`` and ``sys.stderr`` until the block ends."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = MaskedStream(sys.stdout), MaskedStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def excepthook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
    """``sys.excepthook`` printing the traceback masked (an exception's message may hold a secret)."""
    sys.stderr.write(mask("".join(traceback.format_exception(kind, error, tb))))
