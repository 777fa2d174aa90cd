"""Where an environment lives, which key goes there, and the SDK clients that talk to it."""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import attrs

from minds_core import UsageError
from minds_openreward.failures import usage_error
from minds_openreward.settings import BridgeSettings

T = TypeVar("T")


@attrs.frozen
class Connection:
    """An environment's address and the API key sent to it (never shown in reprs or messages)."""

    name: str
    base_url: str
    variant: str | None
    key_env: str
    api_key: str = attrs.field(repr=False)

    @property
    def target(self) -> str:
        """How messages name the environment."""
        return f"environment {self.name!r} at {self.base_url}" if self.base_url else f"OpenReward environment {self.name!r}"

    def environments_api(self) -> Any:
        """A new SDK environments client; create it inside the event loop that will use it."""
        if self.base_url:
            from openreward.api.environments.client import AsyncEnvironmentsAPI

            return AsyncEnvironmentsAPI(base_url=self.base_url, api_key=self.api_key)
        from openreward import AsyncOpenReward

        return AsyncOpenReward(api_key=self.api_key).environments

    def environment(self, api: Any) -> Any:
        """The SDK's handle on this environment through ``api``."""
        return api.get(self.name, variant=self.variant, base_url=self.base_url or None)

    def explain(self, exc: BaseException) -> UsageError | None:
        """A user-facing error for auth / not-found / unreachable failures, else None."""
        return usage_error(exc, self.target, self.key_env)


def connect(settings: BridgeSettings) -> Connection:
    """The connection for ``settings``; a missing key for a server that needs one is a UsageError.

    The hosted service gets the key from ``api_key_env`` (default OPENREWARD_API_KEY).
    A ``base_url`` server gets a key only when ``api_key_env`` names one explicitly.
    """
    key_env = settings.key_env
    where = f"OpenReward environment {settings.name!r}" if settings.hosted else f"the server at {settings.base_url}"
    api_key = read_key(key_env, where) if key_env else ""
    variant = settings.variant or (settings.name if settings.base_url and "/" not in settings.name else None)
    return Connection(settings.name, settings.base_url, variant, key_env, api_key)


def read_key(key_env: str, where: str) -> str:
    """The API key in ``$key_env``; a UsageError naming the variable (never the value) when unset."""
    api_key = os.environ.get(key_env, "")
    if not api_key:
        raise UsageError(f"no API key for {where}: set the environment variable {key_env} (keys: https://openreward.ai/keys)")
    return api_key


def sdk_secrets(values: dict[str, str]) -> dict[str, Any]:
    """Secrets as the SDK sends them: well-known names keep their provider domains, others get none."""
    from openreward.api.sandboxes.secrets import WELL_KNOWN_SECRETS

    return {name: value if name in WELL_KNOWN_SECRETS else (value, []) for name, value in values.items()}


def run_blocking(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a private event loop in a worker thread; safe to call inside a running loop."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="minds-openreward") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def query(connection: Connection, ask: Callable[[Any], Awaitable[T]]) -> T:
    """One blocking question to the environment (splits, tasks), with user errors made readable."""

    async def run() -> T:
        api = connection.environments_api()
        try:
            return await ask(connection.environment(api))
        finally:
            await api.aclose()

    try:
        return run_blocking(run)
    except Exception as exc:
        explained = connection.explain(exc)
        if explained is not None:
            raise explained from None
        raise


class ClientPool:
    """One SDK client per event loop (its HTTP sessions cannot cross loops)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Any]] = weakref.WeakKeyDictionary()

    def environment(self) -> Any:
        """The environment handle for the running loop, created on first use."""
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is None:
            api = self.connection.environments_api()
            entry = self._clients[loop] = (api, self.connection.environment(api))
        return entry[1]

    async def close(self) -> None:
        """Close the running loop's client."""
        entry = self._clients.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[0].aclose()
