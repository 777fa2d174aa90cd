"""The pace of an RL run around its stages: which steps evaluate and save, batches sampled ahead, step timings.

``RLLoop.run`` reads as its stages; what decides *when* (``Cadence``), what samples
*ahead* (``BatchesAhead``) and what measures *how long* (``StepTimer``) live here.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Generic, TypeVar

import attrs

from minds_core.base.tracing import SelfTimes, span
from minds_core.config import TrainerConfig

BatchT = TypeVar("BatchT")


class Save(enum.StrEnum):
    """What a step saves after it trained."""

    #: weights, optimizer state and sampler weights named ``step-NNNNNN``, kept (the last step, and on a stop)
    STEP = "step"
    #: the state only, in one of two rolling slots (every ``trainer.save_every`` steps)
    ROLLING = "rolling"


@attrs.frozen
class Cadence:
    """Which steps evaluate and which save, from the run's trainer settings."""

    #: ``trainer.steps``: the run's last step is ``steps - 1``
    steps: int
    #: ``trainer.eval_every``: steps between evaluations, 0 = never (the last step evaluates too)
    eval_every: int = 0
    #: ``trainer.save_every``: steps between rolling saves, 0 = none
    save_every: int = 0

    @classmethod
    def from_config(cls, trainer: TrainerConfig) -> Cadence:
        return cls(trainer.steps, trainer.eval_every, trainer.save_every)

    def is_last(self, step: int) -> bool:
        return step == self.steps - 1

    def evaluates(self, step: int) -> bool:
        """Whether ``step`` ends with an evaluation: every ``eval_every`` steps, and the last step when evaluations are on."""
        return bool(self.eval_every) and ((step + 1) % self.eval_every == 0 or self.is_last(step))

    def save(self, step: int, stopping: bool) -> Save | None:
        """What ``step`` saves: a kept checkpoint at the last step or on a stop, a rolling one on the cadence, else nothing."""
        if self.is_last(step) or stopping:
            return Save.STEP
        if self.save_every and (step + 1) % self.save_every == 0:
            return Save.ROLLING
        return None


class BatchesAhead(Generic[BatchT]):
    """Step batches collected up to ``ahead`` steps before the step that trains on them (``max_steps_off_policy``).

    ``take(step, policy)`` first launches the collection of every step up to
    ``step + ahead`` not yet launched (with ``policy``, the newest), then waits for
    ``step``'s batch. Leaving the ``with`` block cancels the collections still running.
    """

    def __init__(self, collect: Callable[[int, Any], Awaitable[BatchT]], start: int, steps: int, ahead: int) -> None:
        self.collect = collect
        self.steps = steps
        self.ahead = ahead
        self.next_launch = start
        self.pending: dict[int, asyncio.Task[BatchT]] = {}

    async def take(self, step: int, policy: Any) -> BatchT:
        while self.next_launch < self.steps and self.next_launch <= step + self.ahead:
            self.pending[self.next_launch] = asyncio.ensure_future(self.collect(self.next_launch, policy))
            self.next_launch += 1
        return await self.pending.pop(step)

    def __enter__(self) -> BatchesAhead[BatchT]:
        return self

    def __exit__(self, *_exc: object) -> None:
        for task in self.pending.values():
            task.cancel()
        self.pending.clear()


#: the part of a step's wall time (``phase/<part>``) each stage of ``RLLoop.run`` counts to; the rollout stage
#: (``wait_for_batch``) is split further by its episodes' own times (``tracing.SelfTimes``)
STAGE_PARTS = {"score": "training", "advantages": "training", "train": "training", "save": "saving", "record": "other"}
#: what ``phase/*`` splits a step into; they add up to ``time/step``
PARTS = ("sampling", "environment", "reward", "training", "saving", "waiting", "other")


class StepTimer:
    """The ``time/*`` metrics of one step: the seconds of each timed stage, and of the whole step so far;
    with ``self_times``, the ``phase/*`` split of the step's wall time (``PARTS``)."""

    def __init__(self, self_times: SelfTimes | None = None) -> None:
        self.began = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.self_times = self_times

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as ``time/<name>``, and trace it as a span ``name``."""
        began = time.perf_counter()
        try:
            with span(name):
                yield
        finally:
            self.seconds[f"time/{name}"] = time.perf_counter() - began

    def metrics(self) -> dict[str, float]:
        """Every timed stage, ``time/step`` (from the timer's start until now) and, with ``self_times``, ``phase/*``."""
        metrics = {**self.seconds, "time/step": time.perf_counter() - self.began}
        if self.self_times is not None:
            metrics.update(self.phases(metrics["time/step"]))
        return metrics

    def phases(self, step_seconds: float) -> dict[str, float]:
        """The step's wall time split into ``PARTS``: the rollout stage in proportion to its episodes' own times
        (sampling, environment, reward; the rest of it is waiting), the other stages by ``STAGE_PARTS``."""
        assert self.self_times is not None
        parts = dict.fromkeys(PARTS, 0.0)
        rollouts = self.seconds.get("time/wait_for_batch", 0.0)
        own = self.self_times.take()
        spent = sum(own.values())
        for kind in ("sampling", "environment", "reward"):
            parts[kind] = rollouts * own.get(kind, 0.0) / spent if spent > 0 else 0.0
        parts["waiting"] = rollouts - sum(parts[kind] for kind in ("sampling", "environment", "reward"))
        for stage, part in STAGE_PARTS.items():
            parts[part] += self.seconds.get(f"time/{stage}", 0.0)
        parts["other"] += max(step_seconds - sum(parts.values()), 0.0)
        return {f"phase/{part}": seconds for part, seconds in parts.items()}
