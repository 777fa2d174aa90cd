"""The hosted Tinker service: API key resolution and the real ServiceClient."""

from __future__ import annotations

import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from minds_core.base.errors import UsageError
from minds_core.config import BUILTIN_MODELS, RunConfig, TinkerConfig
from minds_core.contract.parts import BackendFit


def resolve_api_key(settings: TinkerConfig) -> str | None:
    """The key from ``[tinker] api_key``, else from the env var named by ``api_key_env``."""
    return settings.api_key or os.environ.get(settings.api_key_env) or None


def _key_source(settings: TinkerConfig) -> str:
    """Where the key was read from, for messages (never the key itself)."""
    return "[tinker] api_key" if settings.api_key else f"${settings.api_key_env}"


def local_only_model(model: str) -> str | None:
    """Why the hosted service cannot serve ``model`` (a model only this machine has), else None."""
    if model in BUILTIN_MODELS:
        return f"model {model!r} is built by the local backend"
    if model.startswith(("/", "./", "../", "~")) or os.path.isdir(os.path.expanduser(model)):
        return f"model {model!r} is a local directory"
    return None


class TinkerBackend:
    """The ``tinker`` BackendFactory: the hosted service; under ``auto``, preferred when a key is configured."""

    def __call__(self, config: RunConfig, run_dir: Path) -> Coroutine[Any, Any, Any]:
        return create_tinker_service(config, run_dir)

    def can_serve(self, config: RunConfig) -> BackendFit:
        where = _key_source(config.tinker)
        if not resolve_api_key(config.tinker):
            return BackendFit(False, f"no Tinker API key ({where} is not set)", preference=1)
        local_only = local_only_model(config.model.base_model)
        if local_only:
            return BackendFit(False, f"{local_only}, which the hosted service cannot serve; the key in {where} is not used", 1)
        return BackendFit(True, f"a Tinker API key is configured ({where}) and model {config.model.base_model!r} is not local", 1)

    def watch(self, config: RunConfig) -> Any:
        """A ``ServiceWatch`` on the service for the run (None with ``tinker.unreachable_timeout = 0``)."""
        key = resolve_api_key(config.tinker)
        if config.tinker.unreachable_timeout <= 0 or not key:
            return None
        from minds_core.backends.connection import ServiceWatch

        return ServiceWatch.start(config.tinker.base_url, key, config.tinker.unreachable_timeout)

    def export_adapter(self, config: RunConfig, service: Any, checkpoint: str, out_dir: Path) -> str:
        """The adapter of ``checkpoint`` (a saved state), downloaded as the SDK downloads external weights."""
        from minds_core.backends import rest_client
        from minds_core.backends.tinker_export import export_hosted

        return export_hosted(checkpoint, out_dir, service, rest_client(service))


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
