"""Backends: services speaking the Tinker client API (the hosted service, or local torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minds_core.backends.tinker import resolve_api_key
from minds_core.config import RunConfig
from minds_core.errors import UsageError


def choose_backend(config: RunConfig) -> str:
    """``auto`` means tinker when an API key is configured, else local."""
    if config.backend != "auto":
        return config.backend
    return "tinker" if resolve_api_key(config.tinker) else "local"


def local_checkpoint_root(config: RunConfig) -> Path:
    """Where the local backend keeps checkpoints: ``<runs_dir>/_checkpoints``."""
    return Path(config.runs_dir) / "_checkpoints"


def create_local_service(config: RunConfig, run_dir: Path) -> Any:
    """The in-process torch + peft service; checkpoints live under the runs directory."""
    try:
        from minds_core.backends.local import create_service_client
    except ImportError as exc:
        raise UsageError(f'the local backend needs torch and peft: pip install "minds-core[local]" ({exc})') from None
    return create_service_client(local_checkpoint_root(config))
