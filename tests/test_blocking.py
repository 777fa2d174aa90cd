"""Sync plugin code on the event loop's thread: named while it runs, its time charged to its own rollout only."""

from __future__ import annotations

import asyncio
import threading
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


def test_an_async_reward_that_blocks_inside_its_async_def_is_named_and_charged_to_its_own_rollout():
    # `async def reward(): time.sleep(...)` blocks the loop as a sync one does, after plugin_call's sync part returned
    async def reward() -> float:
        await asyncio.sleep(0)
        time.sleep(0.4)
        return 1.0

    seen = []
    watcher = threading.Timer(0.2, lambda: seen.append(blocking_now()))  # what a signal handler would read

    async def blocked() -> float:
        watcher.start()
        return await plugin_call("reward function 'async_slow'", reward)

    async def innocent() -> str:
        await asyncio.sleep(0.01)
        await asyncio.sleep(0.15)
        return "ok"

    async def step() -> list:
        rollouts = (innocent(), blocked(), innocent())
        return await asyncio.gather(*(within_timeout(rollout, 0.3) for rollout in rollouts), return_exceptions=True)

    first, late, last = asyncio.run(step())
    watcher.join()
    assert seen[0] is not None and seen[0].what == "reward function 'async_slow'", seen
    assert (first, last) == ("ok", "ok")
    assert isinstance(late, TimeoutError)
    assert str(late).startswith("timed out after 0.3 s: reward function 'async_slow' ran 0.4 s synchronously")


def test_an_awaited_plugin_call_is_cancelled_through_and_returns_its_value():
    async def plugin(cancelled: list) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    async def main() -> list:
        cancelled: list = []
        task = asyncio.ensure_future(plugin_call("episode X.step", plugin, cancelled))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cancelled

    assert asyncio.run(main()) == [True]

    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    assert asyncio.run(plugin_call("reward function 'v'", value)) == 7
    assert blocking_now() is None


def test_a_timeout_names_the_reward_that_blocked_not_the_step_that_called_it():
    # a loose environment's rewards run inside minds' own LooseEpisode.step: the user's function is the one to name
    async def step() -> float:
        return await plugin_call("reward function 'slow'", time.sleep, 0.4)

    async def rollout() -> None:
        await plugin_call("episode LooseEpisode.step", step)

    with pytest.raises(TimeoutError) as late:
        asyncio.run(within_timeout(rollout(), 0.3))
    assert str(late.value).startswith("timed out after 0.3 s: reward function 'slow' ran 0.4 s synchronously"), late.value
