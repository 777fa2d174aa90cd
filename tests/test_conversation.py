"""Token-exact multi-turn rollouts on the local backend: sampled turns are trained, replies are not."""

from __future__ import annotations

import asyncio
import json

import pytest
import tinker
from structlog.testing import capture_logs
from transformers import AutoTokenizer

from minds_core import Context
from minds_core.backends.local import TINY_MODEL, ServiceClient
from minds_core.backends.local.model.tiny_model import tiny_model_path
from minds_core.config import RolloutConfig
from minds_core.contract.environment import StepResult, Task
from minds_core.envs.render import Renderer
from minds_core.episodes.conversation import Conversation, StopReason
from minds_core.episodes.groups import Dropped, EpisodeSettings, Group
from minds_core.episodes.rollout import run_group
from minds_core.episodes.rollout_records import group_record
from minds_core.training.datums import rl_datum
from minds_toy_plugin import TwoTurnEnvironment


class RecordingSampler:
    """Wraps the real sampling client and keeps every sequence it returned."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self.returned: list[list[int]] = []
        self.seeds: dict[tuple[int, ...], int | None] = {}  # each request's prompt -> its seed

    async def sample(self, prompt, num_samples, sampling_params):
        self.seeds[tuple(prompt.to_ints())] = sampling_params.seed
        response = await self.sampler.sample(prompt, num_samples, sampling_params)
        self.returned.extend(list(s.tokens) for s in response.sequences)
        return response


class AgainEpisode:
    """Says the same thing after every reply, for four turns (a game whose every turn looks alike)."""

    def __init__(self) -> None:
        self.replies = 0

    def initial_observation(self):
        return [{"role": "user", "content": "Pick a word."}]

    def step(self, action):
        self.replies += 1
        return StepResult(reward=0.0, done=self.replies == 4, messages=[{"role": "user", "content": "Again."}])


class AgainEnvironment:
    def __init__(self, tools=None) -> None:
        self.tools = tools

    def tasks(self, split):
        return [Task(prompt="Pick a word.", id="again")]

    def episode(self, task, ctx):
        episode = AgainEpisode()
        episode.tools = self.tools
        return episode


def test_two_turn_rollouts_mask_the_tool_reply_token_by_token(tmp_path):
    async def go():
        service = ServiceClient(checkpoint_root=tmp_path)
        training = await service.create_lora_training_client(TINY_MODEL, rank=4, seed=0)
        sampler = RecordingSampler(await training.save_weights_and_get_sampling_client())
        renderer = Renderer(training.get_tokenizer())
        ctx = Context(sampler=sampler, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model=TINY_MODEL)
        settings = EpisodeSettings(renderer, tinker.types.SamplingParams(max_tokens=6, temperature=1.0), RolloutConfig())
        env = TwoTurnEnvironment()
        group = await run_group("two", env, env.tasks("train")[0], 3, lambda: ctx, settings, asyncio.Semaphore(8), 0, seed=5)
        return renderer, sampler, group

    renderer, sampler, group = asyncio.run(go())
    assert not group.dropped and len(group.ok_rollouts) == 3
    returned = list(sampler.returned)
    for rollout in group.rollouts:
        conv = rollout.conversation
        assert conv.turns == 2
        turns = [[t for t, turn in zip(conv.tokens, conv.turn_ids) if turn == k] for k in (0, 1)]
        for turn in turns:  # every sampled turn is exactly a sequence the sampler returned
            returned.remove(turn)
        reply = renderer.encode("<|im_start|>tool\nx = 42<|im_end|>\n<|im_start|>assistant\n")
        start = len(conv.tokens) - len(turns[1]) - len(reply)
        assert conv.tokens[start:start + len(reply)] == reply
        assert not any(conv.sampled[start:start + len(reply)])
        prompt_end = conv.sampled.index(True)
        assert conv.tokens[:prompt_end] == renderer.prompt_tokens(
            [{"role": "system", "content": "tools: lookup"}, {"role": "user", "content": "find x"}])
        datum = rl_datum(conv.tokens, conv.sampled, conv.logprobs, [1.0] * len(conv.tokens))
        advantages = datum.loss_fn_inputs["advantages"].tolist()
        assert advantages == [1.0 if s else 0.0 for s in conv.sampled[1:]]
        assert datum.loss_fn_inputs["target_tokens"].tolist() == conv.tokens[1:]
    assert returned == []
    record = json.loads(json.dumps(group_record(group, step=3)))  # the shape of rollouts.jsonl and eval files
    assert record["step"] == 3 and record["dropped"] is None and len(record["rollouts"]) == 3
    for written, rollout in zip(record["rollouts"], group.rollouts):
        conv = rollout.conversation
        assistant = [m for m in written["messages"] if m["role"] == "assistant"]
        assert [m["stop_reason"] for m in assistant] == conv.stop_reasons and len(assistant) == conv.turns == 2
        assert sum(m["tokens"] for m in assistant) == written["sampled_tokens"] == conv.sampled_tokens
        assert written["hit_max_tokens"] == (conv.stop_reasons[-1] == "length") and written["completion"] == conv.replies


def test_chat_template_args_reach_the_template():
    from transformers import AutoTokenizer

    from minds_core.backends.local.model.tiny_model import tiny_model_path

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% if not enable_thinking %} <no-think>{% endif %}{% endif %}"
    )
    plain = Renderer(tokenizer, {"enable_thinking": True}).prompt_tokens([{"role": "user", "content": "hi"}])
    quiet = Renderer(tokenizer, {"enable_thinking": False}).prompt_tokens([{"role": "user", "content": "hi"}])
    assert tokenizer.decode(plain).endswith("assistant:")
    assert tokenizer.decode(quiet).endswith("assistant: <no-think>")


def test_continuations_work_when_the_template_renders_the_latest_turn_differently():
    """Like Qwen3: only the LAST assistant turn gets an (empty) reasoning block."""
    from transformers import AutoTokenizer

    from minds_core.backends.local.model.tiny_model import tiny_model_path

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] == 'assistant' and loop.last %}<r></r>{% endif %}{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    renderer = Renderer(tokenizer)
    history = [{"role": "user", "content": "find x"}]
    stopped = renderer.continuation_tokens(history, [{"role": "tool", "content": "x = 42"}], stopped=True)
    cut = renderer.continuation_tokens(history, [{"role": "tool", "content": "x = 42"}], stopped=False)
    assert tokenizer.decode(stopped) == "\n<|im_start|>tool\nx = 42<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(cut) == "<|im_end|>" + tokenizer.decode(stopped)


def test_max_turns_zero_is_no_limit_and_one_truncates(tmp_path):
    async def go(max_turns):
        service = ServiceClient(checkpoint_root=tmp_path)
        training = await service.create_lora_training_client(TINY_MODEL, rank=4, seed=0)
        sampler = await training.save_weights_and_get_sampling_client()
        renderer = Renderer(training.get_tokenizer())
        ctx = Context(sampler=sampler, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model=TINY_MODEL)
        params = tinker.types.SamplingParams(max_tokens=6, temperature=1.0)
        settings = EpisodeSettings(renderer, params, RolloutConfig(max_turns=max_turns))
        env = TwoTurnEnvironment()
        return await run_group("two", env, env.tasks("train")[0], 2, lambda: ctx, settings, asyncio.Semaphore(8), 2, seed=5)

    unlimited, capped = asyncio.run(go(0)), asyncio.run(go(1))
    assert [(r.conversation.turns, r.conversation.truncated) for r in unlimited.rollouts] == [(2, False)] * 2
    assert [(r.conversation.turns, r.conversation.truncated) for r in capped.rollouts] == [(1, True)] * 2


def test_turns_and_last_stopped_are_read_from_the_stop_reasons():
    conv = Conversation(renderer=None, sampler=None, params=None, max_total_tokens=8)
    assert conv.turns == 0 and conv.last_stopped  # before any turn
    conv.stop_reasons.append(StopReason.of("stop"))
    assert conv.turns == 1 and conv.last_stopped
    conv.stop_reasons.append(StopReason.of("length"))
    assert conv.turns == 2 and not conv.last_stopped
    assert StopReason.of("something else") is StopReason.LENGTH  # anything but a stop token was cut off
    assert json.dumps(conv.stop_reasons) == '["stop", "length"]'  # str-valued: JSON unchanged


def test_a_group_is_dropped_for_a_named_reason():
    group = Group("env", Task(prompt="p"), [], dropped="constant")
    assert group.dropped is Dropped.CONSTANT and json.dumps(group.dropped) == '"constant"'
    group.dropped = Dropped.FAILURES
    assert group.dropped == "failures"
    with pytest.raises(ValueError, match="'sometimes' is not a valid Dropped"):
        Group("env", Task(prompt="p"), [], dropped="sometimes")


def test_tools_a_template_cannot_render_are_reported_once_not_dropped_silently(tmp_path):
    # minds-tiny's template, like some models' (Gemma's), has no tools: the policy never sees them
    lookup = {"type": "function", "function": {"name": "lookup", "description": "Look a word up.", "parameters": {"type": "object"}}}

    async def go():
        service = ServiceClient(checkpoint_root=tmp_path)
        sampler = await service.create_sampling_client(base_model=TINY_MODEL)
        renderer = Renderer(sampler.get_tokenizer())
        ctx = Context(sampler=sampler, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model=TINY_MODEL)
        settings = EpisodeSettings(renderer, tinker.types.SamplingParams(max_tokens=4), RolloutConfig())
        env = AgainEnvironment(tools=[lookup])
        return await run_group("again", env, env.tasks("train")[0], 2, lambda: ctx, settings, asyncio.Semaphore(8), 0, seed=5)

    with capture_logs() as logged:
        group = asyncio.run(go())
    assert len(group.ok_rollouts) == 2 and all(r.conversation.turns == 4 for r in group.rollouts)
    (warning,) = [entry for entry in logged if entry["event"] == "tools not shown"]
    assert warning["log_level"] == "warning" and warning["tools"] == ["lookup"]
    assert "does not render tools" in warning["reason"]


def test_tool_specs_of_other_shapes_are_named_in_the_warning_rather_than_failing_the_render():
    # the warning read names as {"function": {"name"}}: a spec of another shape raised AttributeError in the render
    renderer = Renderer(AutoTokenizer.from_pretrained(tiny_model_path()))
    tools = [{"type": "function", "function": "lookup"}, {"name": "search"}, "calc", {"function": {"name": "add"}}]
    messages = [{"role": "user", "content": "Hi."}]
    with capture_logs() as logged:
        assert renderer.text(messages, generation_prompt=True, tools=tools) == renderer.text(messages, generation_prompt=True)
    (warning,) = [entry for entry in logged if entry["event"] == "tools not shown"]
    assert warning["tools"] == ["?", "search", "?", "add"]


def test_each_turn_of_a_seeded_rollout_samples_with_its_own_seed(tmp_path):
    # one seed for every turn gave every turn the same random draws: turns whose prompts end alike came out alike
    async def go():
        service = ServiceClient(checkpoint_root=tmp_path)
        sampler = RecordingSampler(await service.create_sampling_client(base_model=TINY_MODEL))
        renderer = Renderer(sampler.sampler.get_tokenizer())
        ctx = Context(sampler=sampler, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model=TINY_MODEL)
        settings = EpisodeSettings(renderer, tinker.types.SamplingParams(max_tokens=6, temperature=1.0), RolloutConfig())
        env = AgainEnvironment()
        return sampler, await run_group("again", env, env.tasks("train")[0], 2, lambda: ctx, settings, asyncio.Semaphore(8), 0, seed=5)

    sampler, group = asyncio.run(go())
    for rollout in group.rollouts:
        conv = rollout.conversation
        assert conv.turns == 4
        starts = [i for i in range(len(conv.tokens)) if conv.sampled[i] and (i == 0 or not conv.sampled[i - 1])]
        seeds = [sampler.seeds[tuple(conv.tokens[:start])] for start in starts]
        assert seeds[0] == 5 and len(set(seeds)) == 4, seeds  # the group's first turns: one request, the group's seed
        assert len(set(conv.replies[1:])) == 3, conv.replies  # the same observation every turn, yet its own draws
