"""A verifiers rollout trains on exactly the tokens the sampler returned, turn by turn (tools included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tinker

from minds_core.contract.environment import Context
from minds_core.envs.render import Renderer
from minds_core.episodes.conversation import Conversation
from minds_core.episodes.rollout import play_episode
from minds_core.training.datums import rl_datum
from minds_verifiers import load_environment
from minds_verifiers.messages import native_tool, plain_messages

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

TOOL_CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


class RecordingSampler:
    """A real sampling client whose requests and returned sequences are kept for comparison."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.prompts: list[list[int]] = []
        self.sequences: list[tinker.types.SampledSequence] = []

    async def sample(
        self, prompt: tinker.types.ModelInput, num_samples: int, sampling_params: tinker.types.SamplingParams
    ) -> tinker.types.SampleResponse:
        response = await self.sampler.sample(prompt, num_samples, sampling_params)
        self.prompts.append(prompt.to_ints())
        self.sequences.extend(response.sequences)
        return response


async def _rollout(
    env_id: str, sampler: Any, service: Any, params: tinker.types.SamplingParams, max_total_tokens: int = 2048
) -> tuple[Conversation, Any, RecordingSampler, float]:
    env = load_environment(id=env_id)
    recorder = RecordingSampler(sampler)
    renderer = Renderer(sampler.get_tokenizer())
    ctx = Context(sampler=recorder, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model="minds-tiny")
    conversation = Conversation(renderer, recorder, params, max_total_tokens=max_total_tokens, max_turns=8)
    episode = env.episode(env.tasks("train")[0], ctx)
    rewards, _ = await play_episode(episode, conversation)
    return conversation, episode.state, recorder, rewards[0]


def _assert_trained_on_what_was_sampled(conversation: Conversation, state: Any, recorder: RecordingSampler) -> None:
    turns = [list(s.tokens) for s in recorder.sequences]
    assert conversation.turns == len(turns) == len(state["trajectory"])
    for turn, (tokens, sequence) in enumerate(zip(turns, recorder.sequences)):
        where = [i for i, t in enumerate(conversation.turn_ids) if t == turn]
        assert where == list(range(where[0], where[0] + len(tokens)))
        assert [conversation.tokens[i] for i in where] == tokens
        assert [conversation.logprobs[i] for i in where] == list(sequence.logprobs)
        assert conversation.tokens[: where[0]] == recorder.prompts[turn]
    for step, tokens, prompt, sequence in zip(state["trajectory"], turns, recorder.prompts, recorder.sequences):
        assert step["tokens"]["completion_ids"] == tokens
        assert step["tokens"]["prompt_ids"] == prompt
        assert step["tokens"]["completion_logprobs"] == list(sequence.logprobs)

    datum = rl_datum(conversation.tokens, conversation.sampled, conversation.logprobs, [1.0] * len(conversation.tokens))
    targets = datum.loss_fn_inputs["target_tokens"].data
    advantages = datum.loss_fn_inputs["advantages"].data
    assert datum.model_input.to_ints() == conversation.tokens[:-1] and targets == conversation.tokens[1:]
    assert [t for t, a in zip(targets, advantages) if a] == [t for turn in turns for t in turn]


async def test_single_turn_env(vf_environments: Path, service: Any) -> None:
    sampler = await service.create_sampling_client(base_model="minds-tiny")
    conversation, state, recorder, reward = await _rollout("minds_vf_capitals", sampler, service, tinker.types.SamplingParams(max_tokens=16, seed=1))
    _assert_trained_on_what_was_sampled(conversation, state, recorder)
    assert conversation.messages[:2] == [
        {"role": "system", "content": "Answer with one word."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    assert state["completion"][-1]["content"] == conversation.messages[-1]["content"]
    assert reward == state["reward"] == pytest.approx(state["metrics"]["names_capital"] + 0.5 * state["metrics"]["shares_letters"])


async def test_multi_turn_env_appends_its_replies_between_sampled_turns(vf_environments: Path, service: Any) -> None:
    sampler = await service.create_sampling_client(base_model="minds-tiny")
    conversation, state, recorder, reward = await _rollout("minds_vf_interview", sampler, service, tinker.types.SamplingParams(max_tokens=12, seed=2))
    _assert_trained_on_what_was_sampled(conversation, state, recorder)
    assert [m["role"] for m in conversation.messages] == ["user", "assistant", "user", "assistant"]
    between = [t for t, turn in zip(conversation.tokens, conversation.turn_ids) if turn == -1][len(recorder.prompts[0]) :]
    assert "Why? (1 answers so far)" in conversation.renderer.decode(between)
    assert reward == state["reward"]


async def test_token_budget_ends_the_rollout_and_verifiers_still_scores_it(vf_environments: Path, service: Any) -> None:
    sampler = await service.create_sampling_client(base_model="minds-tiny")
    prompt = Renderer(sampler.get_tokenizer()).prompt_tokens([{"role": "user", "content": "Do you like tea?"}])
    params = tinker.types.SamplingParams(max_tokens=12, seed=3)
    conversation, state, recorder, reward = await _rollout("minds_vf_interview", sampler, service, params, len(prompt) + 15)
    assert conversation.turns == 1 and conversation.truncated
    assert state["prompt_too_long"] and state["error"] is None
    _assert_trained_on_what_was_sampled(conversation, state, recorder)
    assert reward == state["reward"] == state["metrics"]["answered_every_turn"]


async def _tool_calling_sampler(service: Any, renderer: Renderer) -> Any:
    """The tiny policy after supervised steps on calling ``add(2, 3)`` for the calculator's first question."""
    env = load_environment(id="minds_vf_calculator")
    prompt = renderer.prompt_tokens(plain_messages(env.tasks("train")[0].prompt), [native_tool(t) for t in env.vf_env.tool_defs])
    target = renderer.encode(TOOL_CALL) + [renderer.tokenizer.eos_token_id]
    sequence, n = prompt + target, len(prompt) + len(target) - 1
    datum = tinker.Datum(
        model_input=tinker.types.ModelInput.from_ints(sequence[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData(data=sequence[1:], dtype="int64", shape=[n]),
            "weights": tinker.TensorData(data=[0.0] * (len(prompt) - 1) + [1.0] * len(target), dtype="float32", shape=[n]),
        },
    )
    trainer = await service.create_lora_training_client(base_model="minds-tiny", rank=32, seed=0)
    for _ in range(60):
        step = trainer.forward_backward([datum], "cross_entropy")
        update = trainer.optim_step(tinker.types.AdamParams(learning_rate=5e-3))
        await step
        await update
    return await trainer.save_weights_and_get_sampling_client()


@pytest.mark.slow
async def test_tool_env_runs_the_called_tool_and_trains_on_every_turn(vf_environments: Path, service: Any) -> None:
    base = await service.create_sampling_client(base_model="minds-tiny")
    sampler = await _tool_calling_sampler(service, Renderer(base.get_tokenizer()))
    params = tinker.types.SamplingParams(max_tokens=80, temperature=0.0)
    conversation, state, recorder, _ = await _rollout("minds_vf_calculator", sampler, service, params)
    _assert_trained_on_what_was_sampled(conversation, state, recorder)
    assert conversation.messages[1] == {"role": "assistant", "content": TOOL_CALL}
    assert conversation.messages[2] == {"role": "tool", "content": "5", "tool_call_id": "call_1_0"}
    first = state["trajectory"][0]["completion"][0]
    assert first.tool_calls[0].name == "add" and first.content == ""
    assert state["metrics"]["add_calls"] >= 1 and conversation.turns >= 2
