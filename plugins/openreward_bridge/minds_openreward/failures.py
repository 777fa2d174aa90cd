"""Recognising the OpenReward SDK's failures: capacity (429), authentication, unreachable servers."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp

from minds_core import UsageError


class NoRewardError(Exception):
    """The episode ended without any reward: the rollout fails (counted by the core)."""


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, and the errors a retry wrapper collected (``errors``)."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend([current.__cause__, current.__context__, *getattr(current, "errors", [])])


def http_status(exc: BaseException) -> int | None:
    """The first HTTP status found in the chain, if any."""
    for current in exception_chain(exc):
        if isinstance(current, aiohttp.ClientResponseError):
            return current.status
    return None


def is_capacity_error(exc: BaseException) -> bool:
    """True for HTTP 429 ("maximum capacity": too many sessions) anywhere in the chain."""
    return any(isinstance(e, aiohttp.ClientResponseError) and e.status == 429 for e in exception_chain(exc))


def _is_auth_error(exc: BaseException) -> bool:
    from openreward.api._session.http import AuthenticationError

    return any(isinstance(e, AuthenticationError) for e in exception_chain(exc)) or http_status(exc) in (401, 403)


def _connection_error(exc: BaseException) -> BaseException | None:
    """The first network-level failure in the chain, if any."""
    return next((e for e in exception_chain(exc) if isinstance(e, (aiohttp.ClientConnectionError, OSError, TimeoutError))), None)


def usage_error(exc: BaseException, target: str, key_env: str) -> UsageError | None:
    """A clear message for failures a user fixes in the config or environment; None for the rest.

    Never includes the key itself, only the name of the variable it came from.
    """
    if _is_auth_error(exc):
        if key_env:
            return UsageError(
                f"{target} rejected the API key in ${key_env} (HTTP {http_status(exc) or 401}). "
                f"Check the key (https://openreward.ai/keys) and that it can use this environment."
            )
        return UsageError(
            f"{target} requires an API key: set [env.args] api_key_env to the name of the variable holding it."
        )
    status = http_status(exc)
    if status == 404:
        return UsageError(f"{target}: not found (HTTP 404). Names are case-sensitive; check name, variant and base_url.")
    cause = _connection_error(exc)
    if cause is not None and status is None:
        return UsageError(f"cannot reach {target}: {type(cause).__name__}: {cause}")
    return None
