"""Coalescing of a group's sample requests: G rollouts of one prompt become one request for G samples."""

from __future__ import annotations

import asyncio
from typing import Any

import tinker

#: How long the first request of a batch waits for the rest of its group (seconds).
WINDOW = 0.005


class GroupSampler:
    """Wraps a SamplingClient; concurrent requests with the same prompt and params share one call.

    A batch is sent when ``group_size`` requests have arrived or ``WINDOW``
    after the first one, whichever is sooner. The seed of the first request
    is used for the batch.
    """

    def __init__(self, sampler: Any, group_size: int) -> None:
        self.sampler = sampler
        self.group_size = group_size
        self._pending: dict[tuple, list[asyncio.Future]] = {}
        self._requests: dict[tuple, tuple[tinker.types.ModelInput, tinker.types.SamplingParams]] = {}
        self._sending: set[asyncio.Task] = set()

    async def sample(
        self, prompt: tinker.types.ModelInput, num_samples: int, sampling_params: tinker.types.SamplingParams
    ) -> tinker.types.SampleResponse:
        if num_samples != 1:
            return await self.sampler.sample(prompt, num_samples, sampling_params)
        key = (tuple(prompt.to_ints()), sampling_params.model_dump_json(exclude={"seed"}))
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        waiting = self._pending.setdefault(key, [])
        waiting.append(future)
        if len(waiting) == 1:
            self._requests[key] = (prompt, sampling_params)
            loop.call_later(WINDOW, self._flush, key)
        if len(waiting) >= self.group_size:
            self._flush(key)
        return await future

    def _flush(self, key: tuple) -> None:
        waiting = self._pending.pop(key, None)
        if waiting:
            prompt, params = self._requests.pop(key)
            task = asyncio.ensure_future(self._send(prompt, params, waiting))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, prompt: Any, params: Any, waiting: list[asyncio.Future]) -> None:
        try:
            response = await self.sampler.sample(prompt, len(waiting), params)
        except Exception as exc:  # noqa: BLE001 - each waiting rollout fails with it
            for future in waiting:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, sequence in zip(waiting, response.sequences):
            if not future.done():
                future.set_result(tinker.types.SampleResponse(sequences=[sequence]))
