"""The inference surface without HTTP: replies read into OpenAI's and Anthropic's shapes, with a scripted sampler.

The tiny model samples noise, so replies with tool calls and thinking are scripted here: the
sampler returns the tokens of a fixed text (the tiny tokenizer is byte-level), everything else
(rendering, parsing, answers) is the real code.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from tinker import types

from minds_core.envs.render import Renderer
from minds_core.inference import routes
from minds_core.inference.errors import unknown_model
from minds_core.inference.sampling import Policy
from minds_core.inference.surface import Stream, Surface


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


class ScriptedSampler:
    """Answers every sample with the tokens of ``reply`` plus the end of turn; records the prompts."""

    def __init__(self, renderer: Renderer, reply: str) -> None:
        self.tokens = [*renderer.encode(reply), renderer.tokenizer.eos_token_id]
        self.prompts: list[list[int]] = []
        self.params: list[types.SamplingParams] = []

    def sample(self, prompt: types.ModelInput, n: int, params: types.SamplingParams, topk_sample_logprobs: int = 0) -> _Done:
        self.prompts.append(prompt.to_ints())
        self.params.append(params)
        sequence = types.SampledSequence(
            stop_reason="stop", sequence_id="s", _tokens_list=self.tokens, _logprobs_list=[-0.5] * len(self.tokens)
        )
        return _Done(types.SampleResponse(sequences=[sequence] * n))


class OneModel:
    def __init__(self, sampler: ScriptedSampler, renderer: Renderer) -> None:
        self.sampler, self.renderer = sampler, renderer

    def names(self) -> list[str]:
        return ["scripted"]

    def policy(self, model: Any, caller: str) -> Policy:
        if model != "scripted":
            raise unknown_model(model, self.names())
        return Policy(self.sampler, self.renderer, model)


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    from transformers import AutoTokenizer

    from minds_core.backends.local.model.tiny_model import tiny_model_path

    return Renderer(AutoTokenizer.from_pretrained(tiny_model_path()))


def serve(renderer: Renderer, reply: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    surface = Surface(OneModel(ScriptedSampler(renderer, reply), renderer))
    route = routes.find(path)
    assert route is not None
    return routes.answer(surface, route, "POST", json.dumps(body).encode(), "caller")


CALL = 'Let me add.<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
USER = [{"role": "user", "content": "2+3?"}]


def test_a_tool_call_reply_is_answered_as_openai_tool_calls(renderer: Renderer) -> None:
    status, answer = serve(renderer, CALL, "/v1/chat/completions", {"model": "scripted", "messages": USER, "tools": TOOLS})
    assert status == 200
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me add."
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "add" and json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    assert renderer.tokenizer.decode(choice["token_ids"]) == CALL + "<|im_end|>"  # the sampled tokens, end of turn included


def test_without_tools_or_with_tool_choice_none_the_reply_stays_text(renderer: Renderer) -> None:
    for extra in ({}, {"tools": TOOLS, "tool_choice": "none"}):
        _, answer = serve(renderer, CALL, "/v1/chat/completions", {"model": "scripted", "messages": USER, **extra})
        assert answer["choices"][0]["message"]["content"] == CALL and answer["choices"][0]["finish_reason"] == "stop"


def test_thinking_is_reasoning_content(renderer: Renderer) -> None:
    _, answer = serve(renderer, "<think>2 and 3</think>5", "/v1/chat/completions", {"model": "scripted", "messages": USER})
    message = answer["choices"][0]["message"]
    assert message["content"] == "5" and message["reasoning_content"] == "2 and 3"


def test_streamed_tool_calls(renderer: Renderer) -> None:
    body = {"model": "scripted", "messages": USER, "tools": TOOLS, "stream": True}
    _, stream = serve(renderer, CALL, "/v1/chat/completions", body)
    assert isinstance(stream, Stream) and stream.events[-1].data == "[DONE]"
    deltas = [e.data["choices"][0]["delta"] for e in stream.events[:-1]]
    assert deltas[0]["role"] == "assistant" and any(d.get("content") == "Let me add." for d in deltas)
    [calls] = [d["tool_calls"] for d in deltas if d.get("tool_calls")]
    assert calls[0]["index"] == 0 and calls[0]["function"]["name"] == "add"
    assert stream.events[-2].data["choices"][0]["finish_reason"] == "tool_calls"
    assert all(b"data: " in e.encode() for e in stream.events)


def test_a_tool_call_reply_is_an_anthropic_tool_use(renderer: Renderer) -> None:
    body = {
        "model": "scripted",
        "max_tokens": 50,
        "messages": USER,
        "tools": [{"name": "add", "input_schema": {"type": "object"}}],
    }
    _, message = serve(renderer, CALL, "/v1/messages", body)
    assert message["stop_reason"] == "tool_use"
    text, use = message["content"]
    assert text == {"type": "text", "text": "Let me add."}
    assert (
        use["type"] == "tool_use" and use["name"] == "add" and use["input"] == {"a": 2, "b": 3} and use["id"].startswith("toolu_")
    )
    _, stream = serve(renderer, CALL, "/v1/messages", {**body, "stream": True})
    names = [e.name for e in stream.events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    deltas = [e.data["delta"] for e in stream.events if e.name == "content_block_delta"]
    assert deltas[1] == {"type": "input_json_delta", "partial_json": json.dumps({"a": 2, "b": 3})}


def test_a_stop_string_ends_the_text(renderer: Renderer) -> None:
    _, answer = serve(renderer, "one\ntwo", "/v1/completions", {"model": "scripted", "prompt": "x", "stop": "\n"})
    assert answer["choices"][0]["text"] == "one" and answer["choices"][0]["finish_reason"] == "stop"
    _, message = serve(
        renderer, "one\ntwo", "/v1/messages", {"model": "scripted", "max_tokens": 9, "messages": USER, "stop_sequences": ["\n"]}
    )
    assert message["stop_reason"] == "stop_sequence" and message["stop_sequence"] == "\n"


def test_openais_sampling_fields_reach_the_sampler(renderer: Renderer) -> None:
    sampler = ScriptedSampler(renderer, "x")
    surface = Surface(OneModel(sampler, renderer))
    route = routes.find("/v1/chat/completions")
    assert route is not None
    ask = {"model": "scripted", "messages": USER, "n": 3, "temperature": 0.3, "top_p": 0.5, "top_k": 4, "stop": ["\n"]}
    for size in ({"max_completion_tokens": 7, "max_tokens": 9}, {"max_tokens": 9}):
        status, answer = routes.answer(surface, route, "POST", json.dumps({**ask, **size}).encode(), "c")
        assert status == 200 and len(answer["choices"]) == 3, answer
    first, second = sampler.params
    assert (first.max_tokens, second.max_tokens) == (7, 9)  # max_completion_tokens, when given, wins over max_tokens
    assert (first.temperature, first.top_p, first.top_k) == (0.3, 0.5, 4) and first.stop[0] == "\n"
    for field, value in (("top_p", 0), ("max_completion_tokens", 0), ("n", 0)):
        status, answer = routes.answer(surface, route, "POST", json.dumps({**ask, field: value}).encode(), "c")
        assert status == 400 and answer["error"]["param"] == field, answer


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v1/chat/completions", {"messages": USER}, 400, "model is required"),
        ("/v1/chat/completions", {"model": "other", "messages": USER}, 404, "not served here"),
        (
            "/v1/chat/completions",
            {"model": "scripted", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            400,
            "text part",
        ),
        (
            "/v1/chat/completions",
            {"model": "scripted", "messages": USER, "tool_choice": {"type": "function", "function": {"name": "zz"}}},
            400,
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            {
                "model": "scripted",
                "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}],
            },
            400,
            "JSON object",
        ),
        ("/v1/completions", {"model": "scripted", "prompt": "x", "echo": True}, 400, "echo"),
        ("/v1/completions", {"model": "scripted", "prompt": [99999]}, 400, "token ids"),
        ("/v1/messages", {"model": "scripted", "messages": USER}, 400, "max_tokens is required"),
        (
            "/v1/messages",
            {"model": "scripted", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]},
            400,
            "top-level system",
        ),
        ("/inference/v1/generate", {"token_ids": []}, 400, "token_ids"),
    ],
)
def test_bad_requests_say_what_and_where(renderer: Renderer, path: str, body: dict[str, Any], status: int, words: str) -> None:
    got, answer = serve(renderer, "x", path, body)
    message = answer["error"]["message"]
    assert got == status and words in message, message
    if path.startswith("/v1/messages"):
        assert answer["type"] == "error" and answer["error"]["type"] in ("invalid_request_error", "not_found_error")


def test_an_agent_loop_through_capture_is_one_masked_sequence(renderer: Renderer) -> None:
    """A linear agent loop (reply with a tool call, the tool's result, the next reply) re-renders token for token on
    minds-tiny's template: its calls join into one sequence whose sampled tokens are exactly the replies."""
    from minds_core.inference.capture import Capture, trajectory

    sampler = ScriptedSampler(renderer, CALL)
    capture = Capture()
    surface = Surface(capture, on_call=capture.record)
    episode = capture.open(Policy(sampler, renderer, "policy"), max_calls=8)
    route = routes.find("/v1/chat/completions")
    assert route is not None
    messages: list[dict[str, Any]] = [{"role": "user", "content": "2+3?"}]
    for _ in range(2):
        body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
        status, answer = routes.answer(surface, route, "POST", json.dumps(body).encode(), episode.key)
        assert status == 200, answer
        message = answer["choices"][0]["message"]
        messages += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "5"}]
    calls = capture.close(episode)
    [sequence] = trajectory(calls)
    assert sequence.tokens[: len(calls[1].prompt)] == calls[1].prompt
    sampled = [token for token, was in zip(sequence.tokens, sequence.sampled) if was]
    assert sampled == sampler.tokens * 2  # both replies, end of turn included; nothing else is trained on


