"""HTTP errors of ``minds serve``: each becomes a status and a ``{"detail": ...}`` body."""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "HttpError",
    "MethodNotAllowed",
    "NotAcceptable",
    "NotFound",
    "PayloadTooLarge",
    "TooManyRequests",
    "Unauthorized",
    "UnsupportedMediaType",
    "public_detail",
]


class HttpError(Exception):
    """A request the server refuses, with the status it answers and a message saying why."""

    status = 500

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(HttpError):
    """400: a body the server cannot use, or a feature it does not support (the message names what is)."""

    status = 400


class Unauthorized(HttpError):
    """401: ``--api-key`` is set and the request's ``X-API-Key`` is not it."""

    status = 401


class NotFound(HttpError):
    """404: an unknown path, session, model, sampling session or request id."""

    status = 404


class MethodNotAllowed(HttpError):
    """405: a route the server has, asked for with another method (the message names the one it serves)."""

    status = 405


class NotAcceptable(HttpError):
    """406: a result asked for in a form the server cannot give it in (the message names the one it can)."""

    status = 406


class PayloadTooLarge(HttpError):
    """413: a request body (as sent, or once decompressed) past ``ServeLimits``; the connection is closed."""

    status = 413


class UnsupportedMediaType(HttpError):
    """415: a body in a ``Content-Encoding`` the server does not decode (the message names those it does)."""

    status = 415


class TooManyRequests(HttpError):
    """429: the server holds as much of a kind of state (training runs) as its limits allow."""

    status = 429


def public_detail(detail: str, hidden: dict[str, str]) -> str:
    """``detail`` with each of ``hidden``'s server paths replaced by its public name (errors never show them)."""
    for path in sorted(hidden, key=len, reverse=True):
        detail = detail.replace(path, hidden[path])
    return detail
