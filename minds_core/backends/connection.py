"""Reaching the hosted Tinker service at start-up: bounded, interruptible, one clear error.

The SDK's ``ServiceClient`` starts its session when first used, retrying a
failed connection for up to five minutes and blocking the thread that uses it.
minds instead (1) sends the SDK's own first request (``POST
/api/v1/client/config`` with the ``X-API-Key`` header) itself, on the run's
event loop, with short timeouts and one retry, and then (2) lets the SDK start
its session on a daemon thread, awaited with a deadline. Both stop at once on
Ctrl-C, and the whole start-up ends within ``STARTUP_TIMEOUT`` seconds: an
unreachable service or a rejected key fails the run with what was contacted
and what to check.

During the run, ``ServiceWatch`` probes the service every few seconds, so that one
that stops answering (killed, its machine gone) ends the run within
``tinker.unreachable_timeout`` seconds with exit code 1 (see ``retry``), where the
SDK alone would retry for many minutes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from minds_core.backends.retry import RETRY_STATUSES, ServiceLost
from minds_core.base.errors import UsageError
from minds_core.base.logs import get_logger

T = TypeVar("T")
log = get_logger("service")

#: The request the SDK sends first when it starts a session.
PROBE_PATH = "/api/v1/client/config"
#: Seconds to open a connection, and for the whole of one attempt.
CONNECT_TIMEOUT = 5.0
ATTEMPT_TIMEOUT = 10.0
#: Attempts in all (a blip is retried once, after RETRY_DELAY seconds).
ATTEMPTS = 2
RETRY_DELAY = 1.0
#: Seconds for the probe and the SDK's session start together.
STARTUP_TIMEOUT = 28.0


def _url_source(base_url: str) -> str:
    """Where the URL came from, as the user would set it."""
    if base_url:
        return "[tinker] base_url"
    if os.environ.get("TINKER_BASE_URL"):
        return "$TINKER_BASE_URL"
    return "the SDK's default URL"


def _rejected(where: str, key_source: str, detail: str) -> UsageError:
    return UsageError(
        f"{where} rejected the API key from {key_source} ({detail}). Check that {key_source} holds a current "
        "key for this service (the Tinker console lists and creates keys), or use --backend local"
    )


def _unreachable(where: str, base_url: str, problem: str) -> UsageError:
    return UsageError(
        f"cannot reach {where}: {problem}. Check {_url_source(base_url)}, this machine's network "
        "(proxy, firewall, VPN) and the service's status, then run again; or use --backend local"
    )


def _detail(response: httpx.Response, secret: str) -> str:
    """The start of the service's answer, the key blanked out should it be echoed."""
    text = " ".join(response.text.split())[:200].replace(secret, "***")
    return f"HTTP {response.status_code} {response.reason_phrase}" + (f": {text}" if text else "")


async def _attempt(client: httpx.AsyncClient, url: str, api_key: str, sdk_version: str) -> httpx.Response:
    return await asyncio.wait_for(
        client.post(url + PROBE_PATH, json={"sdk_version": sdk_version}, headers={"X-API-Key": api_key}),
        ATTEMPT_TIMEOUT,
    )


