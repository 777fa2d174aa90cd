"""What every inference route works with: the models it answers for, the limits, and capture.

``Surface.sample`` is the one door from a protocol module to a sampler: it resolves the model
the client named (``Models``), samples, and hands the ``SampledCall`` to ``on_call`` (a run's
capture; None under ``minds serve``). Routes answer JSON, or a ``Stream`` of server-sent events.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from minds_core.http.limits import ServeLimits

from .sampling import Policy, SampledCall, SamplingRequest, sample

__all__ = ["Event", "Models", "Stream", "Surface"]


class Models(Protocol):
    """The models a surface answers for."""

    def names(self) -> list[str]:
        """The model names ``GET /v1/models`` lists."""
        ...

    def policy(self, model: Any, caller: str) -> Policy:
        """The policy answering for ``model`` (as the client sent it) to ``caller`` (its API key's client);
        an ``ApiError`` (404) for a model it does not serve."""
        ...


@attrs.frozen
class Event:
    """One server-sent event: an optional ``event:`` name and its ``data`` (JSON, or a literal like ``[DONE]``)."""

    data: dict[str, Any] | str  #: the event's data: a JSON object, or a string sent as is
    name: str | None = None  #: the ``event:`` line (Anthropic names every event; OpenAI none)

    def encode(self) -> bytes:
        data = self.data if isinstance(self.data, str) else json.dumps(self.data)
        return (f"event: {self.name}\n" if self.name else "").encode() + f"data: {data}\n\n".encode()


@attrs.frozen
class Stream:
    """A streamed answer: its events in order (sampling is done before the first is sent)."""

    events: list[Event]


@attrs.define
class Surface:
    """The models, limits and capture hook one server's inference routes share."""

    models: Models
    limits: ServeLimits = attrs.field(factory=ServeLimits)
    #: called with (caller, call) after every successful sample: a run's capture records it
    on_call: Callable[[str, SampledCall], None] | None = None

    def sample(self, model: Any, caller: str, build: Callable[[Policy], SamplingRequest]) -> tuple[Policy, SampledCall]:
        """Sample for ``caller`` from ``model``'s policy the request ``build`` renders with it."""
        policy = self.models.policy(model, caller)
        call = sample(policy, build(policy), self.limits)
        if self.on_call is not None:
            self.on_call(caller, call)
        return policy, call
