"""The inference routes, independent of any HTTP server: a request's path and body in, a status and answer out.

A server finds the ``Route`` of a request (``find``), checks the caller's key (``request_key``
reads it as each SDK sends it) and calls ``answer``; it sends the JSON answer, or the ``Stream``'s
events as ``text/event-stream``. Every refusal is written in its protocol's error shape
(``error_body``): OpenAI's for ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models`` and
``/inference/v1/generate``, Anthropic's for ``/v1/messages*``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from . import anthropic_api, generate_api, openai_api
from .errors import ApiError, anthropic_body, openai_body
from .surface import Stream, Surface

__all__ = ["ROUTES", "Route", "answer", "error_body", "find", "request_key"]

Handler = Callable[[Surface, dict[str, Any], str], "dict[str, Any] | Stream"]


@attrs.frozen
class Route:
    """One inference route: its method and path, the handler and the protocol its errors are written in."""

    method: str  #: "GET" or "POST"
    path: str  #: the exact path
    handler: Handler  #: (surface, body, caller) -> a JSON answer or a Stream
    family: str  #: "openai" or "anthropic": the error body's shape


ROUTES = [
    Route("GET", "/v1/models", openai_api.list_models, "openai"),
    Route("POST", "/v1/chat/completions", openai_api.chat_completions, "openai"),
    Route("POST", "/v1/completions", openai_api.completions, "openai"),
    Route("POST", "/v1/messages", anthropic_api.messages, "anthropic"),
    Route("POST", "/v1/messages/count_tokens", anthropic_api.count_tokens, "anthropic"),
    Route("POST", "/inference/v1/generate", generate_api.generate, "openai"),
]
_BY_PATH = {route.path: route for route in ROUTES}


def find(path: str) -> Route | None:
    """The inference route at ``path`` (any method), or None."""
    return _BY_PATH.get(path.rstrip("/") or "/")


def request_key(headers: Mapping[str, str] | Any) -> str:
    """The caller's key: ``X-API-Key`` (Anthropic's SDK, the Tinker SDK) or ``Authorization: Bearer`` (OpenAI's)."""
    key = headers.get("X-API-Key") or ""
    if not key:
        scheme, _, token = (headers.get("Authorization") or "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
    return key


def error_body(family: str, error: ApiError) -> dict[str, Any]:
    """``error`` in ``family``'s error shape."""
    return anthropic_body(error) if family == "anthropic" else openai_body(error)


def answer(surface: Surface, route: Route, method: str, raw: bytes, caller: str) -> tuple[int, dict[str, Any] | Stream]:
    """Serve one request on ``route``: (200, the answer), or (a 4xx/5xx status, the error body)."""
    try:
        if method != route.method:
            raise ApiError(405, f"{route.path} is served with {route.method} only, not {method}")
        body: Any = {}
        if method == "POST":
            try:
                body = json.loads(raw or b"null")
            except (ValueError, RecursionError) as exc:
                raise ApiError(400, f"the request body is not JSON: {exc}") from None
            if not isinstance(body, dict):
                raise ApiError(400, "the request body must be a JSON object")
        return 200, route.handler(surface, body, caller)
    except ApiError as error:
        return error.status, error_body(route.family, error)
