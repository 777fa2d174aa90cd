"""Token-exact multi-turn rollouts: tool outputs are never trained on, sampled turns are the sampler's tokens.

The tiny local model is first taught (a few supervised steps) to call ``look``,
so the rollouts really make a tool call whose output comes back as a turn.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import tinker
from tinker import types

from minds_core.config import RolloutConfig
from minds_core.contract.environment import Context
from minds_core.envs.render import Renderer
from minds_core.episodes.groups import EpisodeSettings
from minds_core.episodes.rollout import run_group
from minds_core.training.datums import rl_datum
from minds_openreward.environment import load_environment

local = pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

LOOK = '<tool_call>{"name": "look", "arguments": {}}</tool_call>'
LOOK_OUTPUT = "<tool_response>\nYou see a door to the north.\n</tool_response>"


class SamplerTap:
    """Passes every request to the real sampler and keeps each returned sequence with its prompt."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.outputs: list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]] = []

    async def sample(self, prompt: types.ModelInput, num_samples: int, params: types.SamplingParams) -> types.SampleResponse:
        response = await self.sampler.sample(prompt, num_samples, params)
        for sequence in response.sequences:
            self.outputs.append((tuple(prompt.to_ints()), tuple(sequence.tokens), tuple(sequence.logprobs or [])))
        return response


def sampled_turns(conv: Any) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]]:
    """(tokens before the turn, the turn's tokens, their logprobs) for each sampled turn of a conversation."""
    turns = []
    for turn in range(conv.turns):
        positions = [i for i, t in enumerate(conv.turn_ids) if t == turn]
        start, end = positions[0], positions[-1] + 1
        assert positions == list(range(start, end)), "a sampled turn must be one contiguous run of tokens"
        assert all(conv.sampled[start:end])
        turns.append((tuple(conv.tokens[:start]), tuple(conv.tokens[start:end]), tuple(conv.logprobs[start:end])))
    return turns


async def teach(training: Any, prompt: list[int], target: list[int]) -> Any:
    """Supervised steps on prompt -> target until greedy sampling reproduces the target; the new sampler."""
    tokens = prompt + target
    n = len(tokens)
    datum = tinker.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData(data=tokens[1:], dtype="int64", shape=[n - 1]),
            "weights": tinker.TensorData(data=[0.0] * (len(prompt) - 1) + [1.0] * len(target), dtype="float32", shape=[n - 1]),
        },
    )
    greedy = types.SamplingParams(max_tokens=len(target), temperature=0.0)
    for step in range(1, 201):
        forward_backward = training.forward_backward([datum], "cross_entropy")
        optim = training.optim_step(types.AdamParams(learning_rate=3e-3))
        await forward_backward
        await optim
        if step >= 30 and step % 10 == 0:
            sampler = await training.save_weights_and_get_sampling_client()
            sampled = await sampler.sample(types.ModelInput.from_ints(prompt), 1, greedy)
            if list(sampled.sequences[0].tokens) == target:
                return sampler
    raise AssertionError("the tiny model did not learn the tool call in 200 steps")


@pytest.mark.slow
async def test_tool_outputs_are_masked_and_sampled_turns_are_exact(ors_server, tmp_path: Path) -> None:
    service = local.ServiceClient(checkpoint_root=tmp_path)
    training = await service.create_lora_training_client(base_model=local.TINY_MODEL, rank=8)
    tokenizer = training.get_tokenizer()
    renderer = Renderer(tokenizer)
    env = load_environment(name="maze", base_url=ors_server.url, nonterminal_reward=-1.0)
    task = env.tasks("train")[0]

    def context(sampler: Any) -> Context:
        return Context(sampler=sampler, tokenizer=tokenizer, service=service, renderer=renderer, base_model=local.TINY_MODEL)

    probe = env.episode(task, context(None))
    prompt = renderer.prompt_tokens(await probe.initial_observation(), probe.tools)
    await probe.close()
    sampler = await teach(training, prompt, renderer.encode(LOOK) + [tokenizer.eos_token_id])

    tap = SamplerTap(sampler)
    settings = EpisodeSettings(
        renderer,
        types.SamplingParams(max_tokens=64, temperature=0.0),
        RolloutConfig(timeout=60, retries=0, max_total_tokens=len(prompt) + 240),
    )
    group = await run_group("maze", env, task, 2, lambda: context(tap), settings, asyncio.Semaphore(2), max_failing=0, seed=0)
    await env.close()

    assert group.failures == 0 and group.dropped is None
    assert ors_server.maze.census.created == 3 and ors_server.maze.census.live == 0
    unused = list(tap.outputs)
    for rollout in group.rollouts:
        conv = rollout.conversation
        assert rollout.metrics["tool_calls"] >= 1
        turns = sampled_turns(conv)
        assert len(turns) >= 2
        for turn in turns:
            unused.remove(turn)  # the sampler returned exactly these tokens and logprobs after exactly this prefix
        assert sum(conv.sampled) == sum(len(tokens) for _, tokens, _ in turns)
        (before, first, _), (second_prefix, _, _) = turns[0], turns[1]
        assert tokenizer.decode(first, skip_special_tokens=True) == LOOK
        reply = range(len(before) + len(first), len(second_prefix))
        assert not any(conv.sampled[i] for i in reply)
        assert LOOK_OUTPUT in tokenizer.decode([conv.tokens[i] for i in reply])
        datum = rl_datum(conv.tokens, conv.sampled, conv.logprobs, [1.0] * len(conv.tokens))
        advantages = datum.loss_fn_inputs["advantages"].data
        assert [i for i, a in enumerate(advantages) if a] == [i - 1 for i, s in enumerate(conv.sampled) if s]
    assert unused == []
