"""HTTP errors of ``minds serve``: each becomes a status and a ``{"detail": ...}`` body."""

from __future__ import annotations

__all__ = ["BadRequest", "HttpError", "NotFound", "Unauthorized"]


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
