"""Sync plugin code on the event loop's thread: named while it runs, its time charged to its own rollout only."""

from __future__ import annotations

import asyncio
import time

import pytest

from minds_core.base.blocking import blocking_now, plugin_call, within_timeout


def test_a_sync_call_that_holds_the_loop_times_out_its_own_rollout_not_the_others():
    # the reward of one rollout sleeps 0.4 s synchronously: every other rollout is stalled as long, and with work
    # still to do when the loop comes back; under asyncio.wait_for(0.3) they all timed out (the issue's [4, 0, 4])
    async def blocked() -> str:
        await plugin_call("reward function 'slow'", time.sleep, 0.4)
        return "late"

    async def innocent() -> str:
        await asyncio.sleep(0.01)
        await asyncio.sleep(0.15)  # still to do after the loop was held
        return "ok"

    async def step() -> list:
        rollouts = (innocent(), blocked(), innocent())
        return await asyncio.gather(*(within_timeout(rollout, 0.3) for rollout in rollouts), return_exceptions=True)

    first, late, last = asyncio.run(step())
    assert (first, last) == ("ok", "ok")
    assert isinstance(late, TimeoutError)
    assert str(late).startswith("timed out after 0.3 s: reward function 'slow' ran 0.4 s synchronously, blocking the event loop")


def test_an_async_rollout_that_overruns_is_cut_off_at_its_timeout():
    async def hangs() -> None:
        await asyncio.sleep(3600)

    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^timed out after 0\.2 s$"):
        asyncio.run(within_timeout(hangs(), 0.2))
    assert time.monotonic() - began < 1


def test_the_sync_call_running_now_is_named_and_cleared_after():
    seen = []

    def reward() -> float:
        seen.append(blocking_now())
        return 1.0

    assert asyncio.run(plugin_call("reward function 'x.y'", reward)) == 1.0
    assert seen[0] is not None and seen[0].what == "reward function 'x.y'" and seen[0].seconds() >= 0
    assert blocking_now() is None
