"""What ``minds serve`` keeps between requests: sessions, training runs, samplers and pending results.

Each handler takes the SDK's own request type (``tinker.types``) and either answers at
once or starts work on the local backend and returns an ``UntypedAPIFuture`` whose
result the SDK fetches from ``/api/v1/retrieve_future``. The local backend runs each
training run's requests strictly in the order it receives them, so requests of one
run are handed to it in the SDK's ``seq_id`` order (the SDK may send them out of
order, e.g. the first chunk of a large forward_backward last).

Every handler takes the calling ``client`` (``owners.client_of`` its API key): what a client
created is found by that client only; any other gets the 404 of a thing that does not exist.
Work is admitted against ``ServeLimits`` and the server's own base models before anything is
allocated for it; errors never show the server's folders (``public``).
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tinker
from tinker import types

from minds_core.backends.local import ServiceClient, TrainingClient
from minds_core.backends.local.catalog import capabilities, checkpoints_page, training_runs_page
from minds_core.backends.local.training.checkpoints import parse_path
from minds_core.backends.local.training.losses import LOSSES
from minds_core.http.errors import BadRequest, HttpError, NotFound, TooManyRequests, public_detail
from minds_core.http.limits import ServeLimits

from .owners import RunOwners
from .samplers import Kept, KeptSamplers, SamplerBudget

__all__ = ["Engine"]

#: Seconds one /retrieve_future call waits for its result before answering "try_again".
LONG_POLL_SECONDS = 20.0
#: Results already delivered, kept (newest first) so that a retried retrieve still finds them.
DELIVERED_KEPT = 256
#: Seconds a finished result nobody retrieves is kept (its client has gone): memory stays bounded.
ABANDONED_AFTER = 600.0
#: A page size past any listing, to filter a whole listing to one client's part before paging it.
_EVERYTHING = 1 << 62


@dataclass
class _Session:
    """One session: its client, what it was created with (``user_metadata``, ``display_name``), whether it is open."""

    owner: str
    created: types.CreateSessionRequest
    open: bool = True


class _Run:
    """One training run: its local client, and the requests waiting for their ``seq_id`` turn."""

    def __init__(self, client: TrainingClient, session_id: str, owner: str) -> None:
        self.client = client
        self.session_id = session_id
        self.owner = owner
        self._next_seq = 1
        self._waiting: dict[int, tuple[Callable[[TrainingClient], Any], Future[Any]] | None] = {}  # None: skipped
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
            self._hand_over()
        return result

    def skip(self, seq_id: int) -> None:
        """``seq_id`` was refused (a 4xx the SDK does not retry): the requests after it go on without it."""
        with self._lock:
            if seq_id >= self._next_seq and seq_id not in self._waiting:
                self._waiting[seq_id] = None
                self._hand_over()

    def _hand_over(self) -> None:
        """Dispatch the requests whose turn has come (call with the lock held)."""
        while self._next_seq in self._waiting:
            waiting = self._waiting.pop(self._next_seq)
            if waiting is not None:
                self._dispatch(*waiting)
            self._next_seq += 1

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
    """The served state, on one local ``ServiceClient`` (base models are loaded once, shared by all runs).

    ``samplers`` keeps the sampling sessions within ``budget`` (default ``SamplerBudget()``), whose memory
    default is measured on the service's device here: make the engine once the base models are loaded."""

    def __init__(
        self, service: ServiceClient, models: list[str], limits: ServeLimits, budget: SamplerBudget | None = None
    ) -> None:
        self.service = service
        self.models = models
        self.limits = limits
        self.rest = service.create_rest_client()  # checkpoint listings, as the in-process RestClient's
        self.owners = RunOwners(Path(service.checkpoint_root))
        root = Path(service.checkpoint_root)
        self._hidden = {str(root): "<checkpoint root>", str(root.resolve()): "<checkpoint root>"}
        self._lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._runs: dict[str, _Run] = {}
        budget = budget or SamplerBudget()
        self.samplers = KeptSamplers(budget.memory_bytes(service.device), budget.max_samplers)
        self._pending: dict[str, tuple[Future[Any], float, str]] = {}  # request id -> (result, when tracked, owner)
        self._delivered: collections.OrderedDict[str, tuple[str, Any]] = collections.OrderedDict()  # id -> (owner, value)
        self._unfinished: dict[str, int] = {}  # owner -> requests started and not yet finished
        self._tokens = {"tokens_sampled": 0, "tokens_trained": 0}  # since the server started, of finished requests

    def load(self) -> dict[str, float]:
        """What ``/metrics`` reports of the engine (``metrics.EngineLoad``): sessions open, runs and sampling sessions
        held (and the samplers' own bytes), requests unfinished, and tokens sampled and trained so far."""
        with self._lock:
            return {
                "sessions": float(sum(session.open for session in self._sessions.values())),
                "runs": float(len(self._runs)),
                "samplers": float(len(self.samplers)),
                "sampler_bytes": float(self.samplers.held_bytes()),
                "queue_depth": float(sum(self._unfinished.values())),
                **{key: float(value) for key, value in self._tokens.items()},
            }

    def keep_samplers(self, count: int) -> None:
        """Keep up to ``count`` sampling sessions from now on (``SamplerBudget.max_samplers``; a pool of workers that
        grew keeps more), dropping the least recently used past it as new ones are kept."""
        with self._lock:
            self.samplers.max_samplers = count

    def session_of(self, key: str, value: str) -> str | None:
        """The session a request belongs to, from the id its body names first (``metrics.EngineLoad``)."""
        if key == "model_id":
            with self._lock:
                run = self._runs.get(value)
            return run.session_id if run is not None else None
        return value.split(":", 1)[0]

    def _count_tokens(self, key: str, count: Callable[[Any], int]) -> Callable[[Future[Any]], None]:
        """A done-callback adding a finished request's tokens (``count(result)``) to ``key``."""

        def done(future: Future[Any]) -> None:
            if not future.cancelled() and future.exception() is None:
                tokens = count(future.result())
                with self._lock:
                    self._tokens[key] += tokens

        return done

    def public(self, detail: str) -> str:
        """An error message as a client may see it: the server's checkpoint folder named, never shown."""
        return public_detail(detail, self._hidden)

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every started request to finish; whether they all did."""
        deadline = time.monotonic() + timeout
        with self._lock:
            pending = [future for future, _, _ in self._pending.values()]
        for future in pending:
            try:
                future.exception(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                return False
        return True

    # -- sessions ------------------------------------------------------------------
    def create_session(self, request: types.CreateSessionRequest, owner: str) -> types.CreateSessionResponse:
        self.limits.check_session(request)
        session_id = f"minds-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._sessions[session_id] = _Session(owner, request)
        return types.CreateSessionResponse(session_id=session_id)

    def heartbeat(self, session_id: str, owner: str) -> dict[str, str]:
        self._session(session_id, owner)
        return {"type": "session_heartbeat"}

    def finish_session(self, session_id: str, owner: str) -> None:
        """Mark the session finished and drop its runs and samplers (their checkpoints stay)."""
        session = self._session(session_id, owner, allow_finished=True)
        with self._lock:
            session.open = False
            for key in [key for key, run in self._runs.items() if run.session_id == session_id]:
                del self._runs[key]
            self.samplers.forget(f"{session_id}:")

    def get_session(self, session_id: str, owner: str) -> types.GetSessionResponse:
        """The session's live training runs and sampling sessions."""
        created = self._session(session_id, owner, allow_finished=True).created
        with self._lock:
            runs = [key for key, run in self._runs.items() if run.session_id == session_id]
            samplers = self.samplers.ids(f"{session_id}:")
        return types.GetSessionResponse(
            training_run_ids=runs,
            sampler_ids=samplers,
            user_metadata=created.user_metadata,
            display_name=created.display_name,
        )

    def list_sessions(self, limit: int, offset: int, owner: str) -> types.ListSessionsResponse:
        """One page of the client's sessions, newest first."""
        with self._lock:
            mine = [key for key, session in self._sessions.items() if session.owner == owner]
        return types.ListSessionsResponse(sessions=mine[::-1][offset : offset + limit])

    def _session(self, session_id: str, owner: str, allow_finished: bool = False) -> _Session:
        """``owner``'s session ``session_id`` (404 for any other's); 410 once finished, unless ``allow_finished``."""
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None or session.owner != owner:
            raise NotFound(f"Unknown session {session_id!r}")
        if not session.open and not allow_finished:
            raise _Gone(f"Session {session_id} has finished")
        return session

    def _still_open(self, session_id: str) -> None:
        """Under ``self._lock``: refuse to add to a session that was finished while its request was on the way
        (``finish_session`` drops what the session holds once; anything added later would never be dropped)."""
        if not self._sessions[session_id].open:
            raise _Gone(f"Session {session_id} has finished")

    def capabilities(self) -> types.GetServerCapabilitiesResponse:
        """The in-process answer (which knows each loaded model's context), for the served models only."""
        known = {m.model_name: m.max_context_length for m in self.rest.get_server_capabilities().result().supported_models}
        return capabilities({name: known.get(name) for name in self.models})

    # -- training runs ----------------------------------------------------------------
    def create_model(self, request: types.CreateModelRequest, owner: str) -> types.UntypedAPIFuture:
        self._admit(owner)
        self._session(request.session_id, owner)
        _check_optimizer(request.optimizer_config)
        lora = request.lora_config
        if lora is None:
            raise BadRequest("minds serve trains LoRA adapters only: send a lora_config (create_lora_training_client)")
        self._check_base_model(request.base_model)
        self.limits.check_lora(lora.rank)
        self._check_room()
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
                self._still_open(request.session_id)
                self._runs[client.model_id] = _Run(client, request.session_id, owner)
            self.owners.claim(client.model_id, owner)
            return types.CreateModelResponse(model_id=client.model_id)

        return self._track(local.future(), owner, register)

    def get_info(self, request: types.GetInfoRequest, owner: str) -> types.GetInfoResponse:
        """The run's info; a built-in model's ``tokenizer_id`` is a folder the SDK's ``get_tokenizer`` loads offline."""
        client = self._run(request.model_id, owner).client
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

    def forward_backward(
        self, request: types.ForwardBackwardRequest, forward_only: bool, owner: str
    ) -> types.UntypedAPIFuture:
        self._admit(owner)
        run = self._run(request.model_id, owner)
        fb = request.forward_backward_input
        if fb.loss_fn not in LOSSES:
            raise BadRequest(f"Unknown loss_fn {fb.loss_fn!r}; minds serve supports: {', '.join(LOSSES)}")
        if not fb.data:
            raise BadRequest("forward_backward needs at least one datum")
        method = "forward" if forward_only else "forward_backward"
        config = dict(fb.loss_fn_config) if fb.loss_fn_config else None
        submitted = run.submit(request.seq_id, lambda c: getattr(c, method)(fb.data, fb.loss_fn, config))
        if not forward_only:
            trained = sum(datum.model_input.length for datum in fb.data)
            submitted.add_done_callback(self._count_tokens("tokens_trained", lambda _: trained))
        return self._track(submitted, owner)

    def optim_step(self, request: types.OptimStepRequest, owner: str) -> types.UntypedAPIFuture:
        self._admit(owner)
        run = self._run(request.model_id, owner)
        params = request.optim_params
        if not isinstance(params, types.AdamParams):
            raise BadRequest(f"minds serve steps with AdamW only (AdamParams), not {type(params).__name__}")
        return self._track(run.submit(request.seq_id, lambda c: c.optim_step(params)), owner)

    def save_weights(self, request: types.SaveWeightsRequest, owner: str) -> types.UntypedAPIFuture:
        self._admit(owner)
        run = self._run(request.model_id, owner)
        name = request.path or f"{request.seq_id or 0:06d}"
        return self._track(
            run.submit(
                request.seq_id,
                lambda c: c.save_state(name, request.ttl_seconds, request.overwrite, request.user_metadata),
            ),
            owner,
        )

    def save_weights_for_sampler(
        self, request: types.SaveWeightsForSamplerRequest, owner: str
    ) -> types.UntypedAPIFuture:
        self._admit(owner)
        run = self._run(request.model_id, owner)
        if request.path is not None:
            name = request.path
            return self._track(
                run.submit(
                    request.seq_id,
                    lambda c: c.save_weights_for_sampler(name, request.ttl_seconds, request.user_metadata),
                ),
                owner,
                lambda saved: types.SaveWeightsForSamplerResponseInternal(path=saved.path),
            )
        session_id = f"{run.session_id}:sample:{request.sampling_session_seq_id}"

        def register(sampler: Any) -> types.SaveWeightsForSamplerResponseInternal:
            with self._lock:
                self.samplers.keep(session_id, Kept(sampler, None, owner))
            return types.SaveWeightsForSamplerResponseInternal(sampling_session_id=session_id)

        return self._track(
            run.submit(request.seq_id, lambda c: c.save_weights_and_get_sampling_client()), owner, register
        )

    def save_weights_external(self, request: types.SaveWeightsExternalRequest, owner: str) -> types.UntypedAPIFuture:
        """The run's adapter as external weights (a peft folder), in the run's request order."""
        self._admit(owner)
        run = self._run(request.model_id, owner)
        return self._track(
            run.submit(
                request.seq_id,
                lambda c: c.save_weights_external(request.path, request.ttl_seconds, request.age_encryption_recipients),
            ),
            owner,
            lambda saved: types.SaveWeightsExternalResponseInternal(path=saved.path, type="save_weights_external"),
        )

    def load_weights(self, request: types.LoadWeightsRequest, owner: str) -> types.UntypedAPIFuture:
        self._admit(owner)
        if request.optimizer_config is not None:
            _check_optimizer(request.optimizer_config)
        self._check_checkpoint(request.path, owner)
        if request.model_id is not None:
            run = self._run(request.model_id, owner)
            method = "load_state_with_optimizer" if request.optimizer else "load_state"
            return self._track(run.submit(request.seq_id, lambda c: getattr(c, method)(request.path)), owner)
        if request.session_id is None or request.model_seq_id is None:
            raise BadRequest("load_weights needs model_id and seq_id, or session_id and model_seq_id")
        self._session(request.session_id, owner)
        if request.base_model is not None:
            self._check_base_model(request.base_model)
        self._check_room()
        model_id = f"{request.session_id}:train:{request.model_seq_id}"  # the SDK derives it: the run must carry it
        local = self.service.create_training_client_from_checkpoint(
            request.path,
            request.base_model,
            _str_metadata(request.user_metadata),
            with_optimizer=bool(request.optimizer),
            run_id=model_id,
        )

        def register(client: TrainingClient) -> types.LoadWeightsResponse:
            with self._lock:
                self._still_open(request.session_id)
                self._runs[model_id] = _Run(client, request.session_id, owner)
            self.owners.claim(client.model_id, owner)
            return types.LoadWeightsResponse(path=request.path, type="load_weights")

        return self._track(local.future(), owner, register)

    def refused(self, model_id: str, seq_id: int, owner: str) -> None:
        """Request ``seq_id`` of ``owner``'s run ``model_id`` was refused for good: later requests of the run
        must not wait for it (else the SDK's training client hangs on its next call)."""
        with self._lock:
            run = self._runs.get(model_id)
        if run is not None and run.owner == owner:
            run.skip(seq_id)

    def _run(self, model_id: str, owner: str) -> _Run:
        with self._lock:
            run = self._runs.get(model_id)
        if run is None or run.owner != owner:
            raise NotFound(f"Unknown model_id {model_id!r} (create a training client first)")
        return run

    def _check_base_model(self, name: str) -> None:
        if name not in self.models:
            raise BadRequest(
                f"base_model {name!r} is not served here: this minds serve was started with "
                f"{', '.join(repr(model) for model in self.models)} (restart it with --model NAME to serve another)"
            )

    def _check_room(self) -> None:
        with self._lock:
            alive = len(self._runs)
        if alive >= self.limits.max_training_runs:
            raise TooManyRequests(
                f"This server holds {alive} training runs, its max_training_runs: finish sessions you are done "
                "with (ServiceClient.close) to free theirs, or start minds serve with a larger --max-training-runs"
            )

    def _check_checkpoint(self, path: str, owner: str) -> None:
        """Pass if ``owner`` may use the checkpoint at ``path`` and its base model is served here; else 404 / 400."""
        self._check_base_model(self.weights_info(path, owner).base_model)

    # -- checkpoints and training runs, as the SDK's RestClient asks for them -----------------
    def training_run(self, run_id: str, owner: str) -> types.TrainingRun:
        self._check_run_visible(run_id, owner)
        return self._rest(lambda: self.rest.get_training_run(run_id).result(), f"No training run {run_id!r} with checkpoints")

    def run_checkpoints(self, run_id: str, owner: str) -> types.CheckpointsListResponse:
        self._check_run_visible(run_id, owner)
        return self.rest.list_checkpoints(run_id).result()

    def training_runs(self, limit: int, offset: int, owner: str) -> types.TrainingRunsResponse:
        runs = self.rest.list_training_runs(_EVERYTHING, 0).result().training_runs
        return training_runs_page([run for run in runs if self.owners.visible(run.training_run_id, owner)], limit, offset)

    def user_checkpoints(self, limit: int, offset: int, owner: str) -> types.CheckpointsListResponse:
        found = self.rest.list_user_checkpoints(_EVERYTHING, 0).result().checkpoints
        mine = [item for item in found if self.owners.visible(parse_path(item.tinker_path)[0], owner)]
        return checkpoints_page(mine, limit, offset)

    def weights_info(self, path: str, owner: str) -> types.WeightsInfoResponse:
        """Base model and LoRA settings of a checkpoint ``owner`` may see; one 404 for any it may not, or that is gone."""
        missing = f"No checkpoint at {path} (it does not exist, has expired, or belongs to another client)"
        if not self.owners.visible(parse_path(path)[0], owner):
            raise NotFound(missing)
        return self._rest(lambda: self.rest.get_weights_info_by_tinker_path(path).result(), missing)

    def delete_checkpoint(self, run_id: str, checkpoint_id: str, owner: str) -> None:
        self._check_run_visible(run_id, owner)
        self._rest(lambda: self.rest.delete_checkpoint(run_id, checkpoint_id).result(), f"No checkpoint {checkpoint_id!r} in run {run_id!r}")

    def set_checkpoint_ttl(self, run_id: str, checkpoint_id: str, ttl_seconds: Any, owner: str) -> None:
        """Move (or, with None, remove) the expiry of a checkpoint ``owner`` may see."""
        self._check_run_visible(run_id, owner)
        path = f"tinker://{run_id}/{checkpoint_id}"
        self._rest(lambda: self.rest.set_checkpoint_ttl_from_tinker_path(path, ttl_seconds).result(), f"No checkpoint {checkpoint_id!r} in run {run_id!r}")

    def _check_run_visible(self, run_id: str, owner: str) -> None:
        if not self.owners.visible(run_id, owner):
            raise NotFound(f"No training run {run_id!r} with checkpoints")

    @staticmethod
    def _rest(call: Callable[[], Any], missing: str) -> Any:
        """A RestClient call; its 404 answered with ``missing`` (the same words whether or not the thing ever existed)."""
        try:
            return call()
        except tinker.NotFoundError:
            raise NotFound(missing) from None

    # -- sampling -----------------------------------------------------------------------
    def create_sampling_session(
        self, request: types.CreateSamplingSessionRequest, owner: str
    ) -> types.CreateSamplingSessionResponse:
        self._session(request.session_id, owner)
        self._check_sampler_source(request.model_path, request.base_model, owner)
        sampler = _local_call(
            lambda: self.service.create_sampling_client(model_path=request.model_path, base_model=request.base_model)
        )
        session_id = f"{request.session_id}:sample:{request.sampling_session_seq_id}"
        with self._lock:
            self._still_open(request.session_id)
            self.samplers.keep(session_id, Kept(sampler, request.model_path, owner))
        return types.CreateSamplingSessionResponse(sampling_session_id=session_id)

    def get_sampler(self, sampler_id: str, owner: str) -> types.GetSamplerResponse:
        sampler, model_path = self._sampler(sampler_id, owner)
        return types.GetSamplerResponse(sampler_id=sampler_id, base_model=sampler.get_base_model(), model_path=model_path)

    def _check_sampler_source(self, model_path: str | None, base_model: str | None, owner: str) -> None:
        """A sampler's weights: a checkpoint ``owner`` may use, or a base model served here."""
        if model_path is not None:
            self._check_checkpoint(model_path, owner)
        elif base_model is not None:
            self._check_base_model(base_model)

    def _sampler(self, sampler_id: str, owner: str) -> tuple[Any, str | None]:
        with self._lock:
            kept = self.samplers.use(sampler_id, owner)
            if kept is not None:
                return kept.sampler, kept.model_path
            why = self.samplers.why_dropped(sampler_id)
            dropped = why is not None and sampler_id.startswith(self._own_prefixes(owner))
        if dropped:
            raise NotFound(
                f"Sampling session {sampler_id!r} was dropped: {why}, and it was the least recently used past that; "
                "make a new one (save_weights_and_get_sampling_client or create_sampling_client with the saved "
                "weights' path)"
            )
        raise NotFound(f"Unknown sampling session {sampler_id!r}")

    def _own_prefixes(self, owner: str) -> tuple[str, ...]:
        """``"<session>:"`` of each of ``owner``'s sessions (call with the lock held)."""
        return tuple(f"{key}:" for key, session in self._sessions.items() if session.owner == owner)

    def sample(self, request: types.SampleRequest, owner: str) -> types.UntypedAPIFuture:
        self.limits.check_sample(request)
        self._admit(owner)
        if request.sampling_session_id is not None:
            sampler = self._sampler(request.sampling_session_id, owner)[0]
        else:
            self._check_sampler_source(request.model_path, request.base_model, owner)
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
        sampled = local.future()
        sampled.add_done_callback(self._count_tokens("tokens_sampled", lambda r: sum(len(s.tokens) for s in r.sequences)))
        future = self._track(sampled, owner)
        ids = [f"{future.request_id}:{i}" for i in range(request.num_samples)]
        return future.model_copy(update={"sample_sequence_ids": ids})

    # -- futures ---------------------------------------------------------------------------
    def _admit(self, owner: str) -> None:
        """Refuse (429) a new request of ``owner`` while ``max_pending_requests`` of its requests are unfinished."""
        with self._lock:
            unfinished = self._unfinished.get(owner, 0)
        if unfinished >= self.limits.max_pending_requests:
            raise TooManyRequests(
                f"{unfinished} of your requests are still running or queued, this server's max_pending_requests: "
                "wait for some results (the SDK retries this), or start minds serve with a larger "
                "--max-pending-requests"
            )

    def _track(
        self, source: Future[Any], owner: str, transform: Callable[[Any], Any] = lambda value: value
    ) -> types.UntypedAPIFuture:
        result: Future[Any] = Future()
        _chain(source, result, transform)
        request_id = f"req-{uuid.uuid4().hex}"
        now = time.monotonic()
        with self._lock:
            abandoned = [key for key, (f, since, _) in self._pending.items() if f.done() and now - since > ABANDONED_AFTER]
            for key in abandoned:
                del self._pending[key]
            self._pending[request_id] = (result, now, owner)
            self._unfinished[owner] = self._unfinished.get(owner, 0) + 1
        result.add_done_callback(lambda _: self._finished(owner))
        return types.UntypedAPIFuture(request_id=request_id)

    def _finished(self, owner: str) -> None:
        with self._lock:
            self._unfinished[owner] -= 1
            if not self._unfinished[owner]:
                del self._unfinished[owner]

    def retrieve(self, request_id: str, owner: str) -> Any:
        """The request's result (a ``tinker.types`` value), a failure dict, or a try-again dict."""
        with self._lock:
            who, value = self._delivered.get(request_id, (None, None))
            if who == owner:
                return value
            future, _, who = self._pending.get(request_id, (None, 0.0, None))
        if future is None or who != owner:
            raise NotFound(f"Unknown request_id {request_id!r}")
        try:
            value = future.result(timeout=LONG_POLL_SECONDS)
        except FutureTimeout:
            return {"type": "try_again", "request_id": request_id, "queue_state": "active"}
        except Exception as exc:  # noqa: BLE001 - the request's own failure, delivered to its client
            value = _failure(exc, self.public)
        with self._lock:
            self._pending.pop(request_id, None)
            self._delivered[request_id] = (owner, value)
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


def _failure(exc: BaseException, public: Callable[[str], str]) -> dict[str, str]:
    """A failed request as the SDK's ``RequestFailedResponse``: user errors are 4xx-kind, the rest the server's."""
    if isinstance(exc, HttpError) and exc.status < 500:
        return {"error": public(exc.detail), "category": types.RequestErrorCategory.User.value}
    if isinstance(exc, tinker.APIStatusError) and exc.status_code < 500 or isinstance(exc, (ValueError, LookupError)):
        return {"error": public(str(getattr(exc, "message", exc))), "category": types.RequestErrorCategory.User.value}
    return {"error": public(f"{type(exc).__name__}: {exc}"), "category": types.RequestErrorCategory.Server.value}

