"""The official ``openai`` and ``anthropic`` SDKs against ``minds serve`` on minds-tiny, unmodified.

Every answer is checked against what the server sampled: the token ids it reports decode to the
text it shows, and the log-probs are the sampler's (finite, one per sampled token).
"""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path

import anthropic
import openai
import pytest
import tinker
from tinker import types

from .conftest import KEY, Served, start_server

pytestmark = pytest.mark.slow

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]


@pytest.fixture(scope="module")
def oai(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key="any-key", max_retries=0)


@pytest.fixture(scope="module")
def claude(served: Served) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=served.url, api_key="any-key", max_retries=0)


def _tokenizer():
    from transformers import AutoTokenizer

    from minds_core.backends.local.model.tiny_model import tiny_model_path

    return AutoTokenizer.from_pretrained(tiny_model_path())


def test_models_lists_the_served_model(oai: openai.OpenAI) -> None:
    assert [model.id for model in oai.models.list()] == ["minds-tiny", "minds-small"]


def test_chat_with_tools_renders_the_calls_and_answers_token_exact(oai: openai.OpenAI) -> None:
    messages = [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "2+3?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    answer = oai.chat.completions.create(
        model="minds-tiny",
        messages=messages,
        tools=TOOLS,
        tool_choice="auto",
        max_tokens=12,
        n=2,
        seed=7,
        logprobs=True,
        top_logprobs=3,
    )
    tokenizer = _tokenizer()
    prompt = tokenizer.decode(answer.prompt_token_ids)
    # minds-tiny's template renders no tools: the past call is shown as the Hermes block the parser reads back
    assert '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>' in prompt
    assert prompt.endswith("<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")
    assert len(answer.choices) == 2
    for choice in answer.choices:
        ids = choice.token_ids
        assert 1 <= len(ids) <= 12
        assert len(choice.logprobs.content) == len(ids)
        assert all(math.isfinite(entry.logprob) and entry.logprob <= 0 for entry in choice.logprobs.content)
        assert all(len(entry.top_logprobs) == 3 for entry in choice.logprobs.content)
        assert choice.finish_reason in ("stop", "length", "tool_calls")
        if choice.finish_reason != "tool_calls":
            assert choice.message.content == tokenizer.decode(ids, skip_special_tokens=True)
    assert answer.usage.prompt_tokens == len(answer.prompt_token_ids)
    assert answer.usage.completion_tokens == sum(len(c.token_ids) for c in answer.choices)


def test_the_logprobs_are_the_models_own(oai: openai.OpenAI, service: tinker.ServiceClient) -> None:
    answer = oai.chat.completions.create(
        model="minds-tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=12, seed=4, logprobs=True
    )
    ids = answer.choices[0].token_ids
    scored = (
        service.create_sampling_client(base_model="minds-tiny")
        .result()
        .compute_logprobs(types.ModelInput.from_ints(answer.prompt_token_ids + ids))
    )
    expected = scored.result()[-len(ids) :]  # the same model's log-probs of the sampled tokens, by a forward pass
    assert [entry.logprob for entry in answer.choices[0].logprobs.content] == pytest.approx(expected, abs=2e-3)


