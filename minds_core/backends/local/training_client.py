"""``TrainingClient``: the SDK's training API over a local ``TrainingEngine``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from tinker import types
from tinker.lib.public_interfaces.api_future import APIFuture
from tinker.lib.public_interfaces.backcompat_sampling_client_future import (
    BackcompatSamplingClientFuture,
)
from tinker.lib.public_interfaces.custom_loss import LossHandle, check_loss_inputs, run_loss_handle
from tinker.types.optimizer import OptimParamsBase
from transformers import PreTrainedTokenizerBase

from .deprecated import async_twin
from .futures import failed_future
from .model.errors import LocalBadRequestError, LocalRequestFailedError
from .runtime import Runtime
from .sampling.engine import SamplingEngine
from .sampling_client import SamplingClient
from .training.age import parse_recipients
from .training.checkpoints import CheckpointContents, CheckpointKind
from .training.datums import DatumTensors, submitted_datum
from .training.engine import CustomLossFn, TrainingEngine

__all__ = ["TrainingClient"]

T = TypeVar("T")

#: What the SDK's TrainingClient raises for every request after a failed custom-loss request.
POISONED = "A previous request failed; this TrainingClient is poisoned and cannot accept further requests."


class TrainingClient:
    """One LoRA training run. Requests execute strictly in submission order on its worker thread.

    Every request method returns an ``APIFuture`` at once (``await`` it or call
    ``.result()``), so ``forward_backward`` and ``optim_step`` can be submitted
    back to back. Gradients accumulate over ``forward_backward`` calls until
    ``optim_step``. A failed request fails only its own future, except a failed
    ``forward_backward_custom``: as the SDK's client does, this client then fails
    every later training request (queued or new) with ``RuntimeError`` (``POISONED``,
    chained to the custom request's error).
    """

    def __init__(self, runtime: Runtime, run_id: str) -> None:
        self._runtime = runtime
        self._queue = runtime.queue(f"minds-train-{run_id}")
        self.model_id = run_id
        self._trainer: TrainingEngine
        self._failure: BaseException | None = None  # the failed custom-loss request's error

    def _start(
        self, build: Callable[[], TrainingEngine], user_metadata: Mapping[str, str] | None = None
    ) -> APIFuture[TrainingClient]:
        """Build the trainer on the worker; the future of this client, ready to use.

        The run's ``user_metadata`` is recorded for ``RestClient.get_training_run``.
        """

        def run() -> TrainingClient:
            self._trainer = build()
            self._runtime.session.add_run(self)
            if user_metadata:
                self._runtime.store.save_run_metadata(self.model_id, user_metadata)
            return self

        return self._queue.submit(run)

    def forward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Loss and target log-probs without gradients."""
        return self._loss_request(data, loss_fn, loss_fn_config, backward=False)

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Loss and target log-probs, adding the loss's gradients to the accumulated ones."""
        return self._loss_request(data, loss_fn, loss_fn_config, backward=True)

    def _loss_request(
        self, data: list[types.Datum], loss_fn: types.LossFnType, loss_fn_config: Mapping[str, float | str] | None, backward: bool
    ) -> APIFuture[types.ForwardBackwardOutput]:
        config = dict(loss_fn_config or {})
        return self._submit(
            data, lambda items: self._trainer.forward_backward(items, loss_fn, config, backward=backward)
        )

    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: CustomLossFn | LossHandle, *, loss_type_input: Literal["logprobs"] | None = None
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """``loss_fn(data, logprobs_list) -> (loss, metrics)`` on differentiable target log-probs.

        Locally, autograd runs straight through ``loss_fn`` (no surrogate pass);
        ``metrics`` gets ``loss:sum`` added. ``loss_type_input`` may only be
        "logprobs" (the SDK's default input). ``loss_fn`` gets the caller's datums
        (it runs on the client in the SDK too); the log-probs are of the datums as submitted.
        A ``LossHandle`` of this service's ``create_custom_loss`` runs per datum, as the SDK runs one.
        """
        if isinstance(loss_fn, LossHandle):
            loss_fn = self._handle_loss(loss_fn, data)
        if not callable(loss_fn):
            raise TypeError("The local backend's forward_backward_custom takes a callable loss function or a LossHandle")
        if loss_type_input not in (None, "logprobs"):
            raise LocalBadRequestError(f"loss_type_input={loss_type_input!r}: the local backend supports only 'logprobs'")
        caller_data = list(data)
        return self._submit(
            data, lambda items: self._trainer.forward_backward_custom(caller_data, items, loss_fn), poisons=True
        )

    def _handle_loss(self, handle: LossHandle, data: list[types.Datum]) -> CustomLossFn:
        """The SDK's checks of a ``LossHandle`` and its datums (raised at the call), and the handle as a loss function."""
        if handle.session_id != self._runtime.session.id:
            raise ValueError(
                f"LossHandle {handle.name!r} was created in session {handle.session_id}; it can "
                "only be used by clients of that session"
            )
        check_loss_inputs(handle, data)
        return lambda data, logprobs: run_loss_handle(handle, data, logprobs)

    def _submit(
        self, data: Sequence[types.Datum], run: Callable[[list[DatumTensors]], T], *, poisons: bool = False
    ) -> APIFuture[T]:
        """Queue ``run`` on ``data`` as it is now (the SDK serializes datums at submission).

        Later changes to the caller's buffers do not reach the request. A datum that cannot
        be converted fails this request's future only, as a datum rejected when it runs does
        (a custom-loss request that ``poisons`` fails in its turn, poisoning the client).
        """
        if not data:
            raise ValueError("No data provided")
        try:
            items = [submitted_datum(datum, i) for i, datum in enumerate(data)]
        except LocalBadRequestError as exc:
            if not poisons:
                return failed_future(exc)
            return self._in_turn(_raiser(exc), poisons=True)
        return self._in_turn(lambda: run(items), poisons=poisons)

    def _in_turn(self, run: Callable[[], T], *, poisons: bool = False) -> APIFuture[T]:
        """Queue a training request: refused once a custom-loss request has failed; one that ``poisons`` sets that."""

        def turn() -> T:
            if self._failure is not None:
                raise RuntimeError(POISONED) from self._failure
            try:
                return run()
            except LocalBadRequestError as exc:
                failed = exc if isinstance(exc, LocalRequestFailedError) else LocalRequestFailedError(exc.message)
                if poisons:
                    self._failure = failed
                raise failed from None
            except BaseException as exc:
                if poisons:
                    self._failure = exc
                raise

        return self._queue.submit(turn)

    def optim_step(
        self,
        optim_params: types.AdamParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> APIFuture[types.OptimStepResponse]:
        """One AdamW step on the accumulated gradients, which it then clears.

        As in the SDK, an argument that is no optimizer parameters at all raises ``TypeError`` at
        once; optimizer parameters other than ``AdamParams`` fail the request (AdamW only locally).
        """
        if optim_params is not None and adam_params is not None:
            raise ValueError("Specify optim_params or legacy adam_params, not both")
        params = optim_params if optim_params is not None else adam_params
        if not isinstance(params, (types.AdamParams, OptimParamsBase)):
            raise TypeError("Expected AdamParams or OptimParamsBase")
        return self._in_turn(lambda: self._trainer.optim_step(params))

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsResponse]:
        """Save adapter and optimizer state: ``tinker://<model_id>/weights/<name>``, expiring after ``ttl_seconds``."""
        return self._in_turn(
            lambda: types.SaveWeightsResponse(path=self._save("weights", name, overwrite, user_metadata, ttl_seconds))
        )

    def save_weights_for_sampler(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsForSamplerResponse]:
        """Save the adapter for sampling: ``tinker://<model_id>/sampler_weights/<name>`` (replaces a namesake).

        With ``ttl_seconds`` the checkpoint expires that long from now.
        """
        return self._in_turn(
            lambda: types.SaveWeightsForSamplerResponse(
                path=self._save("sampler_weights", name, True, user_metadata, ttl_seconds)
            )
        )

    def save_weights_external(
        self,
        name: str,
        ttl_seconds: int | None = None,
        age_encryption_recipients: list[str] | None = None,
    ) -> APIFuture[types.SaveWeightsExternalResponse]:
        """Save the adapter for use outside minds: ``tinker://<model_id>/external_weights/<name>``.

        A standard peft adapter folder (``adapter_config.json`` naming the base model,
        ``adapter_model.safetensors``), listed and deleted like any checkpoint and fetched
        with ``RestClient.get_external_weights_urls`` (what ``tinker checkpoint download``
        does). A namesake is replaced. With ``age_encryption_recipients`` (age ``age1...`` or SSH
        public keys) each file is written encrypted to all of them, as ``<name>.age`` (``age``).
        """
        try:
            keys = parse_recipients(age_encryption_recipients or [])
        except LocalBadRequestError as exc:
            return failed_future(exc)
        return self._in_turn(
            lambda: types.SaveWeightsExternalResponse(
                path=self._save("external_weights", name, True, None, ttl_seconds, keys)
            )
        )

    def load_state(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        """Load the adapter weights saved at ``path`` into this run; the optimizer state starts afresh.

        Also drops gradients accumulated so far. The checkpoint must be of this run's
        base model and LoRA settings; ``weights_access_token`` is ignored. (The hosted
        SDK deprecates this in favour of ``ServiceClient.create_training_client_from_state``.)
        """
        return self._in_turn(lambda: self._load(path, with_optimizer=False))

    def load_state_with_optimizer(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        """Load the adapter weights and AdamW state saved by ``save_state`` at ``path`` into this run.

        As ``load_state``, but resuming the optimizer's moments too (the hosted SDK's
        replacement is ``ServiceClient.create_training_client_from_state_with_optimizer``).
        """
        return self._in_turn(lambda: self._load(path, with_optimizer=True))

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> BackcompatSamplingClientFuture:
        """A sampling client of the weights as of this point in the request order (in memory, no file).

        Every kind is a snapshot locally; the other arguments exist for SDK compatibility. As in
        the SDK, the future also acts (deprecated) as the client.
        """

        def run() -> SamplingClient:
            trainer = self._trainer
            sampler = SamplingEngine.for_adapter(trainer.base, trainer.spec, trainer.adapter_state())
            return self._runtime.sampling_client(sampler, self._runtime.queue(f"minds-sample-{self.model_id}"))

        return BackcompatSamplingClientFuture(self._in_turn(run))

    def create_sampling_client(
        self,
        model_path: str,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> BackcompatSamplingClientFuture:
        """A sampling client of the weights saved at tinker ``model_path`` (the future also acts as the client)."""
        queue = self._runtime.queue(f"minds-sample-{self.model_id}")

        def make() -> SamplingClient:
            return self._runtime.sampling_client_from_path(model_path, queue)

        return BackcompatSamplingClientFuture(queue.submit(make))

    def get_info(self) -> types.GetInfoResponse:
        """Base model, LoRA rank and optimizer of this run (no request)."""
        base = self._trainer.base
        return types.GetInfoResponse(
            model_data=types.ModelData(arch=base.arch, model_name=base.name, tokenizer_id=base.name),
            model_id=self.model_id,
            is_lora=True,
            lora_rank=self._trainer.spec.rank,
            model_name=base.name,
        )

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        """The base model's tokenizer."""
        return self._trainer.base.tokenizer

    forward_async = async_twin("forward", awaits=False)
    forward_backward_async = async_twin("forward_backward", awaits=False)
    forward_backward_custom_async = async_twin("forward_backward_custom", awaits=False)
    optim_step_async = async_twin("optim_step", awaits=False)
    save_state_async = async_twin("save_state", awaits=False)
    load_state_async = async_twin("load_state", awaits=False)
    load_state_with_optimizer_async = async_twin("load_state_with_optimizer", awaits=False)
    save_weights_for_sampler_async = async_twin("save_weights_for_sampler", awaits=False)
    save_weights_external_async = async_twin("save_weights_external", awaits=False)
    get_info_async = async_twin("get_info", awaits=True)
    create_sampling_client_async = async_twin("create_sampling_client", awaits=True)
    save_weights_and_get_sampling_client_async = async_twin("save_weights_and_get_sampling_client", awaits=True)

    def __repr__(self) -> str:
        return f"<local TrainingClient {self.model_id}>"

    def _load(self, path: str, *, with_optimizer: bool) -> types.LoadWeightsResponse:
        trainer = self._trainer
        checkpoint = self._runtime.store.load(path, with_optimizer=with_optimizer)
        saved = {"base_model": checkpoint.base_model, **checkpoint.lora.to_json()}
        ours = {"base_model": trainer.base.name, **trainer.spec.to_json()}
        differences = [f"{key}={saved[key]!r} (this run: {ours[key]!r})" for key in ours if saved[key] != ours[key]]
        if differences:
            raise LocalBadRequestError(
                f"Cannot load {path} into run {self.model_id}: the checkpoint has {', '.join(differences)}; "
                "load a checkpoint of the same base model and LoRA settings, or start a new run from it "
                "with ServiceClient.create_training_client_from_state"
            )
        trainer.load_state(checkpoint.adapter, checkpoint.optimizer)
        return types.LoadWeightsResponse(path=path, model_id=self.model_id, type="load_weights")

    def _save(
        self,
        kind: CheckpointKind,
        name: str,
        overwrite: bool,
        user_metadata: dict[str, str] | None,
        ttl_seconds: int | None,
        age_keys: Sequence[Any] = (),
    ) -> str:
        trainer = self._trainer
        checkpoint = CheckpointContents(
            base_model=trainer.base.name,
            lora=trainer.spec,
            adapter=trainer.adapter_state(),
            optimizer=trainer.optimizer_state() if kind == "weights" else None,
        )
        adapter_config = trainer.model.peft_config["default"]
        if kind == "external_weights":  # named by the base model's name, not this machine's folder of it
            adapter_config = copy.copy(adapter_config)
            adapter_config.base_model_name_or_path = trainer.base.name
        return self._runtime.store.save(
            self.model_id,
            kind,
            name,
            checkpoint,
            adapter_config,
            overwrite=overwrite,
            user_metadata=user_metadata,
            ttl_seconds=ttl_seconds,
            age_keys=age_keys,
        )


def _raiser(error: BaseException) -> Callable[[], Any]:
    """A request that fails with ``error`` when its turn comes."""

    def fail() -> Any:
        raise error

    return fail
