"""Continuous batching: every pending request of a sampler decodes in one batch of slots on the device.

A request's prompt is prefilled once (requests with the same prompt share it;
distinct prompts pending together share one right-padded forward pass, up to a
token budget), and its ``num_samples`` rows take free decode slots, a copy of
the prompt's keys/values each (an idle batch first gathers the requests that
come within moments). Steps run on the device without a host sync
(``decode_slots``): tokens are drawn there, stop tokens and token limits
checked there. Every ``CHECK_EVERY`` steps (or exactly when the next row
reaches its limit, when no row can stop earlier) the host reads which rows
are done, checks stop strings, answers finished requests, and refills their
slots with waiting rows; when no row waits and the live rows fit a smaller
bucket they move down, so steps run fewer rows.
Reported log-probs (sampled tokens, prompt tokens, top-k) are under the
model's own distribution at temperature 1, before top-k/top-p truncation: the
policy's ``log p`` that the RL losses compare against, whatever the
temperature the tokens were drawn at.
"""

from __future__ import annotations

import queue
import time
import uuid
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import torch
from tinker import types
from tinker.types.topk_logprobs import MASK_LOGPROB, TopkLogprobs
from torch import nn
from transformers import DynamicCache, PreTrainedTokenizerBase

from ..model.accelerator import is_out_of_memory, out_of_memory_error
from ..model.cache_argument import cache_argument, returned_cache
from ..model.head_logprobs import target_logprobs
from ..model.memory_plan import LOWER_ROWS
from .decode_slots import DecodeSlots, Kinds, SlotSettings
from .device_sampling import RowSettings, row_key
from .prompt_targets import PromptTargets

__all__ = ["DecodeBatch", "PromptScores", "SampleRequest", "StopRule", "prompt_scores"]

GATHER_QUIET_SECONDS = 0.005
"""An idle batch that gets a request prefills it, then starts its first step only once this long
has passed since the newest request came (up to ``GATHER_LIMIT_SECONDS`` in all), and prefills the
newcomers together: requests sent together (a client's concurrent calls, over HTTP under ``minds
serve`` too, where they come milliseconds apart) then decode together, rather than joining a running
batch one by one, each a step later. A lone request whose prefill outlasts the quiet period starts at
once; while the batch waits it holds no lock, so the handlers of requests on their way run freely."""

GATHER_LIMIT_SECONDS = 0.05
"""The longest an idle batch gathers before its first step, however steadily requests keep coming."""

CHECK_EVERY = 8
"""Decode steps between the host's looks at the batch while some row may stop before its limit (a stop
token or string): a stopped row computes on for at most this many steps, and a waiting row joins after as many."""


@dataclass(frozen=True)
class PromptScores:
    """Log-probs of prompt tokens 1..n-1 (NaN where not scored), and optional top-k per position."""

    logprobs: np.ndarray
    topk: TopkLogprobs | None


@dataclass(frozen=True)
class StopRule:
    """What ends a sample: one of ``token_ids``, or a completed one of ``strings``."""

    token_ids: frozenset[int]
    strings: tuple[str, ...]

    def ends(self, tokens: list[int], tokenizer: PreTrainedTokenizerBase) -> bool:
        """Whether the newest token ends the sequence."""
        if tokens[-1] in self.token_ids:
            return True
        if not self.strings:
            return False
        # A stop string that just completed lies within its length in tokens (+ slack for
        # multi-byte characters); earlier occurrences would have stopped earlier steps.
        window = max(len(s) for s in self.strings) + 4
        text = tokenizer.decode(tokens[-window:])
        return any(s in text for s in self.strings)


