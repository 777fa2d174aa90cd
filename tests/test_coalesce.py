"""A group's identical turns are sampled in one request, waiting for the group rather than a clock."""

from __future__ import annotations

import asyncio

import tinker

from minds_core.backends.local import TINY_MODEL, ServiceClient
from minds_core.episodes.coalesce import GroupSampler


class CountingSampler:
    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self.requests: list[int] = []

    async def sample(self, prompt, num_samples, sampling_params):
        self.requests.append(num_samples)
        return await self.sampler.sample(prompt, num_samples, sampling_params)


async def _policy(tmp_path) -> CountingSampler:
    service = ServiceClient(checkpoint_root=tmp_path)
    training = await service.create_lora_training_client(TINY_MODEL, rank=4, seed=0)
    return CountingSampler(await training.save_weights_and_get_sampling_client())


def test_identical_requests_share_one_call_and_a_straggler_is_waited_for(tmp_path):
    async def go():
        counting = await _policy(tmp_path)
        shared = GroupSampler(counting, patience=30.0)
        prompt = tinker.types.ModelInput.from_ints([257, 117, 10])
        params = tinker.types.SamplingParams(max_tokens=4, seed=3)

        async def rollout(delay: float) -> list[int]:
            shared.enter()
            try:
                await asyncio.sleep(delay)  # an environment that is slow to produce its prompt
                return list((await shared.sample(prompt, 1, params)).sequences[0].tokens)
            finally:
                shared.leave()

        replies = await asyncio.gather(rollout(0.0), rollout(0.0), rollout(0.3))
        return counting.requests, replies

    requests, replies = asyncio.run(go())
    assert requests == [3]
    assert len(replies) == 3 and all(replies)
    assert len({tuple(r) for r in replies}) == 3  # each rollout got its own sample of the one request


def test_a_rollout_that_ends_releases_the_others(tmp_path):
    async def go():
        counting = await _policy(tmp_path)
        shared = GroupSampler(counting, patience=30.0)
        prompt = tinker.types.ModelInput.from_ints([257, 117, 10])
        params = tinker.types.SamplingParams(max_tokens=4)
        shared.enter()
        shared.enter()
        waiting = asyncio.ensure_future(shared.sample(prompt, 1, params))
        await asyncio.sleep(0.1)
        assert not waiting.done() and counting.requests == []
        shared.leave()  # the other rollout failed without sampling
        await asyncio.wait_for(waiting, 10)
        return counting.requests

    assert asyncio.run(go()) == [1]
