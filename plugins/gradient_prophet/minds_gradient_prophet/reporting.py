"""Single-turn episodes whose reward functions can report metrics, and the shared logger."""

from __future__ import annotations

from typing import Any

from minds_core.envs import Context, SingleTurnEnvironment, StepResult, Task
from minds_core.envs.single_turn import SingleTurnEpisode
from minds_core.logs import get_logger

log = get_logger("gradient_prophet")

_METRICS = "metrics"


def report(state: dict[str, Any], name: str, value: float) -> None:
    """Record a metric of this rollout from inside a reward function (summed if repeated)."""
    metrics = state.setdefault(_METRICS, {})
    metrics[name] = metrics.get(name, 0.0) + float(value)


def reported(state: dict[str, Any]) -> dict[str, float]:
    """The metrics reward functions reported into ``state``."""
    return dict(state.get(_METRICS, {}))


class ReportingEpisode(SingleTurnEpisode):
    """A single-turn episode that adds the metrics its reward functions reported."""

    async def step(self, action: str) -> StepResult:
        result = await super().step(action)
        result.metrics.update(reported(self.state))
        return result


class ReportingEnvironment(SingleTurnEnvironment):
    """A single-turn environment whose episodes report reward-function metrics."""

    def episode(self, task: Task, ctx: Context) -> ReportingEpisode:
        return ReportingEpisode(self, task, ctx)
