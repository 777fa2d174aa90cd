"""The pace of an RL run: which steps evaluate and save, batches sampled ahead, step timings."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine

import pytest

from minds_core.base.interrupt import StopOnSignal
from minds_core.config import TrainerConfig
from minds_core.training.pacing import BatchesAhead, Cadence, Save, StepTimer


def test_cadence_evaluates_every_n_steps_and_at_the_last() -> None:
    cadence = Cadence.from_config(TrainerConfig(steps=7, eval_every=3))
    assert [s for s in range(7) if cadence.evaluates(s)] == [2, 5, 6]
    assert not any(Cadence(steps=7).evaluates(s) for s in range(7))


def test_cadence_saves_rolling_on_its_cadence_and_keeps_the_last_and_a_stopped_step() -> None:
    cadence = Cadence(steps=6, save_every=2)
    assert [cadence.save(s, stopping=False) for s in range(6)] == [None, Save.ROLLING, None, Save.ROLLING, None, Save.STEP]
    assert cadence.save(0, stopping=True) is Save.STEP
    assert [Cadence(steps=3).save(s, stopping=False) for s in range(3)] == [None, None, Save.STEP]
    assert Save.ROLLING == "rolling"  # str-valued: the same in JSON


def test_step_timer_times_each_stage_and_the_whole_step() -> None:
    timer = StepTimer()
    with timer.stage("train"):
        pass
    with pytest.raises(RuntimeError), timer.stage("save"):
        raise RuntimeError("a failed stage is timed too")
    metrics = timer.metrics()
    assert set(metrics) == {"time/train", "time/save", "time/step"}
    assert 0 <= metrics["time/train"] <= metrics["time/step"]
    assert metrics["time/save"] <= metrics["time/step"]


def test_batches_ahead_launch_k_steps_ahead_with_the_newest_policy_and_cancel_the_rest() -> None:
    launched: list[tuple[int, str]] = []
    gate = asyncio.Event()

    async def sample(step: int, policy: str) -> str:
        if step >= 3:
            await gate.wait()  # never set: still running when the block ends
        return f"batch {step} by {policy}"

    def collect(step: int, policy: str) -> Coroutine[None, None, str]:
        launched.append((step, policy))  # when the collection is launched, not when it first runs
        return sample(step, policy)

    async def main() -> tuple[list[str], list[asyncio.Task[str]]]:
        with BatchesAhead(collect, start=1, steps=5, ahead=2) as ahead:
            first = await ahead.take(1, "v1")  # launches steps 1, 2, 3
            second = await ahead.take(2, "v2")  # launches step 4 with the newer policy
            running = list(ahead.pending.values())
        await asyncio.gather(*running, return_exceptions=True)
        return [first, second], running

    batches, running = asyncio.run(main())
    assert batches == ["batch 1 by v1", "batch 2 by v1"]
    assert launched == [(1, "v1"), (2, "v1"), (3, "v1"), (4, "v2")]
    assert len(running) == 2 and all(task.cancelled() for task in running)


def test_batches_ahead_on_policy_collects_one_step_at_a_time() -> None:
    launched: list[int] = []

    async def collect(step: int, policy: int) -> int:
        launched.append(step)
        return step * 10

    async def main() -> list[int]:
        with BatchesAhead(collect, start=0, steps=3, ahead=0) as ahead:
            out = []
            for step in range(3):
                out.append(await ahead.take(step, step))
                assert launched == list(range(step + 1))
            return out

    assert asyncio.run(main()) == [0, 10, 20]


def test_stop_on_signal_as_a_block_gives_the_handlers_back_even_when_installed_twice():
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    async def main() -> None:
        with StopOnSignal("minds run --resume x") as stop:
            stop.install()  # an owner that installed it already: the first handlers are still the ones restored
            assert signal.getsignal(signal.SIGINT) == stop._handle
            signal.raise_signal(signal.SIGTERM)  # the first signal only asks the loop to stop
            assert stop.requested and stop.signal_name == "SIGTERM"
            interrupted = stop.interrupted(2, 5)
            assert interrupted.exit_code == 128 + signal.SIGTERM
            assert "after step 2 (3 of 5 done)" in str(interrupted) and "minds run --resume x" in str(interrupted)

    asyncio.run(main())
    assert {signum: signal.getsignal(signum) for signum in before} == before