async def connect(base_url: str, api_key: str, key_source: str) -> Any:
    """A ``tinker.ServiceClient`` whose session has started, or ``UsageError`` saying what to check.

    ``base_url`` is ``[tinker] base_url`` ('' for the SDK's default: ``$TINKER_BASE_URL``, else
    production); ``key_source`` names where the key came from (never the key).
    """
    import tinker
    from tinker.lib.base_url import resolve_base_url

    url = resolve_base_url(base_url or None)
    where = f"the Tinker service at {url} (from {_url_source(base_url)})"
    began = time.monotonic()
    await _probe(url, where, base_url, api_key, key_source)  # bounded by its own timeouts (~21 s at most)
    service = tinker.ServiceClient(api_key=api_key, base_url=url)
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT - (time.monotonic() - began)):
            await in_daemon_thread(lambda: service.holder)  # the SDK's session start (its lazy holder)
    except TimeoutError:
        raise UsageError(
            f"{where} answered, but the SDK did not start a session within {STARTUP_TIMEOUT:g} s. "
            "Check the service's status and this machine's network, then run again; or use --backend local"
        ) from None
    except (tinker.AuthenticationError, tinker.PermissionDeniedError) as exc:
        raise _rejected(where, key_source, f"{type(exc).__name__}: {exc}".replace(api_key, "***")) from None
    except tinker.APIConnectionError as exc:
        raise _unreachable(where, base_url, f"{type(exc).__name__}: {exc}") from None
    except tinker.TinkerError as exc:
        raise UsageError(f"{where} refused to start a session: {type(exc).__name__}: {exc}".replace(api_key, "***")) from None
    return service


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()`` run on a daemon thread: the loop keeps running, and Ctrl-C or a deadline never wait for it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(result: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def run() -> None:
        result, error = None, None
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            error = exc
        try:
            loop.call_soon_threadsafe(deliver, result, error)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass

    threading.Thread(target=run, name="minds-tinker-start", daemon=True).start()
    return await future


async def _probe(url: str, where: str, base_url: str, api_key: str, key_source: str) -> None:
    """One request (the SDK's first) to ``url``; returns when it is answered with success."""
    import tinker

    timeout = httpx.Timeout(ATTEMPT_TIMEOUT, connect=CONNECT_TIMEOUT)
    problem, reached = "", False
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client:
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(RETRY_DELAY)
            try:
                response = await _attempt(client, url, api_key, tinker.__version__)
            except (httpx.TransportError, TimeoutError) as exc:
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else f"no answer within {ATTEMPT_TIMEOUT:g} s"
                reached = False
                continue
            except httpx.InvalidURL as exc:
                raise UsageError(f"{where}: not a valid URL ({exc}); fix {_url_source(base_url)}") from None
            status = response.status_code
            if status < 400:
                return
            if status in (401, 403):
                raise _rejected(where, key_source, _detail(response, api_key))
            if status in (404, 405):
                raise UsageError(
                    f"{where} does not serve the Tinker API ({_detail(response, api_key)} for POST {PROBE_PATH}). "
                    f"Check {_url_source(base_url)}, or use --backend local"
                )
            problem, reached = _detail(response, api_key), True
            if status not in RETRY_STATUSES and status < 500:
                break  # the service understood and refused: asking again changes nothing
    tries = f"after {attempt + 1} attempt{'s' if attempt else ''}"
    if not reached:
        raise _unreachable(where, base_url, f"{problem} ({tries})")
    raise UsageError(
        f"{where} answered {problem} ({tries}). Check {_url_source(base_url)} and the service's status, "
        "then run again; or use --backend local"
    )


#: Seconds between two probes of a watched service (less when ``tinker.unreachable_timeout`` is short).
PROBE_INTERVAL = 5.0


class ServiceWatch:
    """Whether the service still answers, during a run: a probe (the SDK's first request) every few seconds.

    Any HTTP answer, an error status included, counts as alive. When none has come for
    ``unreachable_after`` seconds (``tinker.unreachable_timeout``), the service is lost: ``guard``
    ends every wait on it at once with ``ServiceLost``, naming the URL, how long and the last error.
    """

    def __init__(self, url: str, api_key: str, unreachable_after: float) -> None:
        self.url, self._api_key, self.unreachable_after = url, api_key, unreachable_after
        self.interval = min(PROBE_INTERVAL, unreachable_after / 3)
        self.lost: str | None = None
        self._gone = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, base_url: str, api_key: str, unreachable_after: float) -> ServiceWatch:
        """A watch on the service at ``base_url`` ('' for the SDK's default), probing from now on (call on the loop)."""
        from tinker.lib.base_url import resolve_base_url

        watch = cls(resolve_base_url(base_url or None), api_key, unreachable_after)
        watch._task = asyncio.get_running_loop().create_task(watch._watch(), name="minds-service-watch")
        return watch

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def guard(self, pending: Any) -> Any:
        """``await pending``, or ``ServiceLost`` once the service is lost (``pending`` is then cancelled)."""
        work = asyncio.ensure_future(pending)
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                return work.result()
            raise ServiceLost(self.lost)
        finally:
            gone.cancel()
            if not work.done():
                work.cancel()

    async def _watch(self) -> None:
        import tinker

        timeout = httpx.Timeout(min(ATTEMPT_TIMEOUT, self.interval * 2), connect=min(CONNECT_TIMEOUT, self.interval * 2))
        answered = time.monotonic()
        warned = False
        async with httpx.AsyncClient(timeout=timeout) as client:
            while True:
                await asyncio.sleep(self.interval)
                try:
                    await _attempt(client, self.url, self._api_key, tinker.__version__)
                except (httpx.HTTPError, TimeoutError) as exc:
                    problem = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__}: no answer"
                    silent = time.monotonic() - answered
                    if silent >= self.unreachable_after:
                        self.lost = (
                            f"the service at {self.url} has not answered for {silent:.0f} s (tinker.unreachable_timeout = "
                            f"{self.unreachable_after:g}; last: {problem.replace(self._api_key, '***')})"
                        )
                        self._gone.set()
                        return
                    if not warned:
                        log.warning("the service does not answer", url=self.url, error=problem.replace(self._api_key, "***"),
                                    stops_after_s=self.unreachable_after)  # fmt: skip
                        warned = True
                    continue
                answered, warned = time.monotonic(), False
