"""OpenAI's inference API over a ``Surface``: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Requests and answers are OpenAI's (https://platform.openai.com/docs/api-reference/chat), read and
written as JSON objects, so the official ``openai`` SDK works unmodified. Sampling fields: ``n``,
``temperature``, ``top_p``, ``max_tokens``/``max_completion_tokens``, ``stop``, ``seed``,
``logprobs``/``top_logprobs`` (and vLLM's ``top_k``, ``stop_token_ids``); ``stream: true`` answers
server-sent ``chat.completion.chunk`` / ``text_completion`` events ending in ``data: [DONE]``
(``stream_options.include_usage`` adds a usage chunk). ``tools``/``tool_choice`` render the tools with
the chat template; replies are read for Hermes ``<tool_call>`` blocks by minds' parser and answered
as ``tool_calls`` (``finish_reason: "tool_calls"``); decoding is not constrained.

Extensions, as vLLM writes them: ``prompt_token_ids`` (the rendered prompt) on the answer and
``token_ids`` (every sampled token, the end of turn included) on each choice. Log-probs are the
sampler's own, the ones a run trains with.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from .chat import Reply, call_id, openai_messages, openai_tools, read_reply, render_prompt
from .errors import bad_request
from .fields import Fields
from .sampling import Completion, Policy, SampledCall, SamplingRequest, read_request
from .surface import Event, Stream, Surface

__all__ = ["chat_completions", "completions", "list_models"]


def list_models(surface: Surface, body: dict[str, Any], caller: str) -> dict[str, Any]:
    """``GET /v1/models``: ``{"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}``."""
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "minds"} for name in surface.models.names()],
    }


def sampling_request(fields: Fields, prompt: list[int], top_logprobs: int) -> SamplingRequest:
    """The sampling fields OpenAI's two generation routes share, read from ``fields``."""
    max_tokens = fields.integer("max_completion_tokens", 1, None, None)
    if max_tokens is None:
        max_tokens = fields.integer("max_tokens", 1, None, None)
    return read_request(fields, prompt, max_tokens=max_tokens, top_logprobs=top_logprobs, hottest=2.0)


def _usage(call: SampledCall) -> dict[str, int]:
    completion = sum(len(c.tokens) for c in call.completions)
    return {"prompt_tokens": len(call.prompt), "completion_tokens": completion, "total_tokens": len(call.prompt) + completion}


def text_entry(policy: Policy) -> Callable[[int, float], dict[str, Any]]:
    """A log-prob entry naming its token by its text: ``{"token", "logprob", "bytes"}``."""

    def entry(token: int, logprob: float) -> dict[str, Any]:
        text = policy.renderer.tokenizer.decode([token])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    return entry


def content_logprobs(completion: Completion, entry: Callable[[int, float], dict[str, Any]]) -> dict[str, Any]:
    """``{"content": [{**entry, "top_logprobs": [entry, ...]}]}``, one per sampled token (``entry`` names a token)."""
    tops = completion.top_logprobs or [()] * len(completion.tokens)
    return {
        "content": [
            {**entry(token, logprob), "top_logprobs": [entry(t, lp) for t, lp in top]}
            for token, logprob, top in zip(completion.tokens, completion.logprobs, tops)
        ]
    }


def _openai_calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"id": call_id("call_"), "type": "function", "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
        for call in reply.calls
    ]