@dataclass
class SampleRequest:
    """A validated sampling request, its outputs as they grow, and the future they resolve."""

    prompt: torch.Tensor
    num_samples: int
    params: types.SamplingParams
    max_tokens: int
    stop: StopRule
    seed: int
    topk: int
    topk_prompt: int
    include_prompt_logprobs: bool
    last_n: int | None
    future: Future[types.SampleResponse]
    targets: PromptTargets | None = None
    queued_at: float = field(default_factory=time.monotonic)
    #: ``perf_counter_ns`` when its prefill began (None: still queued); the end of its ``sample.queued`` span
    started_ns: int | None = None
    scores: PromptScores | None = None
    target_scores: types.TensorData | None = None
    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    top: list[list[tuple[list[int], list[float]]]] = field(default_factory=list)
    reasons: list[types.StopReason] = field(default_factory=list)
    live: int = 0

    @property
    def score_prompt(self) -> bool:
        """Whether the response carries prompt log-probs, their top-k or target log-probs."""
        return self.include_prompt_logprobs or self.topk_prompt > 0 or self.targets is not None

    def response(self) -> types.SampleResponse:
        """The finished request's response."""
        return types.SampleResponse(
            sequences=[
                types.SampledSequence(
                    stop_reason=self.reasons[i],
                    sequence_id=f"local-{uuid.uuid4().hex}",
                    tokens_np=np.asarray(self.tokens[i], dtype=np.int32),
                    logprobs_np=np.asarray(self.logprobs[i], dtype=np.float32),
                    topk_logprobs_np=_topk_arrays(self.top[i], self.topk) if self.topk else None,
                )
                for i in range(self.num_samples)
            ],
            prompt_logprobs_np=self.scores.logprobs if self.scores and self.include_prompt_logprobs else None,
            topk_prompt_logprobs_np=self.scores.topk if self.scores else None,
            target_prompt_logprobs=self.target_scores,
        )


@dataclass
class _Row:
    """A decode slot's occupant: sample ``sample`` of ``request``, joined ``steps`` steps ago."""

    request: SampleRequest
    sample: int
    prompt_length: int
    steps: int = 0
    checked: int = 0  # of its tokens, those checked for stop strings

    @property
    def remaining(self) -> int:
        """Steps until the row reaches its token limit."""
        return self.request.max_tokens - self.steps


