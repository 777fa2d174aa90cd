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


def create_local_service(config: RunConfig, run_dir: Path) -> Any:
    """The in-process torch + peft service on ``local.device``; checkpoints live under the runs directory."""
    try:
        from minds_core.backends.local import LocalBadRequestError, create_service_client
    except ImportError as exc:
        raise UsageError(f'the local backend needs torch and peft: pip install "minds-core[local]" ({exc})') from None
    try:
        return create_service_client(Path(config.runs_dir) / "_checkpoints", config.local.device)
    except LocalBadRequestError as exc:
        raise UsageError(str(exc)) from None
