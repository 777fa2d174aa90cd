"""``ServiceClient``: an in-process stand-in for Tinker's service, on torch and peft."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import torch
from tinker import types
from tinker.lib.public_interfaces.api_future import APIFuture
from tinker.lib.public_interfaces.backcompat_sampling_client_future import (
    BackcompatSamplingClientFuture,
)
from tinker.lib.public_interfaces.backcompat_training_client_future import (
    BackcompatTrainingClientFuture,
)
from tinker.lib.public_interfaces.custom_loss import LossHandle, PerDatumLossFn, trace_loss

from .deprecated import async_twin
from .futures import completed_future
from .model.builtin_models import BUILTIN_MODELS
from .model.errors import LocalBadRequestError
from .model.lora import LoraSpec
from .model.memory_plan import RunShape
from .model.placement import resolve_placement
from .refusals import refused
from .rest import RestClient
from .runtime import Runtime
from .sampling.engine import SamplingEngine
from .session import Session
from .training.engine import TrainingEngine
from .training_client import TrainingClient

__all__ = ["ServiceClient", "create_service_client"]


class ServiceClient:
    """Creates training and sampling clients that run in this process.

    Mirrors ``tinker.ServiceClient``: the ``create_*`` methods return a future of
    the client (``await`` it or call ``.result()``) that, as the SDK's does during
    its deprecation window, also acts as the client with a ``FutureWarning``.
    The service is one session: its ``user_metadata`` and ``display_name`` come
    back from the RestClient's ``get_session``. The constructor's other
    arguments with no local meaning (``project_id``, ``base_url``,
    ``api_key``, ``default_headers_overrides``; ``weights_access_token``,
    ``retry_config``, ... on the methods) are accepted and ignored, and unknown
    keyword arguments are ignored with the SDK's ``FutureWarning``.

    minds' own keywords: checkpoints go under ``checkpoint_root`` (a fresh
    temporary directory, removed on ``close()``, when None); another
    ``ServiceClient`` on the same root, in any process, resolves their
    ``tinker://`` paths. ``device`` is ``auto`` (CUDA when torch sees a GPU),
    ``cpu`` or ``cuda``; ``cuda_graphs`` and ``compile`` (``auto`` or ``off``) switch the
    GPU's captured decode steps and compiled kernels off; see ``placement``.
    ``run_shape`` (a ``memory_plan.RunShape``): the run this service is for, whose
    memory plan each base model gets as it loads (refused where it cannot fit),
    and whose samplers capture their steps before their first request. Base
    models are loaded once per service and shared, frozen, by all its clients.
    """

    def __init__(
        self,
        user_metadata: dict[str, str] | None = None,
        project_id: str | None = None,
        *,
        display_name: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        default_headers_overrides: Mapping[str, str] | None = None,
        checkpoint_root: str | os.PathLike[str] | None = None,
        device: str = "auto",
        cuda_graphs: str = "auto",
        compile: str = "auto",
        run_shape: RunShape | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            warnings.warn(
                f"ServiceClient ignores unsupported arguments: {', '.join(sorted(kwargs))}. "
                "Passing them will be an error in a future version of the Tinker SDK.",
                FutureWarning,
                stacklevel=2,
            )
        placement = resolve_placement(device, cuda_graphs, compile)
        _limit_torch_threads()
        self._temporary_root = not checkpoint_root
        self.checkpoint_root = Path(checkpoint_root or tempfile.mkdtemp(prefix="minds-local-"))
        self._runtime = Runtime(self.checkpoint_root, placement, Session(user_metadata, display_name), run_shape)
        self._closed = False
        self._lock = threading.Lock()

    @property
    def device(self) -> torch.device:
        """Where this service computes (``device`` resolved: ``auto`` is ``cpu`` or ``cuda``). minds' own."""
        return self._runtime.models.placement.device

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> BackcompatTrainingClientFuture:
        """A new LoRA run on ``base_model`` (``minds-small``, ``minds-tiny``, a model directory or a hub id)."""
        self._check_open()
        spec = LoraSpec(rank=rank, train_mlp=train_mlp, train_attn=train_attn, train_unembed=train_unembed)
        lora_seed = seed if seed is not None else secrets.randbits(63)

        def build() -> TrainingEngine:
            _check_optimizer(optimizer)
            return TrainingEngine(self._runtime.models.get(base_model), spec, lora_seed)

        return BackcompatTrainingClientFuture(TrainingClient(self._runtime, _new_run_id())._start(build, user_metadata))

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> BackcompatTrainingClientFuture:
        """A new run starting from the adapter weights at ``path`` (fresh optimizer state)."""
        return self.create_training_client_from_checkpoint(
            path, base_model, user_metadata, with_optimizer=False, optimizer=optimizer
        )

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> BackcompatTrainingClientFuture:
        """A new run resuming exactly from ``path``: adapter weights and AdamW state."""
        return self.create_training_client_from_checkpoint(path, base_model, user_metadata, with_optimizer=True)

    def create_training_client_from_checkpoint(
        self,
        path: str,
        base_model: str | None,
        user_metadata: dict[str, str] | None,
        *,
        with_optimizer: bool,
        optimizer: types.OptimizerConfig | None = None,
        run_id: str | None = None,
    ) -> BackcompatTrainingClientFuture:
        """A new run from the checkpoint at ``path``: its adapter weights, and its AdamW state ``with_optimizer``.

        minds' own (the SDK's two ``create_training_client_from_state*`` methods are this one): ``run_id`` names
        the run (default: a new ``local-...`` id); ``minds serve`` passes the id the SDK derives for the run.
        """
        self._check_open()

        def build() -> TrainingEngine:
            _check_optimizer(optimizer)
            checkpoint = self._runtime.store.load(path, with_optimizer=with_optimizer)
            base = self._runtime.models.get(base_model or checkpoint.base_model)
            trainer = TrainingEngine(base, checkpoint.lora, seed=0)
            trainer.load_state(checkpoint.adapter, checkpoint.optimizer)
            return trainer

        return BackcompatTrainingClientFuture(
            TrainingClient(self._runtime, run_id or _new_run_id())._start(build, user_metadata)
        )

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> BackcompatSamplingClientFuture:
        """A sampling client of the weights at ``model_path``, else of the bare ``base_model``."""
        self._check_open()
        if model_path is None and base_model is None:
            raise ValueError("Either model_path or base_model must be provided")
        queue = self._runtime.queue("minds-sample")
        if model_path is not None:
            return BackcompatSamplingClientFuture(
                queue.submit(lambda: self._runtime.sampling_client_from_path(model_path, queue))
            )
        return BackcompatSamplingClientFuture(
            queue.submit(
                lambda: self._runtime.sampling_client(SamplingEngine.for_base(self._runtime.models.get(base_model)), queue)
            )
        )

    def create_custom_loss(
        self, fn: PerDatumLossFn, input_ranks: Mapping[str, types.CustomLossInputRank]
    ) -> APIFuture[LossHandle]:
        """``fn`` traced into the SDK's ``LossHandle`` (with the SDK's checks), for ``forward_backward_custom``.

        It runs in this process, as the SDK runs a loss the service does not take (``loss_id`` None),
        and only with this service's training clients.
        """
        self._check_open()
        return completed_future(trace_loss(fn, input_ranks, self._runtime.session.id))

    def copy_weights(
        self, path: str, *, ttl_seconds: int | None = None, weights_access_token: str | None = None
    ) -> APIFuture[str]:
        """Refused (400, ``refusals``), as the RestClient's: there are no projects."""
        return refused("copy_weights")

    def create_rest_client(self) -> RestClient:
        """The SDK's ``RestClient`` calls over this service's checkpoint root (listing, info, delete, file URLs)
        and its session (``get_session``, ``list_sessions``, ``get_sampler``).

        The SDK deprecates its own ``create_rest_client`` for ``tinker.RestClient()``, which
        talks HTTP; locally this method is the way to one, so it does not warn.
        """
        self._check_open()
        return RestClient(
            self._runtime.store,
            self._runtime.session,
            lambda: {**dict.fromkeys(BUILTIN_MODELS), **self._runtime.models.context_lengths()},
        )

    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        """Deprecated, as in the SDK (``FutureWarning``): ``create_rest_client().get_server_capabilities().result()``."""
        _warn_capabilities("get_server_capabilities()")
        return self.create_rest_client().get_server_capabilities().result()

    async def get_server_capabilities_async(self) -> types.GetServerCapabilitiesResponse:
        """Deprecated, as in the SDK (``FutureWarning``): ``await create_rest_client().get_server_capabilities()``."""
        _warn_capabilities("get_server_capabilities_async()")
        return await self.create_rest_client().get_server_capabilities()

    def close(
        self,
        status: Literal["success", "errored", "interrupted"],
        detail: str | None = None,
    ) -> APIFuture[None]:
        """Stop every client's worker (queued requests still run); remove a temporary root.

        As the SDK's, ``status`` (how the work ended) is required: code written against this
        client runs unchanged on the hosted service.
        """
        if status not in _CLOSE_STATUSES:
            raise ValueError(f"close() takes a status of {', '.join(map(repr, _CLOSE_STATUSES))}; got {status!r}")
        with self._lock:
            if not self._closed:
                self._closed = True
                self._runtime.close()
                if self._temporary_root:
                    shutil.rmtree(self.checkpoint_root, ignore_errors=True)
        return completed_future(None)

    create_lora_training_client_async = async_twin("create_lora_training_client", awaits=True)
    create_training_client_from_state_async = async_twin("create_training_client_from_state", awaits=True)
    create_training_client_from_state_with_optimizer_async = async_twin(
        "create_training_client_from_state_with_optimizer", awaits=True
    )
    create_sampling_client_async = async_twin("create_sampling_client", awaits=True)

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        status = "success" if exc_type is None else "errored" if issubclass(exc_type, Exception) else "interrupted"
        self.close(status).result()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("ServiceClient is closed")


