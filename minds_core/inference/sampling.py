"""One sampling call of the inference surfaces: token ids in, completions with their log-probs out.

Every surface (OpenAI, Anthropic, token-level) renders its request to a ``SamplingRequest``
and samples it with ``sample`` from a ``Policy``: a tinker ``SamplingClient`` (local or hosted,
a base model, a checkpoint or a run's current policy) with the renderer of its model. The
request is bounded by ``ServeLimits`` as the Tinker routes' samples are; what comes back is a
``SampledCall``, the token-exact record capture keeps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs
import tinker
from tinker import types

from minds_core.envs.render import Renderer
from minds_core.http.errors import HttpError
from minds_core.http.limits import ServeLimits

from .errors import ApiError, bad_request
from .fields import Fields

__all__ = ["MAX_STOPS", "Completion", "Policy", "SampledCall", "SamplingRequest", "read_request", "sample"]

#: Most stop strings one request may give.
MAX_STOPS = 16


@attrs.frozen
class Policy:
    """What a request samples from."""

    sampler: Any  #: a tinker ``SamplingClient`` (``sample(prompt, n, params, topk_sample_logprobs=k)``)
    renderer: Renderer  #: the chat template and tokenizer of the sampler's model
    name: str  #: the model name answers carry (the name the client asked for)
    version: int | None = None  #: the run's policy version that samples (None outside a run)
    context_length: int | None = (
        None  #: the longest prompt plus completion taken (the model's context, a run's budget; None: unknown)
    )
    max_tokens: int | None = None  #: most tokens one completion may sample (a run's sampling.max_tokens; None: the limits')
    seed: int | None = None  #: the seed of a request that sends none (a seeded run's episode; None: unseeded)


@attrs.frozen
class SamplingRequest:
    """A protocol-neutral sampling request (each field as OpenAI names it)."""

    prompt: tuple[int, ...]  #: the rendered prompt's token ids
    n: int = 1  #: completions of the prompt
    max_tokens: int | None = None  #: most tokens each completion samples (None: as many as allowed)
    temperature: float = 1.0  #: 0 samples greedily
    top_p: float = 1.0  #: nucleus sampling's probability mass
    top_k: int = -1  #: only the k likeliest tokens (-1: all)
    seed: int | None = None  #: the same seed and request sample the same tokens
    stop: tuple[str, ...] = ()  #: strings that end a completion (the end of turn always does)
    stop_token_ids: tuple[int, ...] = ()  #: token ids that end a completion (the end of turn always does)
    top_logprobs: int = 0  #: per sampled position, the log-probs of this many likeliest tokens


def read_request(
    fields: Fields, prompt: Sequence[int], *, max_tokens: int | None, top_logprobs: int, hottest: float
) -> SamplingRequest:
    """The sampling fields every generation route reads alike (``n``, ``temperature`` up to ``hottest``,
    ``top_p``, ``top_k``, ``seed``, ``stop``, ``stop_token_ids``), with what each route reads its own way."""
    return SamplingRequest(
        prompt=tuple(prompt),
        n=fields.integer("n", 1, None, 1),
        max_tokens=max_tokens,
        temperature=fields.number("temperature", 0.0, hottest, 1.0),
        top_p=fields.number("top_p", 1e-9, 1.0, 1.0),
        top_k=fields.integer("top_k", -1, None, -1) or -1,
        seed=fields.integer("seed", -(1 << 63), (1 << 63) - 1, None),
        stop=tuple(fields.strings("stop", MAX_STOPS)),
        stop_token_ids=tuple(fields.array("stop_token_ids", [])),
        top_logprobs=top_logprobs,
    )


@attrs.frozen
class Completion:
    """One sampled completion."""

    tokens: tuple[int, ...]  #: every sampled token id (a stop token included)
    logprobs: tuple[float, ...]  #: the sampler's log-prob of each sampled token
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] | None  #: per position, (token id, log-prob) likeliest first
    text: str  #: the decoded text (special tokens dropped), cut before the stop string that ended it
    finish: str  #: "stop" (a stop token or string) or "length" (max_tokens or the context ran out)
    stop_string: str | None = None  #: the stop string that ended it, when one did


@attrs.frozen
class SampledCall:
    """One served call, token-exact: what capture records and every answer's token ids come from."""

    prompt: tuple[int, ...]  #: the prompt's token ids
    completions: tuple[Completion, ...]  #: the completions, in choice order
    version: int | None  #: the policy version that sampled them
    model: str  #: the model name the answer carries