def _message(reply: Reply, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content if reply.content or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    return message


def chat_completions(surface: Surface, body: dict[str, Any], caller: str) -> dict[str, Any] | Stream:
    """``POST /v1/chat/completions``: a ``chat.completion``, or its chunks when ``stream`` is true."""
    fields = Fields(body)
    model = fields.required("model")
    messages = openai_messages(body.get("messages"))
    tools = openai_tools(body.get("tools"), body.get("tool_choice"))
    want_logprobs = fields.boolean("logprobs")
    top = fields.integer("top_logprobs", 0, None, 0)
    if top and not want_logprobs:
        raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
    stream = fields.boolean("stream")
    policy, call = surface.sample(
        model, caller, lambda p: sampling_request(fields, render_prompt(p.renderer, messages, tools), top)
    )
    replies = [read_reply(c.text, tools.parse) for c in call.completions]
    calls = [_openai_calls(reply) for reply in replies]
    finishes = ["tool_calls" if made else c.finish for c, made in zip(call.completions, calls)]
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": call.model}
    if stream:
        include_usage = (
            bool((fields.get("stream_options") or {}).get("include_usage"))
            if isinstance(fields.get("stream_options"), dict)
            else False
        )
        return _chat_stream(head, policy, call, replies, calls, finishes, want_logprobs, include_usage)
    choices = [
        {
            "index": i,
            "message": _message(reply, made),
            "logprobs": content_logprobs(completion, text_entry(policy)) if want_logprobs else None,
            "finish_reason": finish,
            "token_ids": list(completion.tokens),
        }
        for i, (completion, reply, made, finish) in enumerate(zip(call.completions, replies, calls, finishes))
    ]
    return {**head, "object": "chat.completion", "choices": choices, "usage": _usage(call), "prompt_token_ids": list(call.prompt)}


def _chat_stream(
    head: dict[str, Any],
    policy: Policy,
    call: SampledCall,
    replies: list[Reply],
    calls: list[list[dict[str, Any]]],
    finishes: list[str],
    want_logprobs: bool,
    include_usage: bool,
) -> Stream:
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> Event:
        return Event({**head, "object": "chat.completion.chunk", "choices": choices, **extra})

    events = []
    for i, (completion, reply, made, finish) in enumerate(zip(call.completions, replies, calls, finishes)):
        first = {"role": "assistant", "content": ""}
        events.append(
            chunk([{"index": i, "delta": first, "logprobs": None, "finish_reason": None}], prompt_token_ids=list(call.prompt))
        )
        if reply.reasoning:
            events.append(
                chunk([{"index": i, "delta": {"reasoning_content": reply.reasoning}, "logprobs": None, "finish_reason": None}])
            )
        logprobs = content_logprobs(completion, text_entry(policy)) if want_logprobs else None
        if reply.content:
            events.append(chunk([{"index": i, "delta": {"content": reply.content}, "logprobs": logprobs, "finish_reason": None}]))
            logprobs = None
        for k, tool_call in enumerate(made):
            delta = {"tool_calls": [{"index": k, **tool_call}]}
            events.append(chunk([{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": None}]))
            logprobs = None
        last = {"index": i, "delta": {}, "logprobs": logprobs, "finish_reason": finish, "token_ids": list(completion.tokens)}
        events.append(chunk([last]))
    if include_usage:
        events.append(chunk([], usage=_usage(call)))
    return Stream([*events, Event("[DONE]")])


def _prompts(policy: Policy, prompt: Any) -> list[list[int]]:
    """``/v1/completions``' ``prompt``: a string, token ids, or an array of either; each as token ids."""
    vocab = len(policy.renderer.tokenizer)

    def ids(tokens: list[Any], where: str) -> list[int]:
        if not tokens or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in tokens):
            raise bad_request(f"{where} must be a non-empty array of token ids between 0 and {vocab - 1}", "prompt")
        return list(tokens)

    if isinstance(prompt, str):
        return [policy.renderer.encode(prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        return [ids(prompt, "prompt")]
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        return [policy.renderer.encode(p) if isinstance(p, str) else ids(p, f"prompt[{i}]") for i, p in enumerate(prompt)]
    raise bad_request("prompt must be a string, an array of token ids, or an array of strings or token-id arrays", "prompt")


def completion_logprobs(policy: Policy, completion: Completion) -> dict[str, Any]:
    """The legacy ``logprobs`` object: ``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``."""
    decode = policy.renderer.tokenizer.decode
    tokens = [decode([t]) for t in completion.tokens]
    offsets, at = [], 0
    for text in tokens:
        offsets.append(at)
        at += len(text)
    tops = None
    if completion.top_logprobs is not None:
        tops = [{decode([t]): lp for t, lp in row} for row in completion.top_logprobs]
    return {"tokens": tokens, "token_logprobs": list(completion.logprobs), "top_logprobs": tops, "text_offset": offsets}


def completions(surface: Surface, body: dict[str, Any], caller: str) -> dict[str, Any] | Stream:
    """``POST /v1/completions``: raw-text (or token-id) prompts, no chat template; a ``text_completion``."""
    fields = Fields(body)
    model = fields.required("model")
    fields.required("prompt")
    if fields.boolean("echo"):
        raise bad_request("echo is not supported: the answer's prompt_token_ids hold the prompt", "echo")
    if fields.get("suffix") is not None:
        raise bad_request("suffix (fill-in-the-middle) is not supported", "suffix")
    if fields.integer("best_of", 1, None, 1) != 1:
        raise bad_request("best_of is not supported: ask for n completions and pick", "best_of")
    top = fields.integer("logprobs", 0, None, None)
    stream = fields.boolean("stream")
    policy = surface.models.policy(model, caller)  # an unknown model is a 404 before the prompt is read
    results: list[tuple[SampledCall, Completion]] = []
    for prompt in _prompts(policy, body["prompt"]):
        policy, call = surface.sample(model, caller, _fixed(fields, prompt, top or 0))
        results += [(call, completion) for completion in call.completions]
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()), "model": policy.name}
    choices = [
        {
            "index": i,
            "text": completion.text,
            "logprobs": completion_logprobs(policy, completion) if top is not None else None,
            "finish_reason": completion.finish,
            "token_ids": list(completion.tokens),
            "prompt_token_ids": list(call.prompt),
        }
        for i, (call, completion) in enumerate(results)
    ]
    prompt_tokens = sum(len(call.prompt) for call in {id(c): c for c, _ in results}.values())
    completion_tokens = sum(len(c.tokens) for _, c in results)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if not stream:
        return {**head, "choices": choices, "usage": usage}
    events = [Event({**head, "choices": [{**choice, "finish_reason": None, "token_ids": []}]}) for choice in choices]
    events += [Event({**head, "choices": [{**choice, "text": "", "logprobs": None}]}) for choice in choices]
    options = fields.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        events.append(Event({**head, "choices": [], "usage": usage}))
    return Stream([*events, Event("[DONE]")])


def _fixed(fields: Fields, prompt: list[int], top: int) -> Callable[[Policy], SamplingRequest]:
    return lambda policy: sampling_request(fields, prompt, top)
