"""Checks of environment arguments, with errors that name the key and what it must be."""

from __future__ import annotations

import math
from typing import Any

from minds_core.errors import ConfigError


def is_int(value: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def require(ok: bool, name: str, value: Any, requirement: str) -> None:
    """Raise a ConfigError ``env.args.NAME = VALUE: REQUIREMENT`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"env.args.{name} = {value!r}: {requirement}")
