"""Reward reduction, args validation and the adaptive session limiter."""

from __future__ import annotations

import asyncio

import pytest

from minds_core.base.errors import ConfigError
from minds_openreward.capacity import AdaptiveLimiter
from minds_openreward.rewards import rollout_reward
from minds_openreward.settings import parse_settings, resolve_secrets


@pytest.mark.parametrize(
    ("reduction", "rewards", "finished", "extra", "expected"),
    [
        ("sum", [1.0, 2.0, 0.5], True, {}, 3.5),
        ("mean", [1.0, 2.0, 0.0], True, {}, 1.0),
        ("max", [1.0, 2.0, 0.5], True, {}, 2.0),
        ("min", [1.0, 2.0, 0.5], True, {}, 0.5),
        ("sum", [1.0], False, {"nonterminal_reward": -2.0}, -1.0),
        ("min", [1.0], False, {"nonterminal_reward": -2.0}, -2.0),
        ("sum", [1.0], True, {"nonterminal_reward": -2.0}, 1.0),
        ("sum", [], False, {"nonterminal_reward": -0.5}, -0.5),
        ("sum", [3.0, 3.0], True, {"max_reward": 4.0}, 4.0),
        ("min", [-3.0], True, {"min_reward": -1.0}, -1.0),
    ],
)
def test_reward_reduction(reduction: str, rewards: list[float], finished: bool, extra: dict, expected: float) -> None:
    settings = parse_settings({"name": "Org/Env", "reward_reduction": reduction, **extra})
    assert rollout_reward(rewards, finished, settings) == pytest.approx(expected)


def test_no_reward_at_all_is_none() -> None:
    settings = parse_settings({"name": "Org/Env"})
    assert rollout_reward([], False, settings) is None
    assert rollout_reward([], True, settings) is None


def test_settings_report_every_problem_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings({"name": "NoOrg", "reward_reduction": "median", "num_rolouts": 3, "min_reward": 2, "max_reward": 1})
    message = str(info.value)
    assert "num_rolouts: unknown key" in message
    with pytest.raises(ConfigError) as info:
        parse_settings({"name": "NoOrg", "reward_reduction": "median", "min_reward": 2, "max_reward": 1})
    message = str(info.value)
    for part in ("'Org/Name'", "reward_reduction = 'median'", "min_reward = 2.0 is above max_reward = 1.0"):
        assert part in message
    with pytest.raises(ConfigError, match="expected an integer"):
        parse_settings({"name": "Org/Env", "max_sessions": "many"})
    with pytest.raises(ConfigError, match="num_samples = 0"):
        parse_settings({"name": "Org/Env", "splits": {"train": {"num_samples": 0}}})


def test_secrets_from_names_and_references(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", "judge-value")
    settings = parse_settings({"name": "Org/Env", "secrets": ["JUDGE_KEY"]})
    assert resolve_secrets(settings.secrets) == {"JUDGE_KEY": "judge-value"}
    settings = parse_settings({"name": "Org/Env", "secrets": {"OPENAI_API_KEY": "${JUDGE_KEY}", "plain": "literal"}})
    assert resolve_secrets(settings.secrets) == {"OPENAI_API_KEY": "judge-value", "plain": "literal"}
    monkeypatch.delenv("JUDGE_KEY")
    with pytest.raises(ConfigError, match="JUDGE_KEY is not set"):
        resolve_secrets(settings.secrets)


async def test_limiter_lowers_on_refusal_and_probes_back_up() -> None:
    limiter = AdaptiveLimiter(ceiling=5)
    for _ in range(4):
        await limiter.acquire()
    for _ in range(3):
        limiter.opened()
    await limiter.release(was_open=False)  # the 4th was refused while 3 sessions were open
    limiter.refused()
    assert limiter.limit == 3 and limiter.reductions == 1
    waiter = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await limiter.release(was_open=True)
    await asyncio.wait_for(waiter, 1)
    assert (limiter.in_flight, limiter.open, limiter.max_in_flight) == (3, 2, 4)
    for _ in range(3):
        limiter.opened()
    assert limiter.limit == 4
    for _ in range(20):
        limiter.opened()
    assert limiter.limit == 5  # never above the ceiling


async def test_unbounded_limiter_floors_at_one() -> None:
    limiter = AdaptiveLimiter()
    limiter.refused()
    assert limiter.limit == 1
