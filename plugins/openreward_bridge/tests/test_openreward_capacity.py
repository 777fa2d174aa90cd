"""HTTP 429 ("maximum capacity") from a real server: back off, lower the session limit, never crash."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from minds_core.contract.environment import Context, Task
from minds_openreward.environment import OpenRewardEnvironment, load_environment
from minds_openreward.failures import is_capacity_error

NO_CONTEXT = Context(sampler=None, tokenizer=None, service=None, renderer=None, base_model="none")


async def answer_once(env: OpenRewardEnvironment, task: Task) -> float:
    episode = env.episode(task, NO_CONTEXT)
    try:
        await episode.initial_observation()
        await asyncio.sleep(0.02)  # hold the session a moment so that openings overlap
        await episode.step("done")
        return episode.outcome().reward
    finally:
        await episode.close()


@pytest.mark.slow
async def test_capacity_errors_back_off_and_lower_the_limit(ors_server) -> None:
    census = ors_server.lab.census
    census.reset(capacity=2)
    env = load_environment(name="toollab", base_url=ors_server.url, capacity_backoff=0.01)
    rewards = await asyncio.gather(*(answer_once(env, task) for task in env.tasks("train") * 2))
    await env.close()
    assert rewards == [ors_server.lab.answer_reward("done")] * 8
    assert census.refused >= 1 and census.peak <= 2
    assert (census.created, census.live) == (8, 0)
    limiter = env.limiter
    assert limiter.reductions >= 1 and limiter.limit is not None and limiter.limit <= 3  # lowered from no limit
    assert (limiter.in_flight, limiter.open) == (0, 0)


@pytest.mark.slow
async def test_a_configured_session_cap_is_never_exceeded(ors_server) -> None:
    env = load_environment(name="toollab", base_url=ors_server.url, max_sessions=3)
    await asyncio.gather(*(answer_once(env, task) for task in env.tasks("train") * 3))
    await env.close()
    assert ors_server.lab.census.peak == 3 and env.limiter.max_in_flight == 3
    assert ors_server.lab.census.refused == 0


@pytest.mark.slow
async def test_capacity_that_never_frees_up_fails_the_rollout_after_the_retries(ors_server) -> None:
    ors_server.lab.census.reset(capacity=0)
    env = load_environment(name="toollab", base_url=ors_server.url, capacity_retries=2, capacity_backoff=0.01)
    with pytest.raises(aiohttp.ClientResponseError) as info:
        await answer_once(env, env.tasks("train")[0])
    await env.close()
    assert is_capacity_error(info.value)
    assert ors_server.lab.census.refused >= 3 and env.limiter.in_flight == 0
