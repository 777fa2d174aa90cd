"""The sampling engine: batched decoding with a KV cache, and prompt log-probs.

All ``num_samples`` sequences share one prefill of the prompt, then decode
together, one forward pass per step; a sequence that stops leaves the batch.
Reported log-probs (sampled tokens, prompt tokens, top-k) are under the
model's own distribution at temperature 1, before top-k/top-p truncation: the
policy's ``log p`` that the RL losses compare against, whatever the
temperature the tokens were drawn at.
"""

from __future__ import annotations

import secrets
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types
from tinker.types.topk_logprobs import MASK_LOGPROB, TopkLogprobs
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from .errors import LocalBadRequestError
from .inputs import check_length, check_tokens
from .lora import AdapterState, LoraSpec
from .models import BaseModel, target_logprobs

__all__ = ["Sampler"]


@dataclass(frozen=True)
class _PromptScores:
    """Log-probs of prompt tokens 1..n-1 (NaN where not scored), and optional top-k per position."""

    logprobs: np.ndarray
    topk: TopkLogprobs | None


@dataclass(frozen=True)
class _StopRule:
    token_ids: frozenset[int]
    strings: tuple[str, ...]


class Sampler:
    """Samples from one fixed model (a base model, or a snapshot of an adapter on it)."""

    def __init__(self, base: BaseModel, model: nn.Module) -> None:
        self.base = base
        self.model = model

    @classmethod
    def for_base(cls, base: BaseModel) -> Sampler:
        """A sampler of the bare base model."""
        return cls(base, base.model)

    @classmethod
    def for_adapter(cls, base: BaseModel, spec: LoraSpec, adapter: AdapterState) -> Sampler:
        """A sampler of ``base`` with ``adapter`` merged into its own copy of the adapted weights.

        The copy comes from (and, once the sampler is garbage-collected, returns to) ``base.merged``.
        """
        model, key = base.merged.acquire(spec, adapter)
        sampler = cls(base, model)
        weakref.finalize(sampler, base.merged.release, key, model)
        return sampler

    @torch.inference_mode()
    def sample(
        self,
        prompt: Sequence[int],
        num_samples: int,
        params: types.SamplingParams,
        *,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> types.SampleResponse:
        """Draw ``num_samples`` continuations of ``prompt``."""
        prompt_ids = self._prompt(prompt)
        max_tokens = self._check(params, num_samples, len(prompt_ids))
        for name, k in (("topk_prompt_logprobs", topk_prompt_logprobs), ("topk_sample_logprobs", topk_sample_logprobs)):
            if k < 0:
                raise LocalBadRequestError(f"{name} must be 0 or more, got {k}")
        score_prompt = include_prompt_logprobs or topk_prompt_logprobs > 0
        out = self.model(input_ids=prompt_ids[None], use_cache=True, logits_to_keep=0 if score_prompt else 1)
        scores = (
            self._scores(prompt_ids, out.logits[0], topk_prompt_logprobs, prompt_logprobs_last_n)
            if score_prompt
            else None
        )
        sequences = self._decode(out, num_samples, params, max_tokens, topk_sample_logprobs)
        return types.SampleResponse(
            sequences=sequences,
            prompt_logprobs_np=scores.logprobs if scores and include_prompt_logprobs else None,
            topk_prompt_logprobs_np=scores.topk if scores else None,
        )

    @torch.inference_mode()
    def prompt_logprobs(self, prompt: Sequence[int], last_n: int | None = None) -> list[float | None]:
        """``[None, log p(t1 | t0), log p(t2 | t0 t1), ...]`` for the whole prompt (or its last ``last_n``)."""
        prompt_ids = self._prompt(prompt)
        logits = self.model(input_ids=prompt_ids[None], use_cache=False).logits[0]
        values = self._scores(prompt_ids, logits, 0, last_n).logprobs
        return [None if np.isnan(v) else float(v) for v in values]

    def _prompt(self, prompt: Sequence[int]) -> torch.Tensor:
        ids = torch.tensor(list(prompt), dtype=torch.int64)
        check_tokens(ids, self.base, "The prompt")
        check_length(len(ids), self.base, "The prompt")
        return ids

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
        if params.temperature < 0:
            problems.append(f"temperature must be 0 (greedy) or more, got {params.temperature}")
        if not 0 < params.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {params.top_p}")
        if problems:
            raise LocalBadRequestError("; ".join(problems))
        return max_tokens

    def _scores(
        self, prompt_ids: torch.Tensor, logits: torch.Tensor, topk: int, last_n: int | None
    ) -> _PromptScores:
        length = len(prompt_ids)
        if last_n is not None and not 1 <= last_n <= length - 1:
            raise LocalBadRequestError(f"prompt_logprobs_last_n must be between 1 and {length - 1}, got {last_n}")
        first = length - last_n if last_n is not None else 1
        logprobs = np.full(length, np.nan, dtype=np.float32)
        logprobs[1:] = target_logprobs(logits[:-1], prompt_ids[1:]).numpy()
        logprobs[:first] = np.nan
        if topk == 0:
            return _PromptScores(logprobs, None)
        top = torch.log_softmax(logits[:-1].float(), dim=-1).topk(min(topk, self.base.vocab_size), dim=-1)
        token_ids = np.zeros((length, topk), dtype=np.int32)
        values = np.full((length, topk), MASK_LOGPROB, dtype=np.float32)
        token_ids[first:, : top.indices.shape[1]] = top.indices[first - 1 :].numpy()
        values[first:, : top.values.shape[1]] = top.values[first - 1 :].numpy()
        return _PromptScores(logprobs, TopkLogprobs(token_ids=token_ids, logprobs=values))

    def _decode(
        self,
        prefill: CausalLMOutputWithPast,
        num_samples: int,
        params: types.SamplingParams,
        max_tokens: int,
        topk: int,
    ) -> list[types.SampledSequence]:
        stop = self._stop_rule(params.stop)
        generator = torch.Generator().manual_seed(params.seed if params.seed is not None else secrets.randbits(63))
        cache = prefill.past_key_values
        if num_samples > 1:
            cache.batch_repeat_interleave(num_samples)
        logits = prefill.logits[:, -1].float().expand(num_samples, -1)
        rows = list(range(num_samples))  # sample index of each row still decoding
        tokens: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        top: list[list[tuple[list[int], list[float]]]] = [[] for _ in rows]
        reasons: list[types.StopReason] = ["length"] * num_samples
        for step in range(max_tokens):
            log_probs = torch.log_softmax(logits, dim=-1)
            chosen = _choose(logits, params, generator)
            chosen_logprobs = log_probs.gather(1, chosen[:, None])[:, 0].tolist()
            if topk:
                top_values, top_ids = log_probs.topk(min(topk, log_probs.shape[1]), dim=-1)
            keep = []
            for row, (sample, token) in enumerate(zip(rows, chosen.tolist(), strict=True)):
                tokens[sample].append(token)
                logprobs[sample].append(chosen_logprobs[row])
                if topk:
                    top[sample].append((top_ids[row].tolist(), top_values[row].tolist()))
                if self._stops(stop, tokens[sample]):
                    reasons[sample] = "stop"
                else:
                    keep.append(row)
            if not keep or step == max_tokens - 1:
                break
            if len(keep) < len(rows):
                cache.batch_select_indices(torch.tensor(keep))
                chosen = chosen[keep]
                rows = [rows[row] for row in keep]
            logits = self.model(input_ids=chosen[:, None], past_key_values=cache, use_cache=True).logits[:, -1].float()
        return [
            types.SampledSequence(
                stop_reason=reasons[i],
                sequence_id=f"local-{uuid.uuid4().hex}",
                tokens_np=np.asarray(tokens[i], dtype=np.int32),
                logprobs_np=np.asarray(logprobs[i], dtype=np.float32),
                topk_logprobs_np=_topk_arrays(top[i], topk) if topk else None,
            )
            for i in range(num_samples)
        ]

    def _stop_rule(self, stop: str | Sequence[str] | Sequence[int] | None) -> _StopRule:
        if stop is None:
            return _StopRule(self.base.eos_token_ids, ())
        items = [stop] if isinstance(stop, str) else list(stop)
        strings = tuple(item for item in items if isinstance(item, str))
        ids = frozenset(int(item) for item in items if not isinstance(item, str))
        if "" in strings:
            raise LocalBadRequestError("Stop strings must not be empty")
        return _StopRule(ids, strings)

    def _stops(self, rule: _StopRule, tokens: list[int]) -> bool:
        """Whether the newest token ends the sequence: a stop id, or it completes a stop string."""
        if tokens[-1] in rule.token_ids:
            return True
        if not rule.strings:
            return False
        # A stop string that just completed lies within its length in tokens (+ slack for
        # multi-byte characters); earlier occurrences would have stopped earlier steps.
        window = max(len(s) for s in rule.strings) + 4
        text = self.base.tokenizer.decode(tokens[-window:])
        return any(s in text for s in rule.strings)


def _choose(logits: torch.Tensor, params: types.SamplingParams, generator: torch.Generator) -> torch.Tensor:
    """Next token per row: greedy at temperature 0, else drawn after temperature, top-k and top-p."""
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits / params.temperature
    if 0 < params.top_k < scaled.shape[-1]:
        kth = scaled.topk(params.top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1:
        ordered, order = scaled.sort(dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        outside = probs.cumsum(dim=-1) - probs >= params.top_p  # mass before this token already covers top_p
        scaled = scaled.scatter(1, order, ordered.masked_fill(outside, float("-inf")))
    return torch.multinomial(scaled.softmax(dim=-1), 1, generator=generator)[:, 0]


def _topk_arrays(rows: list[tuple[list[int], list[float]]], k: int) -> TopkLogprobs:
    token_ids = np.zeros((len(rows), k), dtype=np.int32)
    values = np.full((len(rows), k), MASK_LOGPROB, dtype=np.float32)
    for i, (ids, lps) in enumerate(rows):
        token_ids[i, : len(ids)] = ids
        values[i, : len(lps)] = lps
    return TopkLogprobs(token_ids=token_ids, logprobs=values)
