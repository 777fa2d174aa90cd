"""The sampling engine of one fixed model: request checks, prompt log-probs, and its decode batch.

Requests go to the sampler's ``DecodeBatch`` (continuous batching, see
``decoding``): every pending request of a sampler decodes together.
"""

from __future__ import annotations

import math
import secrets
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import numpy as np
import torch
from tinker import types
from torch import nn

from minds_core.base.tracing import active, current, record

from ..model.accelerator import is_out_of_memory, out_of_memory_error
from ..model.errors import LocalBadRequestError
from ..model.lora import AdapterState, LoraSpec
from ..model.memory_plan import LOWER_ROWS, sampler_kv_budget
from ..model.models import BaseModel
from ..model.tokens import check_length, check_tokens
from .decode_slots import DecodeSlots, Kinds, SlotSettings
from .decoding import DecodeBatch, SampleRequest, StopRule, prompt_scores
from .held_bytes import storage_bytes
from .prompt_targets import PromptTargets

__all__ = ["SamplingEngine"]


class SamplingEngine:
    """Samples from one fixed model (a base model, or a snapshot of an adapter merged into it)."""

    def __init__(self, base: BaseModel, model: nn.Module) -> None:
        self.base = base
        self.model = model
        placement = base.placement
        settings = SlotSettings(
            max_rows=placement.decode_rows,
            accelerator=placement.device_layer,
            capture=placement.cuda_graphs,
            compile_mode=placement.decode_compile if placement.compiles else None,
            kv_budget=_kv_budget(base),
        )
        self._batch = DecodeBatch(model, base.tokenizer, placement.tokens_per_micro_batch, settings)
        if base.plan is not None and self._batch.slots.warmed is None:
            _warm_up(base, self._batch.slots)

    @classmethod
    def for_base(cls, base: BaseModel) -> SamplingEngine:
        """A sampler of the bare base model."""
        return cls(base, base.model)

    @classmethod
    def for_adapter(cls, base: BaseModel, spec: LoraSpec, adapter: AdapterState) -> SamplingEngine:
        """A sampler of ``base`` with ``adapter``, merged into its own copy of the adapted weights
        (unmerged, in float32, where the placement does not merge adapters; see ``adapted_models``).

        The model comes from (and, once the sampler is garbage-collected, returns to) ``base.adapted``.
        """
        model, key = base.adapted.acquire(spec, adapter)
        sampler = cls(base, model)
        weakref.finalize(sampler, base.adapted.release, key, model)
        return sampler

    @property
    def held_bytes(self) -> int:
        """Bytes of memory this sampler holds of its own: its model's tensors that are not the base model's (the
        adapted weights it decodes with) and its decode slots' (keys/values, sampling state, decoder tables), as
        allocated now. 0 for a sampler of the bare base model: it decodes with the base's own tree and slots,
        which live as long as the base does."""
        if self.model is self.base.model:
            return 0
        base = self.base.model
        return storage_bytes(
            [*self.model.parameters(), *self.model.buffers(), *self._batch.slots.held()],
            shared=[*base.parameters(), *base.buffers()],
        )

    @property
    def device(self) -> torch.device:
        """Where the model's weights live."""
        return next(self.model.parameters()).device

    def submit(
        self,
        prompt: Sequence[int],
        num_samples: int,
        params: types.SamplingParams,
        *,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        prompt_logprobs_last_n: int | None = None,
        target_prompt_logprobs: types.TensorData | None = None,
    ) -> Future[types.SampleResponse]:
        """Queue a request for ``num_samples`` continuations of ``prompt``; ``drive`` decodes it.

        A request that is invalid fails its own future at once.
        """
        future: Future[types.SampleResponse] = Future()
        try:
            prompt_ids = self._prompt(prompt)
            max_tokens = self._check(params, num_samples, len(prompt_ids))
            for name, k in (("topk_prompt_logprobs", topk_prompt_logprobs), ("topk_sample_logprobs", topk_sample_logprobs)):
                if k < 0:
                    raise LocalBadRequestError(f"{name} must be 0 or more, got {k}")
            _check_last_n(prompt_logprobs_last_n, len(prompt_ids))
            targets = (
                None
                if target_prompt_logprobs is None
                else PromptTargets.parse(target_prompt_logprobs, len(prompt_ids), self.base.vocab_size)
            )
            seed = params.seed if params.seed is not None else secrets.randbits(63)
            request = SampleRequest(
                prompt=prompt_ids,
                num_samples=num_samples,
                params=params,
                max_tokens=max_tokens,
                stop=self._stop_rule(params.stop),
                seed=seed,
                topk=topk_sample_logprobs,
                topk_prompt=topk_prompt_logprobs,
                include_prompt_logprobs=include_prompt_logprobs,
                last_n=prompt_logprobs_last_n,
                future=future,
                targets=targets,
            )
        except LocalBadRequestError as exc:
            future.set_exception(exc)
            return future
        trace_request(request)
        self._batch.pending.put(request)
        return future

    def drive(self) -> None:
        """Decode every queued request to the end, admitting newcomers between steps (one worker thread)."""
        self._batch.run()

    @torch.inference_mode()
    def prompt_logprobs(self, prompt: Sequence[int], last_n: int | None = None) -> list[float | None]:
        """``[None, log p(t1 | t0), log p(t2 | t0 t1), ...]`` for the whole prompt (or its last ``last_n``)."""
        prompt_ids = self._prompt(prompt)
        _check_last_n(last_n, len(prompt_ids))
        prompt_ids = prompt_ids.to(self.device)
        logits = self.model(input_ids=prompt_ids[None], use_cache=False).logits[0]
        values = prompt_scores(prompt_ids, logits, 0, last_n).logprobs
        return [None if np.isnan(v) else float(v) for v in values]

    def _prompt(self, prompt: Sequence[int]) -> torch.Tensor:
        tokens = list(prompt)
        check_tokens(tokens, self.base, "The prompt")
        check_length(len(tokens), self.base, "The prompt")
        return torch.tensor(tokens, dtype=torch.int64)

    def _check(self, params: types.SamplingParams, num_samples: int, prompt_length: int) -> int:
        """Validate the request; the number of tokens to generate at most."""
        room = self.base.max_length - prompt_length
        max_tokens = room if params.max_tokens is None else params.max_tokens
        problems = []
        if num_samples < 1:
            problems.append(f"num_samples must be at least 1, got {num_samples}")
        if max_tokens <= 0:
            problems.append(f"max_tokens must be at least 1, got {max_tokens}")
        elif max_tokens > room:
            problems.append(
                f"prompt ({prompt_length} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"{self.base.max_length}-token context of {self.base.name!r}"
            )
        if not 0 <= params.temperature < math.inf:  # NaN too
            problems.append(f"temperature must be 0 (greedy) or a finite positive number, got {params.temperature}")
        if not 0 < params.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {params.top_p}")
        if params.top_k != -1 and params.top_k < 1:  # the SDK's SamplingParams: -1 for no limit
            problems.append(f"top_k must be -1 (no limit) or at least 1, got {params.top_k}")
        if problems:
            raise LocalBadRequestError("; ".join(problems))
        return max_tokens

    def _stop_rule(self, stop: str | Sequence[str] | Sequence[int] | None) -> StopRule:
        if stop is None:
            return StopRule(self.base.eos_token_ids, ())
        items = [stop] if isinstance(stop, str) else list(stop)
        strings = tuple(item for item in items if isinstance(item, str))
        ids = frozenset(int(item) for item in items if not isinstance(item, str))
        check_tokens(sorted(ids), self.base, "sampling_params.stop")  # else a row that never joins its batch
        if "" in strings:
            raise LocalBadRequestError("Stop strings must not be empty")
        return StopRule(ids, strings)


