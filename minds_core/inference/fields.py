"""Reading a request body's fields with a clear 400 for each one that is wrong (its name, what it must be).

Every protocol module reads its body through ``Fields``: one place decides what a missing,
mistyped or out-of-range field answers, so OpenAI, Anthropic and token-level requests fail alike.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import bad_request

__all__ = ["Fields"]

_MISSING = object()


class Fields:
    """The JSON object ``body``, read field by field; ``where`` prefixes each field's name in errors."""

    def __init__(self, body: Any, where: str = "") -> None:
        if not isinstance(body, dict):
            raise bad_request(f"{where or 'the request body'} must be a JSON object, got {type(body).__name__}", where or None)
        self.body = body
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value of ``key`` (None counts as absent)."""
        value = self.body.get(key)
        return default if value is None else value

    def required(self, key: str) -> Any:
        value = self.body.get(key)
        if value is None:
            raise bad_request(f"{self.name(key)} is required", self.name(key))
        return value

    def string(self, key: str, default: Any = _MISSING) -> Any:
        value = self.required(key) if default is _MISSING else self.get(key, default)
        if value is not default and not isinstance(value, str):
            raise bad_request(f"{self.name(key)} must be a string, got {type(value).__name__}", self.name(key))
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise bad_request(f"{self.name(key)} must be true or false, got {value!r}", self.name(key))
        return value

    def integer(self, key: str, low: int, high: int | None = None, default: Any = _MISSING) -> Any:
        """An integer within [low, high] (high None: no bound); ``default`` when absent (required without one)."""
        value = self.required(key) if default is _MISSING else self.get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_request(f"{self.name(key)} must be an integer, got {value!r}", self.name(key))
        if value < low or (high is not None and value > high):
            span = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise bad_request(f"{self.name(key)} = {value}: it must be {span}", self.name(key))
        return value

    def number(self, key: str, low: float, high: float, default: float) -> float:
        """A finite number within [low, high], ``default`` when absent."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad_request(f"{self.name(key)} must be a number, got {value!r}", self.name(key))
        if not low <= value <= high:
            raise bad_request(f"{self.name(key)} = {value}: it must be between {low:g} and {high:g}", self.name(key))
        return float(value)

    def array(self, key: str, default: Any = _MISSING) -> Any:
        value = self.required(key) if default is _MISSING else self.get(key, default)
        if value is not default and not isinstance(value, list):
            raise bad_request(f"{self.name(key)} must be an array, got {type(value).__name__}", self.name(key))
        return value

    def strings(self, key: str, most: int = 16) -> list[str]:
        """A string or an array of up to ``most`` non-empty strings (``stop``, ``stop_sequences``); [] when absent."""
        value = self.get(key, [])
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
            raise bad_request(f"{self.name(key)} must be a non-empty string or an array of them, got {value!r}", self.name(key))
        if len(items) > most:
            raise bad_request(f"{self.name(key)} has {len(items)} entries; at most {most} are accepted", self.name(key))
        return items