def _limit_tokens(policy: Policy, request: SamplingRequest, limits: ServeLimits) -> int:
    """Tokens each completion may sample: the request's, within the policy's cap and the model's context."""
    allowed = policy.max_tokens or limits.max_new_tokens
    if policy.context_length is not None:
        room = policy.context_length - len(request.prompt)
        if room < 1:
            raise bad_request(
                f"the prompt is {len(request.prompt)} tokens, and at most {policy.context_length} tokens of prompt and "
                "completion are taken here (the model's context, or in a run rollout.max_total_tokens): shorten the conversation",
                "messages",
            )
        allowed = min(allowed, room)
    return min(request.max_tokens, allowed) if request.max_tokens is not None else allowed


def _stop(policy: Policy, request: SamplingRequest) -> list[str] | list[int] | None:
    """The sampler's stop list: the request's strings or ids, and always the model's end of turn."""
    if request.stop and request.stop_token_ids:
        raise bad_request("give stop strings or stop_token_ids, not both", "stop_token_ids")
    tokenizer = policy.renderer.tokenizer
    if request.stop:
        return [*request.stop, *[t for t in [tokenizer.eos_token] if t and t not in request.stop]]
    if request.stop_token_ids:
        eos = tokenizer.eos_token_id
        return [*request.stop_token_ids, *([eos] if eos is not None and eos not in request.stop_token_ids else [])]
    return None


def sample(policy: Policy, request: SamplingRequest, limits: ServeLimits) -> SampledCall:
    """Sample ``request`` from ``policy`` (blocking); an ``ApiError`` says what the request cannot have."""
    if not request.prompt:
        raise bad_request("the prompt is empty: give at least one message or token", "prompt")
    params = types.SamplingParams(
        max_tokens=_limit_tokens(policy, request, limits),
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        seed=request.seed if request.seed is not None else policy.seed,
        stop=_stop(policy, request),
    )
    prompt = types.ModelInput.from_ints(list(request.prompt))
    try:
        limits.check_sample(
            types.SampleRequest(
                prompt=prompt, num_samples=request.n, sampling_params=params, topk_sample_logprobs=request.top_logprobs
            )
        )
    except HttpError as exc:
        detail = re.sub(r"^num_samples\b", "n", exc.detail).replace("topk_sample_logprobs", "top_logprobs")
        raise ApiError(exc.status, detail) from None
    try:
        response = policy.sampler.sample(prompt, request.n, params, topk_sample_logprobs=request.top_logprobs).result()
    except tinker.APIStatusError as exc:
        raise ApiError(exc.status_code, str(getattr(exc, "message", exc))) from None
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    completions = tuple(_completion(policy.renderer, sequence, request.stop) for sequence in response.sequences)
    return SampledCall(request.prompt, completions, policy.version, policy.name)


def _completion(renderer: Renderer, sequence: Any, stops: Sequence[str]) -> Completion:
    tokens = tuple(int(t) for t in sequence.tokens)
    logprobs = tuple(float(lp) for lp in sequence.logprobs or [])
    if len(logprobs) != len(tokens):
        raise ApiError(500, "the sampler returned tokens without one log-probability each")
    top = sequence.topk_logprobs
    text = renderer.decode(tokens)
    finish = "stop" if sequence.stop_reason == "stop" else "length"
    hit = min(((text.find(s), s) for s in stops if s in text), default=None)
    if hit is not None:
        text, finish = text[: hit[0]], "stop"
    return Completion(
        tokens,
        logprobs,
        None if top is None else tuple(tuple((int(i), float(lp)) for i, lp in (row or ())) for row in top),
        text,
        finish,
        None if hit is None else hit[1],
    )


#: What each further turn of a seeded conversation adds to its seed (a prime far from the offsets of a
#: group's rollouts and their retries), so that every turn samples its own draws and the first keeps the seed.
TURN_SEED_STRIDE = 1_000_003


def turn_seed(seed: int | None, turn: int) -> int | None:
    """The seed of a seeded conversation's ``turn``-th sampled reply (0 first, which keeps ``seed``).

    A seed draws the same noise for any prompt: replies to prompts that end alike would come out
    alike, so each turn samples with its own seed (None stays None: unseeded)."""
    return None if seed is None else seed + TURN_SEED_STRIDE * turn
