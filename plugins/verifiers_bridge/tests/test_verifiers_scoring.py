"""What classic verifiers environments written for older releases need: a plain-string `task` column, the
environment's `sampling_args` passed to rollout(), lenient reward calls, and reward-function failures that
verifiers swallows (scoring 0) failing the rollout instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tinker

from minds_core import Context
from minds_core.config import RolloutConfig
from minds_core.envs.render import Renderer
from minds_core.episodes.groups import EpisodeSettings
from minds_core.episodes.rollout import run_rollout
from minds_verifiers import load_environment

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")


async def _rollout(vf_environments: Path, service: Any, **args: Any) -> tuple[Any, Any]:
    from minds_core.backends.local import TINY_MODEL

    env = load_environment(id="minds_vf_tagged", args=args)
    sampler = await service.create_sampling_client(base_model=TINY_MODEL)
    renderer = Renderer(sampler.get_tokenizer())
    ctx = Context(sampler=sampler, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model=TINY_MODEL)
    params = tinker.types.SamplingParams(max_tokens=9, temperature=1.0)
    task = env.tasks("train")[0]
    episode_states = []
    original = env.episode

    def recording(task: Any, ctx: Context) -> Any:
        episode = original(task, ctx)
        episode_states.append(episode)
        return episode

    env.episode = recording
    rollout = await run_rollout(env, task, ctx, EpisodeSettings(renderer, params, RolloutConfig(retries=0)), seed=0)
    return rollout, episode_states[-1].state


async def test_plain_string_task_and_sampling_args_reach_the_rubric(vf_environments: Path, service: Any) -> None:
    rollout, state = await _rollout(vf_environments, service)
    assert rollout.ok, rollout.error
    reply = rollout.conversation.replies[0]
    assert rollout.reward == pytest.approx(1.0 + 0.5 * float(bool(reply.strip())))
    assert rollout.metrics["vf/tagged"] == 1.0 and rollout.metrics["vf/max_tokens_seen"] == 9.0
    # the environment's own sampling_args, updated with the run's, as verifiers' generate() passes them
    assert state["sampling_args"]["extra_body"] == {"skip_special_tokens": False}
    assert state["sampling_args"]["temperature"] == 1.0 and state["sampling_args"]["n"] == 1


async def test_a_reward_function_that_raises_fails_the_rollout(vf_environments: Path, service: Any) -> None:
    rollout, state = await _rollout(vf_environments, service, fail=True)
    assert not rollout.ok
    assert "reward function picky raised ValueError: cannot score this reply" in rollout.error
    assert "verifiers scored it 0" in rollout.error
    assert state["metrics"]["picky"] == 0.0  # what verifiers alone would have trained on
