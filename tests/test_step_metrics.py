"""A step's metrics: summed over the rollout's steps; one that is not a number fails the rollout naming its key."""

from __future__ import annotations

import asyncio

import pytest

from minds_core import StepResult
from minds_core.episodes.rollout import play_episode


class _Driven:
    """A self-driving episode (the shape a bridge returns) whose one result carries ``metrics``."""

    def __init__(self, metrics: dict) -> None:
        self.metrics = metrics

    async def run(self, conversation: object) -> StepResult:
        return StepResult(reward=1.0, metrics=self.metrics)


def test_step_metrics_are_floats_and_one_that_is_not_a_number_is_named():
    assert asyncio.run(play_episode(_Driven({"judge/score": 2, "tool_calls": True}), None)) == ([1.0], {"judge/score": 2.0, "tool_calls": 1.0})
    with pytest.raises(TypeError, match=r"StepResult.metrics\['judge/verdict'\] is str 'pass': a step metric must be a number"):
        asyncio.run(play_episode(_Driven({"judge/verdict": "pass"}), None))
