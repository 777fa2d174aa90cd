"""Group-level rewards: called once per group with plural names, one reward per member; failures counted."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from minds_core import Context, Rubric, SingleTurnEnvironment, Task, hookimpl
from minds_core.backends.local.model.tiny_model import tiny_model_path
from minds_core.base import logs
from minds_core.config import load_config
from minds_core.contract.plugins import load_plugins
from minds_core.contract.rubric import is_group_reward
from minds_core.envs.rewards import length_penalty
from minds_core.train import train

CALLS: list[int] = []


def count_a(completion: str) -> float:
    return float(completion.count("a"))


def tournament(completions: list[str], answers: list) -> list[float]:
    """Pairwise: the share of the other members this completion beats on the number of letters a."""
    CALLS.append(len(completions))
    n = len(completions)
    wins = [sum(c.count("a") > o.count("a") for j, o in enumerate(completions) if j != i) for i, c in enumerate(completions)]
    return [w / (n - 1) for w in wins]


def short_answer(completions):
    return [1.0] * (len(completions) - 1)  # one reward short


def exploding(completions):
    raise RuntimeError("judge unavailable")


def half_nan(completions):
    return [math.nan if i % 2 else 1.0 for i in range(len(completions))]


class GroupPlugin:
    """Environments whose rubric mixes per-rollout and group reward functions."""

    @hookimpl
    def minds_register_environments(self, register):
        tasks = {"train": [Task(prompt=f"Write a's ({i})", id=f"t{i}", answer="a") for i in range(3)]}
        register("grp_tournament", lambda: SingleTurnEnvironment(tasks, Rubric([count_a, tournament], [0.0, 1.0], ["count", "tournament"])))
        register("grp_short", lambda: SingleTurnEnvironment(tasks, Rubric([short_answer], names=["short"])))
        register("grp_exploding", lambda: SingleTurnEnvironment(tasks, Rubric([exploding], names=["exploding"])))
        register("grp_nan", lambda: SingleTurnEnvironment(tasks, Rubric([half_nan], names=["half_nan"])))


@pytest.fixture(scope="module")
def plugins():
    logs.configure("json", "warning")
    return load_plugins(extra=[("grp", GroupPlugin())])


def _run(plugins, tmp_path: Path, *overrides: str) -> list[list[dict]]:
    config = load_config(None, ["sampling.max_tokens=8", "trainer.group_size=4", "trainer.groups_per_batch=3",
                                "trainer.steps=2", "metrics.sinks=[]", "metrics.rollouts_per_step=3",
                                f"runs_dir={tmp_path}", "name=run", *overrides])
    run = Path(train(config, plugins=plugins)["run_dir"])
    return [[json.loads(line) for line in (run / name).read_text().splitlines()] for name in ("metrics.jsonl", "rollouts.jsonl")]


@pytest.mark.slow
def test_a_group_reward_is_called_once_per_group_with_every_member(plugins, tmp_path):
    CALLS.clear()
    rows, groups = _run(plugins, tmp_path, "env.id=grp_tournament")
    assert CALLS == [4] * 6  # 2 steps x 3 groups, each with its 4 rollouts
    assert len(groups) == 6
    for group in groups:
        completions = [r["completion"][-1] for r in group["rollouts"]]
        counts = [c.count("a") for c in completions]
        for count, rollout in zip(counts, group["rollouts"]):
            assert rollout["reward"] == pytest.approx(sum(count > o for o in counts) / 3)  # own count ties itself
    assert all("env/grp_tournament/reward/tournament" in r for r in rows)


@pytest.mark.parametrize(("env", "message"), [("grp_short", "group reward function short must return one reward per member (4), got 3 values"),
                                              ("grp_exploding", "RuntimeError: judge unavailable")])
@pytest.mark.slow
def test_a_failing_group_reward_fails_its_rollouts_and_is_counted(plugins, tmp_path, env, message, capsys):
    rows, groups = _run(plugins, tmp_path, f"env.id={env}", "trainer.steps=1")
    (row,) = rows
    assert row["rollouts/failed"] == 12 and row["groups/dropped_failures"] == 3 and row["train/skipped"] == 1
    assert all(message in r["error"] for g in groups for r in g["rollouts"])
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_a_non_number_from_a_group_reward_is_an_invalid_part(plugins, tmp_path):
    (row,), _ = _run(plugins, tmp_path, "env.id=grp_nan", "trainer.steps=1")
    assert row["rollouts/invalid_reward"] == 6 and row["rollouts/failed"] == 0
    (row,), _ = _run(plugins, tmp_path / "fail", "env.id=grp_nan", "trainer.steps=1", "rollout.invalid_reward=fail")
    assert row["rollouts/failed"] == 6


def test_group_functions_are_told_apart_by_their_plural_arguments():
    assert is_group_reward(tournament) and is_group_reward(lambda prompts, ctx: [])
    assert not is_group_reward(count_a) and not is_group_reward(lambda completion, answer: 1)
    rubric = Rubric([count_a, tournament], [2.0, 1.0], ["count", "tournament"])
    single = asyncio.run(rubric.score({"completion": "aa", "answer": "a"}))
    assert single.total == 4.0 and single.parts == {"count": 2.0}  # the group function is not called per rollout
    scores = asyncio.run(rubric.score_group({"completions": ["a", "aaa", ""], "answers": ["a"] * 3}, 3))
    assert [s.total for s in scores] == [0.5, 1.0, 0.0]


def test_length_penalty_is_kimis_length_reward_in_float64():
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    ctx = Context(sampler=None, tokenizer=tokenizer, service=None, renderer=None, base_model="minds-tiny")
    completions = ["ab", "abcdef", "abcd", "abcdefghij"]  # the tiny tokenizer is byte-level: 2, 6, 4, 10 tokens
    expected = [0.5 - (n - 2) / (10 - 2) for n in (2, 6, 4, 10)]
    assert length_penalty(completions, ctx) == pytest.approx(expected, abs=1e-15)
    assert length_penalty(["xy", "zw"], ctx) == [0.0, 0.0]


@pytest.mark.slow
def test_length_penalty_is_usable_from_config(plugins, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("env:\n  id: grp_tournament\n  extra_rewards: [{name: minds.length_penalty, weight: 0.5}]\n")
    config_obj = load_config(config, ["sampling.max_tokens=8", "trainer.group_size=4", "trainer.groups_per_batch=3",
                                      "trainer.steps=1", "metrics.sinks=[]", f"runs_dir={tmp_path}", "name=run"])
    run = Path(train(config_obj, plugins=plugins)["run_dir"])
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert "env/grp_tournament/reward/minds.length_penalty" in row
    assert -0.5 <= row["env/grp_tournament/reward/minds.length_penalty"] <= 0.5
