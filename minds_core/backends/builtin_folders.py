"""Where the local backend keeps the folders of its built-in models (config, tokenizer, weights), known without
importing torch, transformers or the local backend: a process that only needs a built-in model's tokenizer (a Ray
worker sampling over HTTP, ``sampler_tokenizer``) finds the folder here, and the local backend
(``backends/local/model``) makes it under the same name.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

__all__ = ["SMALL_WEIGHTS_FILE", "TINY_FOLDER", "builtin_folder", "cache_dir", "made_builtin_folder"]

#: ``minds-tiny``'s folder name (random weights from a fixed seed; a new name when the way it is built changes).
TINY_FOLDER = "minds-tiny-v1"
#: ``minds-small``'s trained weights, shipped with minds-core; its folder is named after their digest.
SMALL_WEIGHTS_FILE = Path(__file__).parent / "local" / "minds-small.safetensors"


def cache_dir() -> Path:
    """Root of minds' cache: ``$MINDS_CACHE_DIR``, else ``$XDG_CACHE_HOME/minds``, else ``~/.cache/minds``."""
    if override := os.environ.get("MINDS_CACHE_DIR"):
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "minds"


@cache
def _weights_digest() -> str:
    return hashlib.sha256(SMALL_WEIGHTS_FILE.read_bytes()).hexdigest()[:12]


def builtin_folder(name: str) -> Path | None:
    """The folder of built-in model ``name`` in the cache, made or not; None for any other name."""
    versioned = {"minds-tiny": lambda: TINY_FOLDER, "minds-small": lambda: f"minds-small-{_weights_digest()}"}.get(name)
    return cache_dir() / "models" / versioned() if versioned else None


def made_builtin_folder(name: str) -> Path | None:
    """The folder of built-in model ``name`` if the local backend has made it on this machine, else None."""
    folder = builtin_folder(name)
    return folder if folder is not None and (folder / "config.json").is_file() else None
