"""Errors of the local backend, as the real ``tinker`` exception types.

A request the local service rejects fails its own future with one of these;
the worker that ran it keeps serving. Each is a real ``tinker.APIStatusError``
subclass (built on a synthetic ``httpx.Response`` with the matching status), so
code that catches ``tinker.BadRequestError``, ``tinker.APIStatusError`` or
``tinker.TinkerError`` for the hosted service catches these too. They also
derive from the matching builtin (``ValueError``, ``LookupError``) for plain
Python callers. Any other exception (a bug, or one raised by a custom loss
function) propagates unchanged, as it would from the SDK's client-side code.
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx
import tinker

__all__ = ["LocalBadRequestError", "LocalConflictError", "LocalNotFoundError", "LocalRequestFailedError"]

_LOCAL_URL = "http://minds.local/"


class _LocalStatusError(tinker.APIStatusError):
    """A ``tinker.APIStatusError`` raised by the local service, without HTTP."""

    status: ClassVar[int]

    def __init__(self, message: str) -> None:
        body = {"detail": message}
        response = httpx.Response(
            self.status, json=body, request=httpx.Request("POST", _LOCAL_URL)
        )
        super().__init__(message, response, body)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (type(self), (self.message,))


class LocalBadRequestError(_LocalStatusError, tinker.BadRequestError, ValueError):
    """HTTP 400: a malformed datum, token, prompt, parameter or loss name."""

    status = 400


class LocalNotFoundError(_LocalStatusError, tinker.NotFoundError, LookupError):
    """HTTP 404: an unknown checkpoint path or base model."""

    status = 404


class LocalConflictError(_LocalStatusError, tinker.ConflictError):
    """HTTP 409: a checkpoint name that is already taken (pass ``overwrite=True``)."""

    status = 409


class _UserRequestFailed(tinker.RequestFailedError):
    """``RequestFailedError`` of category ``user``, its arguments given (the status error's constructor passes only
    the message along the chain of constructors)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "local", tinker.types.RequestErrorCategory.User)


class LocalRequestFailedError(LocalBadRequestError, _UserRequestFailed):
    """A request accepted and then refused when it ran (a datum its loss cannot use, as ``stable_reinforce``
    refuses one without provenance): the SDK's ``RequestFailedError`` of category ``user``, as the hosted
    service and ``minds serve`` answer it, and still the ``BadRequestError`` earlier local code caught."""

