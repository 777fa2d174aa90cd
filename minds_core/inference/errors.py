"""Errors of the inference surfaces, and the body each protocol's SDK reads them from.

An ``ApiError`` carries a status, a protocol-neutral ``kind`` and a message saying what was
wrong, where, and how to fix it. ``openai_body`` and ``anthropic_body`` write it in the shape
the official ``openai`` and ``anthropic`` SDKs parse (they pick their exception class from the
status: 400 ``BadRequestError``, 401 ``AuthenticationError``, 404 ``NotFoundError``, ...).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError", "anthropic_body", "bad_request", "openai_body", "unknown_model"]

#: status -> the Anthropic error ``type`` (https://docs.anthropic.com/en/api/errors)
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}
#: status -> the OpenAI error ``type``
_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error"}


class ApiError(Exception):
    """A refused inference request: ``status``, ``message`` (what, where, how to fix), the offending
    ``param`` (a dotted path into the request body, or None) and an OpenAI ``code`` (or None)."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def bad_request(message: str, param: str | None = None) -> ApiError:
    """400: a request body that cannot be served as sent."""
    return ApiError(400, message, param)


def unknown_model(model: Any, served: list[str]) -> ApiError:
    """404: a ``model`` this server does not serve (the message lists those it does)."""
    shown = ", ".join(repr(name) for name in served) or "none"
    return ApiError(
        404,
        f"model {model!r} is not served here; it serves {shown}, or a tinker:// sampler_weights path of yours "
        "(GET /v1/models lists the models)",
        "model",
        "model_not_found",
    )


def openai_body(error: ApiError) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``: OpenAI's error body."""
    kind = _OPENAI_TYPES.get(error.status, "invalid_request_error" if error.status < 500 else "server_error")
    return {"error": {"message": error.message, "type": kind, "param": error.param, "code": error.code}}


def anthropic_body(error: ApiError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``: Anthropic's error body."""
    kind = _ANTHROPIC_TYPES.get(error.status, "invalid_request_error" if error.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}
