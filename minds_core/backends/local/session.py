"""``Session``: what one local ``ServiceClient`` made, as the SDK's ``RestClient`` reports a session."""

from __future__ import annotations

import itertools
import threading
import uuid
import weakref
from collections.abc import Mapping
from typing import Protocol

from tinker import types

from .model.errors import LocalNotFoundError

__all__ = ["Session", "SessionRun", "SessionSampler"]


class SessionRun(Protocol):
    """What a session lists of a training run (a ``TrainingClient``)."""

    #: the run's id, listed in ``training_run_ids``
    model_id: str


class SessionSampler(Protocol):
    """What a session reports of a sampling client (a ``SamplingClient``)."""

    #: the ``tinker://`` path of the weights it samples (None: a base model, or in-memory weights)
    model_path: str | None

    def get_base_model(self) -> str:
        """The name of the base model it samples."""
        ...


class Session:
    """One service's session: its id, what it was created with, and its live training runs and samplers.

    ``get_session`` lists a run or a sampling client while the program holds it (dropped, it is gone,
    as ``minds serve`` forgets a session's runs and samplers when the session finishes); closing the
    service empties both lists. Sampler ids read ``<session id>:sample:<n>``, as the SDK's do.
    """

    def __init__(self, user_metadata: Mapping[str, str] | None, display_name: str | None) -> None:
        #: names the service as the SDK's session id does: a custom loss's ``LossHandle`` works with its clients only
        self.id = f"local-session-{uuid.uuid4().hex[:16]}"
        self._created = types.GetSessionResponse(
            training_run_ids=[],
            sampler_ids=[],
            user_metadata=dict(user_metadata) if user_metadata else None,
            display_name=display_name,
        )
        self._runs: weakref.WeakValueDictionary[str, SessionRun] = weakref.WeakValueDictionary()
        self._samplers: weakref.WeakValueDictionary[str, SessionSampler] = weakref.WeakValueDictionary()
        self._sampler_numbers = itertools.count()
        self._lock = threading.Lock()

    def add_run(self, client: SessionRun) -> None:
        with self._lock:
            self._runs[client.model_id] = client

    def add_sampler(self, client: SessionSampler) -> None:
        with self._lock:
            self._samplers[f"{self.id}:sample:{next(self._sampler_numbers)}"] = client

    def describe(self, session_id: str) -> types.GetSessionResponse:
        """``get_session``: the runs and sampling clients alive now, and the service's metadata and name."""
        self._check(session_id)
        with self._lock:
            live = {"training_run_ids": list(self._runs), "sampler_ids": list(self._samplers)}
        return self._created.model_copy(update=live)

    def sampler(self, sampler_id: str) -> types.GetSamplerResponse:
        """``get_sampler``: the base model of a live sampling client, and the ``tinker://`` path it samples (None
        for a base model or ``save_weights_and_get_sampling_client``'s in-memory weights)."""
        with self._lock:
            client = self._samplers.get(sampler_id)
        if client is None:
            raise LocalNotFoundError(f"Unknown sampling session {sampler_id!r}")
        return types.GetSamplerResponse(sampler_id=sampler_id, base_model=client.get_base_model(), model_path=client.model_path)

    def close(self) -> None:
        with self._lock:
            self._runs.clear()
            self._samplers.clear()

    def _check(self, session_id: str) -> None:
        if session_id != self.id:
            raise LocalNotFoundError(f"Unknown session {session_id!r}")