def test_a_request_without_a_seed_takes_the_policys(renderer: Renderer) -> None:
    sampler = ScriptedSampler(renderer, "x")
    model = OneModel(sampler, renderer)
    seeded = Surface(
        type("Seeded", (), {"names": model.names, "policy": lambda self, m, c: attrs.evolve(model.policy(m, c), seed=77)})()
    )
    route = routes.find("/v1/chat/completions")
    assert route is not None
    for body in ({}, {"seed": 5}):
        routes.answer(seeded, route, "POST", json.dumps({"model": "scripted", "messages": USER, **body}).encode(), "c")
    assert [p.seed for p in sampler.params] == [77, 5]  # the policy's seed, unless the request gives its own


def test_a_prompt_past_the_budget_is_refused_and_a_completion_is_held_within_it(renderer: Renderer) -> None:
    sampler = ScriptedSampler(renderer, "x")
    budget = Policy(sampler, renderer, "policy", context_length=40, max_tokens=16)
    surface = Surface(type("Budget", (), {"names": lambda self: ["policy"], "policy": lambda self, m, c: budget})())
    route = routes.find("/v1/chat/completions")
    assert route is not None
    long = [{"role": "user", "content": "y" * 100}]
    status, answer = routes.answer(surface, route, "POST", json.dumps({"model": "m", "messages": long}).encode(), "c")
    assert status == 400 and "rollout.max_total_tokens" in answer["error"]["message"]
    routes.answer(surface, route, "POST", json.dumps({"model": "m", "messages": USER, "max_tokens": 1000}).encode(), "c")
    # the run's max_tokens caps the client's 1000
    assert len(sampler.prompts[-1]) + 16 <= 40 and sampler.params[-1].max_tokens == 16
    routes.answer(
        surface, route, "POST", json.dumps({"model": "m", "messages": [{"role": "user", "content": "z" * 20}]}).encode(), "c"
    )
    assert sampler.params[-1].max_tokens == 40 - len(sampler.prompts[-1]) < 16  # what room the budget leaves
