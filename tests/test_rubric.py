"""Rubrics and the single-turn helper: argument injection, async rewards, invalid parts, reported metrics."""

from __future__ import annotations

import asyncio
import math

import pytest

from minds_core import Rubric, SingleTurnEnvironment, Task, report_metric
from minds_core.contract.rubric import INVALID_PARTS_METRIC, as_reward, call_with_available


def test_reward_functions_get_what_they_name():
    seen = {}

    def wants(answer, completion):
        seen.update(answer=answer, completion=completion)
        return 1

    call_with_available(wants, {"answer": "7", "completion": "8", "ctx": None})
    assert seen == {"answer": "7", "completion": "8"}
    with pytest.raises(TypeError, match="asks for 'score'"):
        call_with_available(lambda score: score, {"completion": ""})


@pytest.mark.parametrize(("value", "expected"), [(1, 1.0), (True, 1.0), ("2.5", 2.5), (None, None), (math.nan, None), ("x", None), (math.inf, None)])
def test_as_reward(value, expected):
    assert as_reward(value) == expected


def test_single_turn_episode_weights_parts_counts_invalid_ones_and_reports_metrics():
    async def slow_exact(completion, answer, state):
        await asyncio.sleep(0)
        report_metric(state, "checked", 1)
        return float(completion == answer)

    rubric = Rubric([slow_exact, lambda completion: len(completion), lambda: "not a number"], [2.0, 0.5, 1.0], ["exact", "len", "broken"])
    env = SingleTurnEnvironment({"train": [Task(prompt="say 4", answer="4")]}, rubric, system_prompt="be brief")
    episode = env.episode(env.tasks("train")[0], ctx=None)
    assert episode.initial_observation() == [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "say 4"}]
    result = asyncio.run(episode.step("4"))
    assert result.done and result.reward == pytest.approx(2.0 * 1 + 0.5 * 1)
    assert result.metrics == {"reward/exact": 1.0, "reward/len": 1.0, "checked": 1.0, INVALID_PARTS_METRIC: 1.0}
    with pytest.raises(KeyError, match="no split 'test'"):
        env.tasks("test")

