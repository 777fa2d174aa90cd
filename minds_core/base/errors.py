"""Errors a user can act on: each carries the message to show and the exit code."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class MindsError(Exception):
    """An error reported to the user as one clear message, without a traceback."""

    exit_code = 1


class UsageError(MindsError):
    """Bad command-line usage or configuration (exit code 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration file, key or value is wrong."""


class PluginError(MindsError):
    """A plugin failed to load or register, or two plugins claim one name."""

    exit_code = 2


class UnknownNameError(UsageError):
    """A name (environment, reward function, loss, ...) that no plugin registers."""


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """A ' (did you mean X?)' hint for the closest option, or ''."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def utf8_problem(text: str) -> str:
    """What keeps ``text`` from being UTF-8 text ("" when nothing): bytes of a pipe or an argument that did not
    decode reach Python as lone surrogates, which no file, tokenizer or service takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        shown = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        return f"not UTF-8 text ({shown} at character {exc.start})"
    return ""