def test_the_same_seed_samples_the_same_tokens(oai: openai.OpenAI) -> None:
    ask = {"model": "minds-tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 10, "seed": 3}
    first, second = (oai.chat.completions.create(**ask) for _ in range(2))
    assert first.choices[0].token_ids == second.choices[0].token_ids


def test_completions_and_their_logprobs(oai: openai.OpenAI) -> None:
    answer = oai.completions.create(model="minds-tiny", prompt=["abc", "xyz"], max_tokens=6, logprobs=2, stop=["\n"])
    assert len(answer.choices) == 2
    assert answer.choices[0].prompt_token_ids == [97, 98, 99]  # the byte-level tokenizer: no chat template here
    for choice in answer.choices:
        assert len(choice.logprobs.token_logprobs) == len(choice.token_ids)
        assert "\n" not in choice.text
    assert answer.usage.completion_tokens == sum(len(c.token_ids) for c in answer.choices)


def test_chat_streams_as_server_sent_events(oai: openai.OpenAI) -> None:
    ask = {"model": "minds-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "seed": 11}
    whole = oai.chat.completions.create(**ask)
    chunks = list(oai.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_openai_error_types(oai: openai.OpenAI, served: Served) -> None:
    with pytest.raises(openai.NotFoundError, match="not served here"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="messages") as bad:
        oai.chat.completions.create(model="minds-tiny", messages=[{"role": "wizard", "content": "hi"}])
    assert bad.value.body["type"] == "invalid_request_error" and bad.value.body["param"] == "messages[0].role"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        oai.chat.completions.create(model="minds-tiny", messages=[{"role": "user", "content": "hi"}], temperature=9)
    with pytest.raises(openai.BadRequestError, match="max_num_samples"):
        oai.chat.completions.create(model="minds-tiny", messages=[{"role": "user", "content": "hi"}], n=100_000)
    request = urllib.request.Request(
        f"{served.url}/v1/chat/completions", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(request)
    assert raw.value.code == 400 and "not JSON" in json.loads(raw.value.read())["error"]["message"]


def test_anthropic_messages_with_tools_and_streaming(claude: anthropic.Anthropic) -> None:
    conversation = [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"}]},
    ]
    tools = [{"name": "add", "description": "Add", "input_schema": {"type": "object"}}]
    ask = {"model": "minds-tiny", "max_tokens": 8, "system": "You add.", "messages": conversation, "tools": tools}
    greedy = {"temperature": 0.0}  # this SDK version takes no temperature argument: sent as the API's own field
    message = claude.messages.create(**ask, extra_body=greedy)
    prompt = _tokenizer().decode(message.prompt_token_ids)
    assert prompt.startswith("<|im_start|>system\nYou add.<|im_end|>")
    assert '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>' in prompt and "<|im_start|>tool\n5" in prompt
    assert message.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert message.usage.input_tokens == len(message.prompt_token_ids) and message.usage.output_tokens == len(message.token_ids)
    assert len(message.logprobs) == len(message.token_ids)
    with claude.messages.stream(**ask, extra_body=greedy) as stream:
        streamed = stream.get_final_message()
    assert [b.text for b in streamed.content] == [b.text for b in message.content]  # greedy: the same reply, whole or streamed
    assert streamed.stop_reason == message.stop_reason
    assert claude.messages.count_tokens(
        model="minds-tiny", system="You add.", messages=conversation, tools=tools
    ).input_tokens == len(message.prompt_token_ids)


def test_anthropic_error_types(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-opus", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError, match="max_tokens") as bad:
        claude.messages.create(model="minds-tiny", max_tokens=0, messages=[{"role": "user", "content": "hi"}])
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError, match="image"):
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
        claude.messages.create(model="minds-tiny", max_tokens=8, messages=[{"role": "user", "content": [image]}])


def test_token_level_generate(served: Served) -> None:
    body = {"token_ids": [257, 104, 105], "sampling_params": {"max_tokens": 5, "logprobs": 2, "n": 2, "seed": 1}}
    request = urllib.request.Request(
        f"{served.url}/inference/v1/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    answer = json.loads(urllib.request.urlopen(request).read())
    assert answer["prompt_token_ids"] == [257, 104, 105] and len(answer["choices"]) == 2
    for choice in answer["choices"]:
        entries = choice["logprobs"]["content"]
        assert [e["token"] for e in entries] == [f"token_id:{t}" for t in choice["token_ids"]]
        assert all(len(e["top_logprobs"]) == 2 for e in entries) and choice["finish_reason"] in ("stop", "length")


def test_off_loopback_rules_hold_the_key(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--model", "minds-tiny", "--api-key", "sekret-key-1", "--max-body-bytes", "20000")
    try:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()
        with pytest.raises(anthropic.AuthenticationError) as refused:
            anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0).messages.create(
                model="minds-tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
            )
        assert "sekret" not in str(refused.value.body)
        good = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sekret-key-1", max_retries=0)
        assert good.chat.completions.create(
            model="minds-tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        ).choices
        with pytest.raises(openai.APIStatusError) as large:  # a body past --max-body-bytes, refused as it is read
            good.chat.completions.create(model="minds-tiny", messages=[{"role": "user", "content": "x" * 30_000}], max_tokens=2)
        assert large.value.status_code == 413 and "max-body-bytes" in large.value.body["message"], large.value.body
    finally:
        assert server.stop() == 0


def test_a_checkpoint_path_is_a_model_of_its_owner_only(served: Served, service: tinker.ServiceClient) -> None:
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=1).result()
    path = trainer.save_weights_for_sampler("for-openai").result().path
    assert path.startswith("tinker://") and "/sampler_weights/" in path
    ask = {"model": path, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 2}
    mine = openai.OpenAI(base_url=f"{served.url}/v1", api_key=KEY, max_retries=0)  # the key that trained it
    answer = mine.chat.completions.create(**ask)
    assert answer.model == path and 1 <= len(answer.choices[0].token_ids) <= 4
    other = openai.OpenAI(base_url=f"{served.url}/v1", api_key="someone-else", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="No checkpoint at"):
        other.chat.completions.create(**ask)
