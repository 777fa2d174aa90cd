"""Coalescing of a group's sample requests: G rollouts of one prompt become one request for G samples.

The rollouts of a group register while they run. Their requests wait until
every running rollout of the group is waiting for a sample (or ``patience``
seconds pass, so a stuck rollout cannot hold the others); then requests with
the same prompt and parameters go out as one request. Waiting for that barrier
rather than for a clock keeps a seeded run's batches, and so its samples, the
same from run to run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import tinker


class GroupSampler:
    """Wraps a SamplingClient for the rollouts of one group (see the module docstring)."""

    def __init__(self, sampler: Any, patience: float = 1.0) -> None:
        self.sampler = sampler
        self.patience = patience
        self.active = 0
        self.inside = 0
        #: (prompt tokens, params without seed) -> the first request's prompt and params, and every waiter
        self._pending: dict[tuple, tuple[tinker.types.ModelInput, tinker.types.SamplingParams, list[asyncio.Future]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task] = set()

    def enter(self) -> None:
        """A rollout of the group starts."""
        self.active += 1

    def leave(self) -> None:
        """A rollout of the group ended; its peers no longer wait for it."""
        self.active -= 1
        self._flush_if_all_waiting()

    async def sample(
        self, prompt: tinker.types.ModelInput, num_samples: int, sampling_params: tinker.types.SamplingParams
    ) -> tinker.types.SampleResponse:
        if num_samples != 1:
            return await self.sampler.sample(prompt, num_samples, sampling_params)
        key = (tuple(prompt.to_ints()), sampling_params.model_dump_json(exclude={"seed"}))
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.setdefault(key, (prompt, sampling_params, []))[2].append(future)
        self.inside += 1
        try:
            self._flush_if_all_waiting()
            if self._pending and self._timer is None:
                self._timer = loop.call_later(self.patience, self._flush)
            return await future
        finally:
            self.inside -= 1

    def _flush_if_all_waiting(self) -> None:
        if self._pending and self.inside >= self.active:
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, {}
        for prompt, params, futures in pending.values():
            waiting = [f for f in futures if not f.done()]  # a timed-out rollout cancelled its own
            if waiting:
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
