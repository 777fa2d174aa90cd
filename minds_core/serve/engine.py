"""What ``minds serve`` keeps between requests: sessions, training runs, samplers and pending results.

Each handler takes the SDK's own request type (``tinker.types``) and either answers at
once or starts work on the local backend and returns an ``UntypedAPIFuture`` whose
result the SDK fetches from ``/api/v1/retrieve_future``. The local backend runs each
training run's requests strictly in the order it receives them, so requests of one
run are handed to it in the SDK's ``seq_id`` order (the SDK may send them out of
order, e.g. the first chunk of a large forward_backward last).
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import tinker
from tinker import types

from minds_core.backends.local import ServiceClient, TrainingClient
from minds_core.backends.local.losses import LOSSES

from .errors import BadRequest, HttpError, NotFound

__all__ = ["Engine"]

#: Seconds one /retrieve_future call waits for its result before answering "try_again".
LONG_POLL_SECONDS = 20.0
#: Results already delivered, kept (newest first) so that a retried retrieve still finds them.
DELIVERED_KEPT = 256
#: Seconds a finished result nobody retrieves is kept (its client has gone): memory stays bounded.
ABANDONED_AFTER = 600.0
#: Sampling sessions kept, the most recently used: an RL loop makes one per step and never says when
#: it is done with one, so older ones are dropped (their weights go back to the local backend's pool).
MAX_SAMPLERS = 8


class _Run:
    """One training run: its local client, and the requests waiting for their ``seq_id`` turn."""

    def __init__(self, client: TrainingClient, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self._next_seq = 1
        self._waiting: dict[int, tuple[Callable[[TrainingClient], Any], Future[Any]]] = {}
        self._lock = threading.Lock()

    def submit(self, seq_id: int | None, call: Callable[[TrainingClient], Any]) -> Future[Any]:
        """Run ``call(client)`` once every request with a lower ``seq_id`` has been handed over."""
        result: Future[Any] = Future()
        with self._lock:
            if seq_id is None:
                self._dispatch(call, result)
                return result
            if seq_id < self._next_seq or seq_id in self._waiting:
                raise BadRequest(f"seq_id {seq_id} of model {self.client.model_id} was already received")
            self._waiting[seq_id] = (call, result)
            while self._next_seq in self._waiting:
                self._dispatch(*self._waiting.pop(self._next_seq))
                self._next_seq += 1
        return result

    def _dispatch(self, call: Callable[[TrainingClient], Any], result: Future[Any]) -> None:
        try:
            local = call(self.client)
        except Exception as exc:  # noqa: BLE001 - a request rejected before it is queued fails its own future
            result.set_exception(exc)
            return
        _chain(local.future(), result)


def _chain(source: Future[Any], target: Future[Any], transform: Callable[[Any], Any] = lambda value: value) -> None:
    """Complete ``target`` with ``transform(source's result)``, or with its exception."""

    def done(finished: Future[Any]) -> None:
        error = finished.exception()
        if error is None:
            try:
                target.set_result(transform(finished.result()))
                return
            except Exception as exc:  # noqa: BLE001 - a failed conversion fails the request
                error = exc
        target.set_exception(error)

    source.add_done_callback(done)


class Engine:
    """The served state, on one local ``ServiceClient`` (base models are loaded once, shared by all runs)."""

    def __init__(self, service: ServiceClient, models: list[str]) -> None:
        self.service = service
        self.models = models
        self._lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._sessions: dict[str, bool] = {}  # session id -> still open
        self._runs: dict[str, _Run] = {}
        # id -> (local SamplingClient, model_path), least recently used first
        self._samplers: collections.OrderedDict[str, tuple[Any, str | None]] = collections.OrderedDict()
        self._pending: dict[str, tuple[Future[Any], float]] = {}  # request id -> (result, when tracked)
        self._delivered: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._dropped: collections.deque[str] = collections.deque(maxlen=4096)  # ids, to name them when asked

    # -- sessions ------------------------------------------------------------------
    def create_session(self, request: types.CreateSessionRequest) -> types.CreateSessionResponse:
        session_id = f"minds-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._sessions[session_id] = True
        return types.CreateSessionResponse(session_id=session_id)

    def heartbeat(self, session_id: str) -> dict[str, str]:
        state = self._session(session_id, allow_finished=True)
        if not state:
            raise _Gone(f"Session {session_id} has finished")
        return {"type": "session_heartbeat"}

    def finish_session(self, session_id: str) -> None:
        """Mark the session finished and drop its runs and samplers (their checkpoints stay)."""
        self._session(session_id, allow_finished=True)
        with self._lock:
            self._sessions[session_id] = False
            for key in [key for key, run in self._runs.items() if run.session_id == session_id]:
                del self._runs[key]
            for key in [key for key in self._samplers if key.startswith(f"{session_id}:")]:
                del self._samplers[key]

    def _session(self, session_id: str, allow_finished: bool = False) -> bool:
        with self._lock:
            if session_id not in self._sessions:
                raise NotFound(f"Unknown session {session_id!r}")
            open_ = self._sessions[session_id]
        if not open_ and not allow_finished:
            raise _Gone(f"Session {session_id} has finished")
        return open_

    def capabilities(self) -> types.GetServerCapabilitiesResponse:
        return types.GetServerCapabilitiesResponse(
            supported_models=[
                types.SupportedModel(model_name=name, trainable=True, sampleable=True) for name in self.models
            ]
        )

    # -- training runs ----------------------------------------------------------------
    def create_model(self, request: types.CreateModelRequest) -> types.UntypedAPIFuture:
        self._session(request.session_id)
        _check_optimizer(request.optimizer_config)
        lora = request.lora_config
        if lora is None:
            raise BadRequest("minds serve trains LoRA adapters only: send a lora_config (create_lora_training_client)")
        local = self.service.create_lora_training_client(
            request.base_model,
            rank=lora.rank,
            seed=lora.seed,
            train_mlp=lora.train_mlp,
            train_attn=lora.train_attn,
            train_unembed=lora.train_unembed,
            user_metadata=_str_metadata(request.user_metadata),
        )

        def register(client: TrainingClient) -> types.CreateModelResponse:
            with self._lock:
                self._runs[client.model_id] = _Run(client, request.session_id)
            return types.CreateModelResponse(model_id=client.model_id)

        return self._track(local.future(), register)

    def get_info(self, request: types.GetInfoRequest) -> types.GetInfoResponse:
        """The run's info; a built-in model's ``tokenizer_id`` is a folder the SDK's ``get_tokenizer`` loads offline."""
        client = self._run(request.model_id).client
        info = client.get_info()
        name = info.model_data.model_name or ""
        if "/" in name or Path(name).exists():  # a hub id or a model folder: the SDK loads it by that name
            return info
        folder = Path(self.service.checkpoint_root) / "tokenizers" / name
        with self._tokenizer_lock:
            if not (folder / "tokenizer_config.json").exists():
                client.get_tokenizer().save_pretrained(folder)
        data = info.model_data.model_copy(update={"tokenizer_id": str(folder.resolve())})
        return info.model_copy(update={"model_data": data})

    def forward_backward(self, request: types.ForwardBackwardRequest, forward_only: bool) -> types.UntypedAPIFuture:
        run = self._run(request.model_id)
        fb = request.forward_backward_input
        if fb.loss_fn not in LOSSES:
            raise BadRequest(f"Unknown loss_fn {fb.loss_fn!r}; minds serve supports: {', '.join(LOSSES)}")
        if not fb.data:
            raise BadRequest("forward_backward needs at least one datum")
        method = "forward" if forward_only else "forward_backward"
        config = dict(fb.loss_fn_config) if fb.loss_fn_config else None
        return self._track(run.submit(request.seq_id, lambda c: getattr(c, method)(fb.data, fb.loss_fn, config)))

    def optim_step(self, request: types.OptimStepRequest) -> types.UntypedAPIFuture:
        run = self._run(request.model_id)
        params = request.optim_params
        if not isinstance(params, types.AdamParams):
            raise BadRequest(f"minds serve steps with AdamW only (AdamParams), not {type(params).__name__}")
        return self._track(run.submit(request.seq_id, lambda c: c.optim_step(params)))

    def save_weights(self, request: types.SaveWeightsRequest) -> types.UntypedAPIFuture:
        run = self._run(request.model_id)
        name = request.path or f"{request.seq_id or 0:06d}"
        return self._track(
            run.submit(
                request.seq_id,
                lambda c: c.save_state(name, request.ttl_seconds, request.overwrite, request.user_metadata),
            )
        )

    def save_weights_for_sampler(self, request: types.SaveWeightsForSamplerRequest) -> types.UntypedAPIFuture:
        run = self._run(request.model_id)
        if request.path is not None:
            name = request.path
            return self._track(
                run.submit(
                    request.seq_id,
                    lambda c: c.save_weights_for_sampler(name, request.ttl_seconds, request.user_metadata),
                ),
                lambda saved: types.SaveWeightsForSamplerResponseInternal(path=saved.path),
            )
        session_id = f"{run.session_id}:sample:{request.sampling_session_seq_id}"

        def register(sampler: Any) -> types.SaveWeightsForSamplerResponseInternal:
            with self._lock:
                self._keep_sampler(session_id, sampler, None)
            return types.SaveWeightsForSamplerResponseInternal(sampling_session_id=session_id)

        return self._track(run.submit(request.seq_id, lambda c: c.save_weights_and_get_sampling_client()), register)

    def save_weights_external(self, request: types.SaveWeightsExternalRequest) -> types.UntypedAPIFuture:
        """The run's adapter as external weights (a peft folder), in the run's request order."""
        run = self._run(request.model_id)
        return self._track(
            run.submit(
                request.seq_id,
                lambda c: c.save_weights_external(request.path, request.ttl_seconds, request.age_encryption_recipients),
            ),
            lambda saved: types.SaveWeightsExternalResponseInternal(path=saved.path, type="save_weights_external"),
        )

    def load_weights(self, request: types.LoadWeightsRequest) -> types.UntypedAPIFuture:
        if request.optimizer_config is not None:
            _check_optimizer(request.optimizer_config)
        if request.model_id is not None:
            run = self._run(request.model_id)
            method = "load_state_with_optimizer" if request.optimizer else "load_state"
            return self._track(run.submit(request.seq_id, lambda c: getattr(c, method)(request.path)))
        if request.session_id is None or request.model_seq_id is None:
            raise BadRequest("load_weights needs model_id and seq_id, or session_id and model_seq_id")
        self._session(request.session_id)
        model_id = f"{request.session_id}:train:{request.model_seq_id}"
        metadata = _str_metadata(request.user_metadata)
        if request.optimizer:
            local = self.service.create_training_client_from_state_with_optimizer(
                request.path, request.base_model, user_metadata=metadata
            )
        else:
            local = self.service.create_training_client_from_state(request.path, request.base_model, user_metadata=metadata)

        def register(client: TrainingClient) -> types.LoadWeightsResponse:
            with self._lock:
                self._runs[model_id] = _Run(client, request.session_id or "")
            return types.LoadWeightsResponse(path=request.path, type="load_weights")

        return self._track(local.future(), register)

    def _run(self, model_id: str) -> _Run:
        with self._lock:
            run = self._runs.get(model_id)
        if run is None:
            raise NotFound(f"Unknown model_id {model_id!r} (create a training client first)")
        return run

    # -- sampling -----------------------------------------------------------------------
    def create_sampling_session(
        self, request: types.CreateSamplingSessionRequest
    ) -> types.CreateSamplingSessionResponse:
        self._session(request.session_id)
        sampler = _local_call(
            lambda: self.service.create_sampling_client(model_path=request.model_path, base_model=request.base_model)
        )
        session_id = f"{request.session_id}:sample:{request.sampling_session_seq_id}"
        with self._lock:
            self._keep_sampler(session_id, sampler, request.model_path)
        return types.CreateSamplingSessionResponse(sampling_session_id=session_id)

    def get_sampler(self, sampler_id: str) -> types.GetSamplerResponse:
        sampler, model_path = self._sampler(sampler_id)
        return types.GetSamplerResponse(sampler_id=sampler_id, base_model=sampler.get_base_model(), model_path=model_path)

    def _keep_sampler(self, sampler_id: str, sampler: Any, model_path: str | None) -> None:
        """Register a sampling session (call with the lock held), dropping the least recently used beyond
        ``MAX_SAMPLERS``."""
        self._samplers[sampler_id] = (sampler, model_path)
        while len(self._samplers) > MAX_SAMPLERS:
            dropped, _ = self._samplers.popitem(last=False)
            self._dropped.append(dropped)

    def _sampler(self, sampler_id: str) -> tuple[Any, str | None]:
        with self._lock:
            found = self._samplers.get(sampler_id)
            if found is not None:
                self._samplers.move_to_end(sampler_id)
                return found
            dropped = sampler_id in self._dropped
        if dropped:
            raise NotFound(
                f"Sampling session {sampler_id!r} was dropped: minds serve keeps the {MAX_SAMPLERS} most recently "
                "used sampling clients; make a new one (save_weights_and_get_sampling_client or "
                "create_sampling_client with the saved weights' path)"
            )
        raise NotFound(f"Unknown sampling session {sampler_id!r}")

    def sample(self, request: types.SampleRequest) -> types.UntypedAPIFuture:
        if request.sampling_session_id is not None:
            sampler = self._sampler(request.sampling_session_id)[0]
        else:
            sampler = _local_call(
                lambda: self.service.create_sampling_client(
                    model_path=request.model_path, base_model=request.base_model
                )
            )
        target = request.target_prompt_logprobs
        try:
            local = sampler.sample(
                request.prompt,
                request.num_samples,
                request.sampling_params,
                include_prompt_logprobs=bool(request.prompt_logprobs),
                topk_prompt_logprobs=request.topk_prompt_logprobs,
                topk_sample_logprobs=request.topk_sample_logprobs,
                target_prompt_logprobs=None if target is None else types.TensorData(**target.model_dump()),
                prompt_alt_tokens_k=request.prompt_alt_tokens_k,
                prompt_logprobs_last_n=request.prompt_logprobs_last_n,
            )
        except ValueError as exc:  # a target tensor the SDK itself would have refused
            raise BadRequest(str(exc)) from None
        future = self._track(local.future())
        ids = [f"{future.request_id}:{i}" for i in range(request.num_samples)]
        return future.model_copy(update={"sample_sequence_ids": ids})

    # -- futures ---------------------------------------------------------------------------
    def _track(
        self, source: Future[Any], transform: Callable[[Any], Any] = lambda value: value
    ) -> types.UntypedAPIFuture:
        result: Future[Any] = Future()
        _chain(source, result, transform)
        request_id = f"req-{uuid.uuid4().hex}"
        now = time.monotonic()
        with self._lock:
            abandoned = [key for key, (f, since) in self._pending.items() if f.done() and now - since > ABANDONED_AFTER]
            for key in abandoned:
                del self._pending[key]
            self._pending[request_id] = (result, now)
        return types.UntypedAPIFuture(request_id=request_id)

    def retrieve(self, request_id: str) -> Any:
        """The request's result (a ``tinker.types`` value), a failure dict, or a try-again dict."""
        with self._lock:
            if request_id in self._delivered:
                return self._delivered[request_id]
            future, _ = self._pending.get(request_id, (None, 0.0))
        if future is None:
            raise NotFound(f"Unknown request_id {request_id!r}")
        try:
            value = future.result(timeout=LONG_POLL_SECONDS)
        except FutureTimeout:
            return {"type": "try_again", "request_id": request_id, "queue_state": "active"}
        except Exception as exc:  # noqa: BLE001 - the request's own failure, delivered to its client
            value = _failure(exc)
        with self._lock:
            self._pending.pop(request_id, None)
            self._delivered[request_id] = value
            while len(self._delivered) > DELIVERED_KEPT:
                self._delivered.popitem(last=False)
        return value


class _Gone(HttpError):
    """410: the session has finished (the SDK stops its heartbeat on this)."""

    status = 410


def _check_optimizer(config: types.OptimizerConfig | None) -> None:
    if config is not None and config.type != "adamw":
        raise BadRequest(f"minds serve trains with AdamW only (optimizer type 'adamw'), not {config.type!r}")


def _str_metadata(metadata: dict[str, Any] | None) -> dict[str, str] | None:
    """A run's ``user_metadata`` as the SDK's ``TrainingRun`` returns it (string values)."""
    return None if metadata is None else {str(key): str(value) for key, value in metadata.items()}


def _local_call(make: Callable[[], Any]) -> Any:
    """Run a quick local-backend call now, answering its errors with their HTTP status."""
    try:
        return make().result()
    except tinker.APIStatusError as exc:
        error = HttpError(exc.message)
        error.status = exc.status_code
        raise error from None
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _failure(exc: BaseException) -> dict[str, str]:
    """A failed request as the SDK's ``RequestFailedResponse``: user errors are 4xx-kind, the rest the server's."""
    if isinstance(exc, tinker.APIStatusError) and exc.status_code < 500 or isinstance(exc, (ValueError, LookupError)):
        return {"error": str(getattr(exc, "message", exc)), "category": types.RequestErrorCategory.User.value}
    return {"error": f"{type(exc).__name__}: {exc}", "category": types.RequestErrorCategory.Server.value}

