"""The models the local backend makes itself, by name: where each one's directory is (made at first use)."""

from __future__ import annotations

from pathlib import Path

from minds_core.config import BUILTIN_MODELS, DEFAULT_BASE_MODEL

from .small_model import SMALL_MODEL, small_model_path
from .tiny_model import TINY_MODEL, tiny_model_path

__all__ = ["BUILTIN_MODELS", "DEFAULT_BASE_MODEL", "builtin_model_path"]

_PATHS = {SMALL_MODEL: small_model_path, TINY_MODEL: tiny_model_path}
assert set(_PATHS) == set(BUILTIN_MODELS), "every built-in name the config knows has a maker here"


def builtin_model_path(name: str) -> Path | None:
    """The directory of built-in model ``name`` (made first if missing), or None for any other name."""
    make = _PATHS.get(name)
    return make() if make else None
