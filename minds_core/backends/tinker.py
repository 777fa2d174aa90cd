"""The hosted Tinker service: API key resolution and the real ServiceClient."""

from __future__ import annotations

import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from minds_core.config import RunConfig, TinkerConfig
from minds_core.errors import UsageError


def resolve_api_key(settings: TinkerConfig) -> str | None:
    """The key from ``[tinker] api_key``, else from the env var named by ``api_key_env``."""
    return settings.api_key or os.environ.get(settings.api_key_env) or None


def _key_source(settings: TinkerConfig) -> str:
    """Where the key was read from, for messages (never the key itself)."""
    return "[tinker] api_key" if settings.api_key else f"${settings.api_key_env}"


def create_tinker_service(config: RunConfig, run_dir: Path) -> Coroutine[Any, Any, Any]:
    """A ``tinker.ServiceClient`` for the hosted service, once it answers; clear errors before any work.

    The key and the package are checked at once; the returned coroutine reaches the
    service and starts the SDK's session (``minds_core.backends.connection``), then gives the client.
    """
    key = resolve_api_key(config.tinker)
    if not key:
        raise UsageError(
            f"backend 'tinker' needs an API key: export {config.tinker.api_key_env}=tml-... "
            "(or set [tinker] api_key_env to the variable that holds it), or use --backend local"
        )
    if not key.startswith("tml-"):
        raise UsageError(
            f"the Tinker API key in {_key_source(config.tinker)} does not look like one (Tinker keys start with 'tml-')"
        )
    try:
        import tinker  # noqa: F401 - only checked here; connection.py uses it
    except ImportError:
        raise UsageError("backend 'tinker' needs the tinker package: pip install tinker") from None
    return _connect(config.tinker, key)


async def _connect(settings: TinkerConfig, key: str) -> Any:
    from minds_core.backends.connection import connect

    return await connect(settings.base_url, key, _key_source(settings))
