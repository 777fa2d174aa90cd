"""The hosted Tinker service: API key resolution and the real ServiceClient."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from minds_core.config import RunConfig, TinkerConfig
from minds_core.errors import UsageError


def resolve_api_key(settings: TinkerConfig) -> str | None:
    """The key from ``[tinker] api_key``, else from the env var named by ``api_key_env``."""
    return settings.api_key or os.environ.get(settings.api_key_env) or None


def create_tinker_service(config: RunConfig, run_dir: Path) -> Any:
    """A ``tinker.ServiceClient`` for the hosted service; clear errors before any work."""
    key = resolve_api_key(config.tinker)
    if not key:
        raise UsageError(
            f"backend 'tinker' needs an API key: export {config.tinker.api_key_env}=tml-... "
            "(or set [tinker] api_key_env to the variable that holds it), or use --backend local"
        )
    if not key.startswith("tml-"):
        raise UsageError(
            f"the Tinker API key in {'[tinker] api_key' if config.tinker.api_key else '$' + config.tinker.api_key_env} "
            "does not look like one (Tinker keys start with 'tml-')"
        )
    try:
        import tinker
    except ImportError:
        raise UsageError("backend 'tinker' needs the tinker package: pip install tinker") from None
    return tinker.ServiceClient(api_key=key, base_url=config.tinker.base_url or None)
