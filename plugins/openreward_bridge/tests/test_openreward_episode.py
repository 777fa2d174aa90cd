"""Episodes driven by hand (initial_observation + step) against the real ORS server."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from minds_core.contract.environment import Context
from minds_openreward.environment import OpenRewardEnvironment, load_environment
from minds_openreward.episode import OpenRewardEpisode

ADD_TWO = '<tool_call>{"name": "add", "arguments": {"value": 2}}</tool_call>'


def context(renderer: Any = None) -> Context:
    return Context(sampler=None, tokenizer=None, service=None, renderer=renderer, base_model="none")


async def opened(env: OpenRewardEnvironment, split: str = "train", renderer: Any = None) -> tuple[OpenRewardEpisode, list[dict]]:
    episode = env.episode(env.tasks(split)[0], context(renderer))
    return episode, await episode.initial_observation()


@pytest.mark.slow
async def test_tool_calls_run_and_come_back_as_the_next_turn(ors_server) -> None:
    env = load_environment(name="toollab", base_url=ors_server.url)
    episode, messages = await opened(env)
    system, user = messages
    assert system["role"] == "system" and user == {"role": "user", "content": "Reach 3 with add."}
    for name in ("add", "peek", "explode", "stall"):
        assert f'"name":"{name}"' in system["content"]
    assert '"name":"answer"' not in system["content"]  # the terminal tool stays hidden
    assert "reply without any tool call" in system["content"]

    first = await episode.step(f"I will add. {ADD_TWO}")
    assert (first.reward, first.done) == (0.5, False)
    assert first.messages == [{"role": "user", "content": "<tool_response>\ntotal=2\n</tool_response>"}]

    second = await episode.step(f'{ADD_TWO}<tool_call>{{"name": "peek"}}</tool_call>')
    assert second.reward == 0.5
    assert "total=4" in second.messages[0]["content"] and "target=3" in second.messages[0]["content"]

    bad = await episode.step('<tool_call>{"name": "teleport", "arguments": {}}</tool_call><tool_call>{nope</tool_call>')
    assert (bad.reward, bad.done) == (None, False)
    text = bad.messages[0]["content"]
    assert "'teleport' was rejected (not_found)" in text
    assert "could not be read: not valid JSON" in text

    invalid = await episode.step('<tool_call>{"name": "add", "arguments": {"value": "two"}}</tool_call>')
    assert "rejected (input_validation)" in invalid.messages[0]["content"]

    answer = "the total is four"
    last = await episode.step(answer)
    assert last.done and last.messages == []
    assert last.reward == ors_server.lab.answer_reward(answer)
    outcome = episode.outcome()
    assert outcome.reward == pytest.approx(0.5 + 0.5 + ors_server.lab.answer_reward(answer))
    assert 0 < outcome.metrics.pop("ors_seconds") < 5
    assert outcome.metrics == {
        "tool_calls": 5.0,
        "malformed_calls": 1.0,
        "rejected_calls": 2.0,
        "no_tool_call": 0.0,
        "capacity_waits": 0.0,
        "finished": 1.0,
    }
    census = ors_server.lab.census
    assert (census.created, census.live) == (1, 1)
    await episode.close()
    await episode.close()  # idempotent
    assert (census.live, census.torn_down) == (0, 1)
    await env.close()


# The SDK builds the request coroutine before it checks that the session is dead, and drops it.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:coroutine 'resumable_sse' was never awaited:RuntimeWarning")
async def test_a_failing_tool_fails_the_rollout_and_kills_the_session(ors_server) -> None:
    from openreward.api.errors import SessionTerminatedError, ToolFailed  # the SDK: seconds to import, here only

    env = load_environment(name="toollab", base_url=ors_server.url)
    episode, _ = await opened(env)
    with pytest.raises(ToolFailed, match="caught fire"):
        await episode.step('<tool_call>{"name": "explode", "arguments": {}}</tool_call>')
    with pytest.raises(SessionTerminatedError):
        await episode.step(ADD_TWO)
    await episode.close()
    assert ors_server.lab.census.live == 0
    await env.close()
    del episode
    gc.collect()  # let the dropped coroutine warn here, where the filter applies


@pytest.mark.slow
async def test_a_timed_out_episode_still_ends_its_session(ors_server) -> None:
    env = load_environment(name="toollab", base_url=ors_server.url)
    episode, _ = await opened(env)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(episode.step('<tool_call>{"name": "stall", "arguments": {}}</tool_call>'), 0.3)
    await episode.close()
    assert ors_server.lab.census.live == 0 and ors_server.lab.census.torn_down == 1
    assert (env.limiter.in_flight, env.limiter.open) == (0, 0)
    await env.close()


@pytest.mark.slow
async def test_without_a_terminal_tool_plain_text_gets_feedback(ors_server) -> None:
    env = load_environment(name="maze", base_url=ors_server.url, reward_reduction="max")
    assert env.terminal is None and [t.info["spec"] for t in env.tasks("train")] == [{"exit": "north"}, {"exit": "east"}]
    episode, messages = await opened(env)
    assert "reply without any tool call" not in messages[0]["content"]
    chat = await episode.step("hello?")
    assert not chat.done and chat.reward is None
    assert chat.messages[0]["content"].startswith("No tool call found. Call one of the tools (look, move)")
    wrong = await episode.step('<tool_call>{"name": "move", "arguments": {"direction": "south"}}</tool_call>')
    assert wrong.reward == pytest.approx(-0.1)
    right = await episode.step(
        '<tool_call>{"name": "move", "arguments": {"direction": "north"}}</tool_call>'
        '<tool_call>{"name": "look", "arguments": {}}</tool_call>'
    )
    assert right.done and right.reward == 1.0
    outcome = episode.outcome()
    assert outcome.reward == 1.0  # max of (-0.1, 1.0)
    assert outcome.metrics["tool_calls"] == 2.0  # the call after the finishing one is not made
    assert outcome.metrics["no_tool_call"] == 1.0
    await episode.close()
    await env.close()


@pytest.mark.slow
async def test_tool_aware_templates_get_the_tools_and_tool_messages(ors_server) -> None:
    from transformers import AutoTokenizer

    from minds_core.backends.local.model.tiny_model import tiny_model_path
    from minds_core.envs.render import Renderer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    tokenizer.chat_template = (
        "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %} {{ t['function']['name'] }}{% endfor %}<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    renderer = Renderer(tokenizer)
    assert renderer.supports_tools
    env = load_environment(name="maze", base_url=ors_server.url)
    episode, messages = await opened(env, renderer=renderer)
    assert messages == [{"role": "user", "content": "Find the exit."}]
    assert [t["function"]["name"] for t in episode.tools] == ["look", "move"]
    assert episode.tools[1]["function"]["parameters"]["properties"] == {"direction": {"type": "string"}}
    assert "TOOLS: look move" in tokenizer.decode(renderer.prompt_tokens(messages, episode.tools))
    reply = await episode.step('<tool_call>{"name": "look", "arguments": {}}</tool_call> <tool_call>[]</tool_call>')
    assert reply.messages[0] == {"role": "tool", "content": "You see a door to the north."}
    assert reply.messages[1]["role"] == "user" and "expected a JSON object" in reply.messages[1]["content"]
    await episode.close()
    forced = load_environment(name="maze", base_url=ors_server.url, tool_format="prompt")
    episode, messages = await opened(forced, renderer=renderer)
    assert episode.tools is None and messages[0]["role"] == "system"
    await episode.close()
    await env.close()
    await forced.close()


@pytest.mark.slow
async def test_the_openreward_key_is_not_sent_to_a_server_nobody_configured_it_for(ors_server, monkeypatch) -> None:
    monkeypatch.setenv("OPENREWARD_API_KEY", "sk-or-must-not-leak")
    monkeypatch.setenv("LAB_JUDGE", "judge-secret")
    start = len(ors_server.log.keys)
    env = load_environment(name="toollab", base_url=ors_server.url, secrets={"JUDGE": "$LAB_JUDGE"})
    episode, _ = await opened(env)
    await episode.step(ADD_TWO)
    await episode.close()
    await env.close()
    seen = ors_server.log.keys[start:]
    assert seen and set(seen) <= {None, ""}
    (secrets,) = ors_server.lab.census.secrets
    assert secrets["JUDGE"] == "judge-secret"
    assert "sk-or-must-not-leak" not in repr(secrets)


@pytest.mark.slow
async def test_a_key_configured_for_a_server_is_sent_there(ors_server, monkeypatch) -> None:
    monkeypatch.setenv("LAB_KEY", "lab-key-123")
    start = len(ors_server.log.keys)
    env = load_environment(name="toollab", base_url=ors_server.url, api_key_env="LAB_KEY")
    assert "lab-key-123" not in repr(env.connection)
    episode, _ = await opened(env)
    await episode.close()
    await env.close()
    assert set(ors_server.log.keys[start:]) == {"lab-key-123"}