_CLOSE_STATUSES = ("success", "errored", "interrupted")


def _warn_capabilities(method: str) -> None:
    warnings.warn(
        f"DEPRECATED: ServiceClient.{method} is deprecated and will be removed in a future tinker SDK version. "
        "Use the RestClient's get_server_capabilities() instead; it returns an APIFuture.",
        FutureWarning,
        stacklevel=3,
    )


def create_service_client(
    checkpoint_root: str | os.PathLike[str] | None,
    device: str = "auto",
    cuda_graphs: str = "auto",
    compile: str = "auto",
    run_shape: RunShape | None = None,
) -> ServiceClient:
    """A local ``ServiceClient`` keeping checkpoints under ``checkpoint_root``, computing on ``device`` (with
    ``cuda_graphs``, ``compile`` and ``run_shape``: the ``ServiceClient``'s)."""
    return ServiceClient(
        checkpoint_root=checkpoint_root, device=device, cuda_graphs=cuda_graphs, compile=compile, run_shape=run_shape
    )


def _check_optimizer(optimizer: types.OptimizerConfig | None) -> None:
    if optimizer is not None and optimizer.type != "adamw":
        raise LocalBadRequestError(f"The local backend trains with AdamW only, not {optimizer.type!r}")


def _new_run_id() -> str:
    return f"local-{uuid.uuid4().hex[:16]}"


def _limit_torch_threads() -> None:
    """Half the CPUs this process may use per torch op (1 on 2 cores), unless OMP_NUM_THREADS is set.

    Training and sampling workers run side by side; one intra-op thread each keeps
    them from oversubscribing a small machine, where OpenMP threads that spin on
    busy cores slow small ops down several times.
    """
    if "OMP_NUM_THREADS" in os.environ:
        return
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, available // 2))