def trace_request(request: SampleRequest) -> None:
    """When tracing, the request's ``sample.queued`` (until its prefill began) and ``sample.compute`` (prefill and
    decode) spans, inside the span it was submitted from, recorded when it is answered (on the sampler's thread)."""
    tracer = active()
    if tracer is None:
        return
    parent, queued = current(), time.perf_counter_ns()

    def answered(_future: Future[types.SampleResponse]) -> None:
        now = time.perf_counter_ns()
        started = request.started_ns or now
        record(tracer, "sample.queued", parent, queued, started)
        if started < now:
            record(tracer, "sample.compute", parent, started, now, samples=request.num_samples, prompt_tokens=len(request.prompt))

    request.future.add_done_callback(answered)


def _check_last_n(last_n: int | None, length: int) -> None:
    if last_n is not None and not 1 <= last_n <= length - 1:
        raise LocalBadRequestError(f"prompt_logprobs_last_n must be between 1 and {length - 1}, got {last_n}")


def _kv_budget(base: BaseModel) -> Callable[[int], int]:
    """What a sampler's keys/values may hold (given what they hold): the run's plan, else what is free beyond
    training's share (``memory_plan``)."""
    plan, placement = base.plan, base.placement
    if plan is not None:
        planned = plan.rows * plan.context * base.sizes.kv_bytes_per_position
        return lambda held: max(planned, held)
    # what it needs, not ``base``: the slots keep this while their model lives, and base holds that model
    sizes, layer, train_tokens = base.sizes, placement.device_layer, placement.train_tokens_per_micro_batch
    return lambda held: sampler_kv_budget(sizes, layer, held, train_tokens)


def _warm_up(base: BaseModel, slots: DecodeSlots) -> None:
    """Capture the decode steps of the run's planned rows and context (``DecodeSlots.warm_up``)."""
    plan, config = base.plan, base.model.config
    assert plan is not None
    shape = plan.shape
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    one = torch.zeros(1, kv_heads, 1, head_dim, dtype=base.placement.dtype, device=base.placement.device)
    greedy = shape.temperature == 0
    kind: Kinds = (greedy, not greedy, shape.temperature not in (0, 1), shape.truncated and not greedy)
    stops = len(base.eos_token_ids)
    try:
        slots.warm_up(plan.rows, plan.context, stops, [(one, one)] * int(config.num_hidden_layers), base.vocab_size, [kind])
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
    else:
        return
    raise out_of_memory_error(base.placement.device_layer, "the sampler's warm-up", LOWER_ROWS)
