"""``RestClient``: the SDK's ``tinker.RestClient`` calls, over local checkpoints and the service's session.

Made by ``ServiceClient.create_rest_client()``. Each method takes the SDK's
parameters and returns an ``APIFuture`` of the SDK's own type, resolved at once
(the answer is read from disk or the session); a failure (unknown run, checkpoint,
session or sampler: 404, as ``tinker.NotFoundError``) is raised by ``.result()``,
as over HTTP. Listings are shared with ``minds serve`` (``catalog``); a call with
no local meaning (publishing, projects, traces, identity) fails as it does there
(``refusals``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Literal, TypeVar

from tinker import types
from tinker.lib.public_interfaces.api_future import APIFuture

from .catalog import Catalog, capabilities
from .deprecated import async_twin
from .futures import completed_future, failed_future
from .model.builtin_models import BUILTIN_MODELS
from .model.errors import LocalBadRequestError, LocalNotFoundError
from .refusals import refusal, refused
from .session import Session
from .training.checkpoints import CheckpointStore, parse_path

__all__ = ["RestClient"]

T = TypeVar("T")

#: When the ``file://`` URLs of a checkpoint that never expires stop working: never.
_NEVER = datetime.max.replace(tzinfo=UTC)


class RestClient:
    """Checkpoints and training runs under one local checkpoint root, and one service's session, through the
    SDK's ``RestClient`` API."""

    def __init__(
        self,
        store: CheckpointStore,
        session: Session,
        context_lengths: Callable[[], Mapping[str, int | None]] = lambda: dict.fromkeys(BUILTIN_MODELS),
    ) -> None:
        self._catalog = Catalog(store)
        self._session = session
        self._context_lengths = context_lengths

    def get_server_capabilities(self) -> APIFuture[types.GetServerCapabilitiesResponse]:
        """The models to train and sample: the built-in ones (``minds-small``, ``minds-tiny``) and every other base model the service has loaded.

        Any model directory or hub id loads on first use, so the list is of those known, not a limit; a
        model's ``max_context_length`` is known once it is loaded."""
        return _answer(lambda: capabilities(self._context_lengths()))

    def list_checkpoints(self, training_run_id: types.ModelID) -> APIFuture[types.CheckpointsListResponse]:
        """The run's checkpoints (training and sampler), newest first."""
        return _answer(lambda: types.CheckpointsListResponse(checkpoints=self._catalog.checkpoints(training_run_id)))

    def list_user_checkpoints(self, limit: int = 100, offset: int = 0) -> APIFuture[types.CheckpointsListResponse]:
        """One page of every run's checkpoints, newest first, with its cursor."""
        return _answer(lambda: self._catalog.user_checkpoints(limit, offset))

    def get_training_run(
        self, training_run_id: types.ModelID, access_scope: Literal["owned", "accessible"] = "owned"
    ) -> APIFuture[types.TrainingRun]:
        """The run (base model, LoRA rank, newest checkpoints); 404 for a run with no checkpoint."""
        return _answer(lambda: self._catalog.training_run(training_run_id))

    def get_training_run_by_tinker_path(
        self, tinker_path: str, access_scope: Literal["owned", "accessible"] = "owned"
    ) -> APIFuture[types.TrainingRun]:
        """The run that saved the checkpoint at ``tinker_path``."""
        return _answer(lambda: self._catalog.training_run(parse_path(tinker_path)[0]))

    def list_training_runs(
        self,
        limit: int = 20,
        offset: int = 0,
        access_scope: Literal["owned", "accessible"] = "owned",
        project_id: str | None = None,
    ) -> APIFuture[types.TrainingRunsResponse]:
        """One page of the runs that saved checkpoints, most recent first (``project_id`` has no local meaning)."""
        return _answer(lambda: self._catalog.training_runs(limit, offset))

    def get_weights_info_by_tinker_path(self, tinker_path: str) -> APIFuture[types.WeightsInfoResponse]:
        """Base model and LoRA settings of the checkpoint at ``tinker_path``."""
        return _answer(lambda: self._catalog.weights_info(tinker_path))

    def get_external_weights_urls(self, tinker_path: str) -> APIFuture[types.ExternalWeightsUrlsResponse]:
        """``file://`` URLs of an external-weights checkpoint's files, which the SDK's download helpers (``urllib``) fetch.

        As in the SDK, only ``tinker://<run>/external_weights/<name>`` paths (``save_weights_external``)
        are accepted (``ValueError`` otherwise). The URLs expire with the checkpoint.
        """
        if parse_path(tinker_path)[1] != "external_weights":
            raise ValueError(
                "get_external_weights_urls only accepts external weights checkpoints "
                f"(tinker://<training_run_id>/external_weights/<name>), got {tinker_path!r}"
            )

        def urls() -> types.ExternalWeightsUrlsResponse:
            files = self._catalog.files(tinker_path)
            expires_at = self._catalog.checkpoint(tinker_path).expires_at
            return types.ExternalWeightsUrlsResponse(
                urls={name: path.resolve().as_uri() for name, path in files.items()}, expires=expires_at or _NEVER
            )

        return _answer(urls)

    def delete_checkpoint(self, training_run_id: types.ModelID, checkpoint_id: str) -> APIFuture[None]:
        """Remove a run's checkpoint (``checkpoint_id`` as listed, e.g. ``weights/step-10``)."""
        return _answer(lambda: self._catalog.delete(training_run_id, checkpoint_id))

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> APIFuture[None]:
        """Remove the checkpoint at ``tinker_path``."""
        return _answer(lambda: self._catalog.store.delete(tinker_path))

    def set_checkpoint_ttl_from_tinker_path(self, tinker_path: str, ttl_seconds: int | None) -> APIFuture[None]:
        """Make the checkpoint expire ``ttl_seconds`` (1 hour to 10 years) from now, or never with None."""
        return _answer(lambda: self._catalog.store.set_ttl(tinker_path, ttl_seconds))

    def get_session(
        self, session_id: str, access_scope: Literal["owned", "accessible"] = "owned"
    ) -> APIFuture[types.GetSessionResponse]:
        """The service's session (its id: ``list_sessions``): the training runs and sampling clients alive,
        and the ``user_metadata`` and ``display_name`` the ``ServiceClient`` was made with."""
        return _answer(lambda: self._session.describe(session_id))

    def list_sessions(
        self, limit: int = 20, offset: int = 0, access_scope: Literal["owned", "accessible"] = "owned"
    ) -> APIFuture[types.ListSessionsResponse]:
        """One page of the sessions: a local service is one session."""
        return _answer(lambda: types.ListSessionsResponse(sessions=[self._session.id][offset : offset + limit]))

    def get_sampler(self, sampler_id: str) -> APIFuture[types.GetSamplerResponse]:
        """A live sampling client's base model and the ``tinker://`` path it samples (ids: ``get_session``)."""
        return _answer(lambda: self._session.sampler(sampler_id))

    def publish_checkpoint_from_tinker_path(self, tinker_path: str) -> APIFuture[None]:
        """Refused (400, ``refusals``): checkpoints are not published."""
        return refused("publish_checkpoint_from_tinker_path")

    def unpublish_checkpoint_from_tinker_path(self, tinker_path: str) -> APIFuture[None]:
        """Refused (400, ``refusals``): checkpoints are not published."""
        return refused("unpublish_checkpoint_from_tinker_path")

    def copy_weights(
        self,
        path: str,
        destination_project_id: str | None = None,
        *,
        ttl_seconds: int | None = None,
        weights_access_token: str | None = None,
    ) -> APIFuture[str]:
        """Refused (400, ``refusals``): there are no projects."""
        return refused("copy_weights")

    def assign_session_project(self, session_id: str, project_id: str) -> APIFuture[None]:
        """Refused (400, ``refusals``): there are no projects."""
        return refused("assign_session_project")

    def export_session_trace(self, session_id: str) -> APIFuture[str]:
        """Refused (400, ``refusals``): no trace is kept."""
        return refused("export_session_trace")

    def whoami(self) -> APIFuture[types.WhoamiResponse]:
        """Fails with ``RuntimeError``, as the SDK's does on a server without accounts (``minds serve``)."""
        return failed_future(RuntimeError(refusal("whoami")))

    get_session_async = async_twin("get_session", awaits=True)
    list_sessions_async = async_twin("list_sessions", awaits=True)
    get_sampler_async = async_twin("get_sampler", awaits=True)
    publish_checkpoint_from_tinker_path_async = async_twin("publish_checkpoint_from_tinker_path", awaits=True)
    unpublish_checkpoint_from_tinker_path_async = async_twin("unpublish_checkpoint_from_tinker_path", awaits=True)
    copy_weights_async = async_twin("copy_weights", awaits=True)
    assign_session_project_async = async_twin("assign_session_project", awaits=True)
    export_session_trace_async = async_twin("export_session_trace", awaits=True)
    get_training_run_async = async_twin("get_training_run", awaits=True)
    get_training_run_by_tinker_path_async = async_twin("get_training_run_by_tinker_path", awaits=True)
    list_training_runs_async = async_twin("list_training_runs", awaits=True)
    list_checkpoints_async = async_twin("list_checkpoints", awaits=True)
    list_user_checkpoints_async = async_twin("list_user_checkpoints", awaits=True)
    get_external_weights_urls_async = async_twin("get_external_weights_urls", awaits=True)
    delete_checkpoint_async = async_twin("delete_checkpoint", awaits=True)
    delete_checkpoint_from_tinker_path_async = async_twin("delete_checkpoint_from_tinker_path", awaits=True)
    set_checkpoint_ttl_from_tinker_path_async = async_twin("set_checkpoint_ttl_from_tinker_path", awaits=True)

    def __repr__(self) -> str:
        return f"<local RestClient of {self._catalog.store.root}>"


def _answer(compute: Callable[[], T]) -> APIFuture[T]:
    """A resolved future of ``compute()``, or one failed with its 4xx error."""
    try:
        return completed_future(compute())
    except (LocalBadRequestError, LocalNotFoundError) as exc:
        return failed_future(exc)
