"""Checks of environment arguments ([env.args]) for loaders, with errors that name the key and what it must be."""

from __future__ import annotations

import math
from typing import Any

from minds_core.config.secrets import shown_value
from minds_core.errors import ConfigError


def is_int(value: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def require(ok: bool, name: str, value: Any, requirement: str) -> None:
    """Raise a ConfigError ``env.args.NAME = VALUE: REQUIREMENT`` unless ``ok`` (a secret-named key's value is not shown)."""
    if not ok:
        raise ConfigError(f"env.args.{name} = {shown_value(name, value)}: {requirement}")


def int_arg(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` when it is an integer in ``low..high`` (no upper bound when None), else a ConfigError."""
    bounds = f">= {low}" if high is None else f"in {low}..{high}"
    require(is_int(value) and value >= low and (high is None or value <= high), name, value, f"must be an integer {bounds}")
    return value
