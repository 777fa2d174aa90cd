"""Reaching the hosted Tinker service at start-up: one bounded probe, one clear error.

The SDK's ``ServiceClient`` retries a failed connection for up to five minutes,
blocking the thread that first uses it. Before handing it to the trainer, minds
sends the SDK's own first request (``POST /api/v1/client/config`` with the
``X-API-Key`` header) itself, on the run's event loop (so Ctrl-C stops it at
once), with short timeouts and one retry: an unreachable service or a rejected
key fails the run in seconds, with what was contacted and what to check.
"""

from __future__ import annotations

import asyncio
import os

import httpx

from minds_core.errors import UsageError

#: The request the SDK sends first when it starts a session.
PROBE_PATH = "/api/v1/client/config"
#: Seconds to open a connection, and for the whole of one attempt.
CONNECT_TIMEOUT = 5.0
ATTEMPT_TIMEOUT = 10.0
#: Attempts in all (a blip is retried once, after RETRY_DELAY seconds); the probe ends within ~25 s.
ATTEMPTS = 2
RETRY_DELAY = 1.0


def _url_source(base_url: str) -> str:
    """Where the URL came from, as the user would set it."""
    if base_url:
        return "[tinker] base_url"
    if os.environ.get("TINKER_BASE_URL"):
        return "$TINKER_BASE_URL"
    return "the SDK's default URL"


def _detail(response: httpx.Response, secret: str) -> str:
    """The start of the service's answer, the key blanked out should it be echoed."""
    text = " ".join(response.text.split())[:200].replace(secret, "***")
    return f"HTTP {response.status_code} {response.reason_phrase}" + (f": {text}" if text else "")


async def _attempt(client: httpx.AsyncClient, url: str, api_key: str, sdk_version: str) -> httpx.Response:
    return await asyncio.wait_for(
        client.post(url + PROBE_PATH, json={"sdk_version": sdk_version}, headers={"X-API-Key": api_key}),
        ATTEMPT_TIMEOUT,
    )


async def check_service(base_url: str, api_key: str, key_source: str) -> str:
    """Probe the service the SDK will use; returns its URL, or raises ``UsageError`` saying what to check.

    ``base_url`` is ``[tinker] base_url`` ('' for the SDK's default, ``$TINKER_BASE_URL`` or
    production); ``key_source`` names where the key came from (never the key).
    """
    import tinker
    from tinker.lib.base_url import resolve_base_url

    url = resolve_base_url(base_url or None)
    where = f"the Tinker service at {url} (from {_url_source(base_url)})"
    timeout = httpx.Timeout(ATTEMPT_TIMEOUT, connect=CONNECT_TIMEOUT)
    problem, reached = "", False
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client:
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(RETRY_DELAY)
            try:
                response = await _attempt(client, url, api_key, tinker.__version__)
            except (httpx.TransportError, asyncio.TimeoutError) as exc:
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else f"no answer within {ATTEMPT_TIMEOUT:g} s"
                reached = False
                continue
            except httpx.InvalidURL as exc:
                raise UsageError(f"{where}: not a valid URL ({exc}); fix {_url_source(base_url)}") from None
            status = response.status_code
            if status < 400:
                return url
            if status in (401, 403):
                raise UsageError(
                    f"{where} rejected the API key from {key_source} ({_detail(response, api_key)}). "
                    f"Check that {key_source} holds a current key for this service (the Tinker console lists "
                    "and creates keys), or use --backend local"
                )
            if status in (404, 405):
                raise UsageError(
                    f"{where} does not serve the Tinker API ({_detail(response, api_key)} for POST {PROBE_PATH}). "
                    f"Check {_url_source(base_url)}, or use --backend local"
                )
            problem, reached = _detail(response, api_key), True
            if status not in (408, 409, 429) and status < 500:
                break  # the service understood and refused: asking again changes nothing
    failed = f"{where} answered {problem}" if reached else f"cannot reach {where}: {problem}"
    raise UsageError(
        f"{failed} (after {attempt + 1} attempt{'s' if attempt else ''}). "
        f"Check {_url_source(base_url)}, this machine's network (proxy, firewall, VPN) and the service's "
        "status, then run again; or use --backend local"
    )