@dataclass
class _Prefilled:
    """A prefilled prompt whose rows wait for decode slots: its keys/values and next-token logits."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    logits: torch.Tensor
    rows: deque[tuple[SampleRequest, int]]

    @property
    def length(self) -> int:
        return self.kv[0][0].shape[-2]


class DecodeBatch:
    """The running decode batch of one sampler: pending requests, prefilled rows waiting for slots, and the rows
    in the model's decode slots."""

    def __init__(
        self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, tokens_per_pass: int, settings: SlotSettings
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.tokens_per_pass = tokens_per_pass  # padded prompt tokens (rows x longest) prefilled in one pass
        self.pending: queue.SimpleQueue[SampleRequest] = queue.SimpleQueue()
        self.slots = DecodeSlots.for_model(model, settings)
        self.slots.refresh()
        self._waiting: deque[_Prefilled] = deque()
        self._rows: list[_Row | None] = []  # per slot
        self._device = next(model.parameters()).device

    @torch.inference_mode()
    def run(self) -> None:
        """Decode until no request is pending or running. A failure fails every request it touched."""
        with self.slots.lock:
            try:
                while self._admit() or self._waiting or self._occupied():
                    self._place()
                    self._decode()
                    self._retire()
            except BaseException as caught:
                exc = caught
                if is_out_of_memory(caught):
                    exc = out_of_memory_error(self.slots.settings.accelerator, "a decode batch", LOWER_ROWS)
                touched = [row.request for row in self._occupied()]
                touched += [request for prompt in self._waiting for request, _ in prompt.rows]
                for request in {id(r): r for r in touched}.values():
                    if not request.future.done():
                        request.future.set_exception(exc)
                self.slots.leave([slot for slot, row in enumerate(self._rows) if row is not None])
                self._rows, self._waiting = [], deque()
                if exc is caught:
                    raise
                raise exc from None

    def _occupied(self) -> list[_Row]:
        return [row for row in self._rows if row is not None]

    def _admit(self) -> bool:
        """Prefill every pending request (its rows then wait for slots); whether any came.

        An idle batch then gathers the requests that come moments later (see
        ``GATHER_QUIET_SECONDS``) and prefills them together.
        """
        requests = self._take_pending()
        if not requests:
            return False
        gathering = not self._occupied()  # else a running batch: newcomers join between its steps
        self._prefill_all(requests)
        if not gathering:
            return True
        limit = min(request.queued_at for request in requests) + GATHER_LIMIT_SECONDS
        quiet_until = max(request.queued_at for request in requests) + GATHER_QUIET_SECONDS
        newcomers: list[SampleRequest] = []
        while (wait := min(quiet_until, limit) - time.monotonic()) > 0:
            try:
                came = [self.pending.get(timeout=wait), *self._take_pending()]
            except queue.Empty:
                break
            newcomers += came
            quiet_until = max(request.queued_at for request in came) + GATHER_QUIET_SECONDS
        newcomers += self._take_pending()
        if newcomers:
            self._prefill_all(newcomers)
        return True

    def _prefill_all(self, requests: list[SampleRequest]) -> None:
        """Prefill ``requests``: one pass per distinct prompt whose log-probs are asked for, the other
        prompts together in as few passes as ``tokens_per_pass`` allows. A failed pass fails only the
        requests of its prompts."""
        by_prompt: dict[tuple[int, ...], list[SampleRequest]] = {}
        started = time.perf_counter_ns()
        for request in requests:
            request.started_ns = started
            by_prompt.setdefault(tuple(request.prompt.tolist()), []).append(request)
        groups = sorted(by_prompt.values(), key=lambda group: len(group[0].prompt), reverse=True)
        passes: list[list[list[SampleRequest]]] = []
        together: list[list[SampleRequest]] = []  # longest first: a pass's first prompt is its longest
        for group in groups:
            if any(request.score_prompt for request in group):
                passes.append([group])
                continue
            if together and (len(together) + 1) * len(together[0][0].prompt) > self.tokens_per_pass:
                passes.append(together)
                together = []
            together.append(group)
        if together:
            passes.append(together)
        for groups_of_pass in passes:
            try:
                self._prefill(groups_of_pass)
            except Exception as exc:  # noqa: BLE001 - these prompts' requests fail; the batch goes on
                for group in groups_of_pass:
                    for request in group:
                        request.future.set_exception(exc)

    def _take_pending(self) -> list[SampleRequest]:
        requests = []
        while True:
            try:
                requests.append(self.pending.get_nowait())
            except queue.Empty:
                return requests

    def _prefill(self, groups: list[list[SampleRequest]]) -> None:
        """One forward pass over the prompts of ``groups`` (each group: the requests of one prompt), right-padded:
        under causal attention no prompt token sees the padding after it. Logits of every position are kept
        only for a single prompt that is scored."""
        prompts = [group[0].prompt for group in groups]
        lengths = [len(prompt) for prompt in prompts]
        ids = torch.zeros(len(prompts), max(lengths), dtype=torch.int64)
        for row, prompt in enumerate(prompts):
            ids[row, : len(prompt)] = prompt
        score = any(request.score_prompt for group in groups for request in group)
        ends = sorted(set(lengths))  # the positions whose logits start the decode: each prompt's last
        keep = 0 if score else torch.tensor([end - 1 for end in ends], device=self._device)
        ids = ids.to(self._device)
        out = self.model(input_ids=ids, **cache_argument(DynamicCache()), logits_to_keep=keep)
        layers = returned_cache(out).layers
        for row, (group, length) in enumerate(zip(groups, lengths, strict=True)):
            logits = out.logits[row, length - 1] if score else out.logits[row, ends.index(length)]
            for request in group:
                if request.include_prompt_logprobs or request.topk_prompt:
                    prompt_ids = ids[row, :length]
                    request.scores = prompt_scores(prompt_ids, out.logits[row], request.topk_prompt, request.last_n)
                if request.targets is not None:
                    request.target_scores = request.targets.scores(out.logits[row])
            prompt_kv = [
                (layer.keys[row : row + 1, :, :length], layer.values[row : row + 1, :, :length]) for layer in layers
            ]
            rows: deque[tuple[SampleRequest, int]] = deque()
            for request in group:
                request.tokens = [[] for _ in range(request.num_samples)]
                request.logprobs = [[] for _ in range(request.num_samples)]
                request.top = [[] for _ in range(request.num_samples)]
                request.reasons = ["length"] * request.num_samples
                request.live = request.num_samples
                rows.extend((request, sample) for sample in range(request.num_samples))
            self._waiting.append(_Prefilled(prompt_kv, logits, rows))

    def _place(self) -> None:
        """Give waiting rows the free slots (growing the slots as far as they may), lowest slots first."""
        if not self._waiting:
            return
        occupied = self._occupied()
        waiting = [request for prompt in self._waiting for request, _ in prompt.rows]
        requests = [*waiting, *(row.request for row in occupied)]
        slots = self.slots.reserve(
            rows=len(occupied) + len(waiting),
            capacity=max(len(request.prompt) + request.max_tokens for request in requests),
            stops=max(len(request.stop.token_ids) for request in requests),
            like=self._waiting[0].kv,
            vocab=self._waiting[0].logits.shape[-1],
        )
        self._rows += [None] * (slots - len(self._rows))
        free = [slot for slot, row in enumerate(self._rows) if row is None]
        while self._waiting and free:
            prompt = self._waiting[0]
            taken, free = free[: len(prompt.rows)], free[len(prompt.rows) :]
            joining = [prompt.rows.popleft() for _ in taken]
            settings = [
                RowSettings(
                    temperature=request.params.temperature,
                    top_k=request.params.top_k,
                    top_p=request.params.top_p,
                    key=row_key(request.seed, sample),
                    stop_ids=tuple(request.stop.token_ids),
                    limit=request.max_tokens,
                )
                for request, sample in joining
            ]
            try:
                self.slots.join(taken, prompt.kv, prompt.logits, settings)
            except BaseException as exc:  # these rows are in no slot nor waiting: ``run`` would not fail them
                for request, _ in joining:
                    if not request.future.done():
                        request.future.set_exception(exc)
                raise
            for slot, (request, sample) in zip(taken, joining, strict=True):
                self._rows[slot] = _Row(request, sample, prompt.length)
            if not prompt.rows:
                self._waiting.popleft()

    def _decode(self) -> None:
        """Steps for every occupied slot until a row may have finished (its limit, or ``CHECK_EVERY`` steps while
        a row may stop earlier) or a request comes."""
        occupied = self._occupied()
        if not occupied:
            return
        requests = {id(row.request): row.request for row in occupied}.values()
        temperatures = {request.params.temperature for request in requests}
        vocab = self.slots.draws.vocab
        kinds: Kinds = (
            0 in temperatures,
            bool(temperatures - {0}),
            bool(temperatures - {0, 1}),
            any(
                request.params.temperature and (0 < request.params.top_k < vocab or request.params.top_p < 1)
                for request in requests
            ),
        )
        top = max(request.topk for request in requests)
        rows = self.slots.bucket(max(slot for slot, row in enumerate(self._rows) if row is not None) + 1)
        steps = min(row.remaining for row in occupied)
        if any(request.stop.token_ids or request.stop.strings for request in requests):
            steps = min(steps, CHECK_EVERY)
        positions = {row.prompt_length + row.steps for row in occupied}  # where the next step feeds each row
        fed, aligned = max(positions), len(positions) == 1
        last = all(row.remaining == steps for row in occupied) and not self._waiting  # then all rows end
        taken = 0
        while taken < steps and not (taken and not self.pending.empty()):  # a newcomer ends the run of steps
            feed = not (last and taken == steps - 1)
            self.slots.step(rows, fed + taken + 1, kinds, top, feed=feed, aligned=aligned)
            taken += 1
        for row in occupied:
            row.steps += taken

    def _retire(self) -> None:
        """Answer the rows that finished (done on the device, or a stop string completed); free their slots, and
        move rows down when the rest fit a smaller bucket and none wait."""
        occupied = {slot: row for slot, row in enumerate(self._rows) if row is not None}
        if not occupied:
            return
        done, counts = self.slots.progress(max(occupied) + 1)
        finished = {slot: int(counts[slot]) for slot in occupied if done[slot]}  # slot -> its tokens
        by_string = set()
        if strings := [slot for slot, row in occupied.items() if row.request.stop.strings]:
            tokens, _ = self.slots.read(strings, int(max(counts[slot] for slot in strings)))
            for slot, sampled in zip(strings, tokens, strict=True):
                row, count = occupied[slot], int(counts[slot])
                stop = row.request.stop
                ends = (n for n in range(row.checked + 1, count + 1) if stop.ends(sampled[:n].tolist(), self.tokenizer))
                row.checked = count
                if (end := next(ends, None)) is not None:
                    finished[slot] = end
                    by_string.add(slot)
        if finished:
            self._answer(occupied, finished, by_string)
        self._compact()

    def _answer(self, occupied: dict[int, _Row], finished: dict[int, int], by_string: set[int]) -> None:
        """Record the rows in ``finished`` (slot -> its tokens; ``by_string``: those a stop string ended) in their
        requests; resolve finished requests."""
        slots = list(finished)
        top = max(occupied[slot].request.topk for slot in slots)
        arrays = self.slots.read(slots, max(finished.values()), top)
        for i, slot in enumerate(slots):
            row, length = occupied[slot], finished[slot]
            request, sample = row.request, row.sample
            tokens = arrays[0][i, :length].tolist()
            request.tokens[sample] = tokens
            request.logprobs[sample] = arrays[1][i, :length].tolist()
            if request.topk:
                request.top[sample] = [
                    (arrays[2][i, n, : request.topk].tolist(), arrays[3][i, n, : request.topk].tolist())
                    for n in range(length)
                ]
            stopped = tokens[-1] in request.stop.token_ids or slot in by_string
            request.reasons[sample] = "stop" if stopped else "length"
            request.live -= 1
            if not request.live:
                request.future.set_result(request.response())
            self._rows[slot] = None
        self.slots.leave(slots)

    def _compact(self) -> None:
        """With no row waiting, move the rows of high slots into free low ones when that shrinks the bucket."""
        occupied = [slot for slot, row in enumerate(self._rows) if row is not None]
        if self._waiting or not occupied or self.slots.bucket(len(occupied)) >= self.slots.bucket(occupied[-1] + 1):
            return
        source = [slot for slot in occupied if slot >= len(occupied)]
        target = [slot for slot in range(len(occupied)) if self._rows[slot] is None]
        self.slots.move(source, target)
        for src, dst in zip(source, target, strict=True):
            self._rows[dst], self._rows[src] = self._rows[src], None


def prompt_scores(prompt_ids: torch.Tensor, logits: torch.Tensor, topk: int, last_n: int | None) -> PromptScores:
    """Log-probs (and top-k) of prompt tokens from the prompt's logits ``[P, V]``, the last ``last_n`` or all."""
    length = len(prompt_ids)
    first = length - last_n if last_n is not None else 1
    logprobs = np.full(length, np.nan, dtype=np.float32)
    logprobs[1:] = target_logprobs(logits[:-1], prompt_ids[1:]).cpu().numpy()
    logprobs[:first] = np.nan
    if topk == 0:
        return PromptScores(logprobs, None)
    top = torch.log_softmax(logits[:-1].float(), dim=-1).topk(min(topk, logits.shape[-1]), dim=-1)
    token_ids = np.zeros((length, topk), dtype=np.int32)
    values = np.full((length, topk), MASK_LOGPROB, dtype=np.float32)
    token_ids[first:, : top.indices.shape[1]] = top.indices[first - 1 :].cpu().numpy()
    values[first:, : top.values.shape[1]] = top.values[first - 1 :].cpu().numpy()
    return PromptScores(logprobs, TopkLogprobs(token_ids=token_ids, logprobs=values))


def _topk_arrays(rows: list[tuple[list[int], list[float]]], k: int) -> TopkLogprobs:
    token_ids = np.zeros((len(rows), k), dtype=np.int32)
    values = np.full((len(rows), k), MASK_LOGPROB, dtype=np.float32)
    for i, (ids, lps) in enumerate(rows):
        token_ids[i, : len(ids)] = ids
        values[i, : len(lps)] = lps
    return TopkLogprobs(token_ids=token_ids, logprobs=values)
