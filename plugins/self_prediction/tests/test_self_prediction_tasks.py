"""The arithmetic task set: distinct questions, a share of huge operands, exact answers."""

import random

import pytest

from minds_core.base.errors import ConfigError
from minds_self_prediction.environment import REWARDS, load_environment
from minds_self_prediction.problems import HUGE_RANGE, Problem, make_problems


def test_problem_answer_difficulty_and_aliases() -> None:
    assert Problem(406, "-", 519).answer == -113
    assert Problem(406, "-", 519).difficulty == "medium"
    assert Problem(7, "*", 8).difficulty == "tiny"
    assert Problem(7, "*", 8).aliases == []
    big = Problem(12_000_000, "*", 3)
    assert big.answer == 36_000_000
    assert big.difficulty == "huge"
    assert big.aliases == ["36,000,000"]
    assert Problem(0, "-", 1500).aliases == ["-1,500"]


def test_problems_are_distinct_and_about_15_percent_huge() -> None:
    problems = make_problems(2000, random.Random(0))
    assert len({p.question for p in problems}) == 2000
    huge = [p for p in problems if p.difficulty == "huge"]
    assert 0.11 < len(huge) / len(problems) < 0.19
    assert all(HUGE_RANGE[0] <= min(p.a, p.b) for p in huge)
    assert {p.op for p in problems} == {"+", "-", "*"}


def test_tasks_carry_answer_and_metadata() -> None:
    env = load_environment(num_examples=300, seed=2)
    tasks = env.tasks("train")
    assert len(tasks) == 300
    negative = [t for t in tasks if t.answer.startswith("-")]
    assert negative, "subtraction should produce negative answers"
    task = tasks[0]
    question = task.prompt[-1]["content"]
    a, op, b = question.removeprefix("What is ").removesuffix("?").split()
    assert task.answer == str(Problem(int(a), op, int(b)).answer)
    assert task.info["operation"] == op
    assert [m["role"] for m in task.prompt] == ["user", "assistant", "user"]


def test_splits_are_disjoint_and_deterministic() -> None:
    env = load_environment(num_examples=200, seed=9)
    train = [t.id for t in env.tasks("train")]
    assert set(train).isdisjoint(t.id for t in env.tasks("test"))
    assert train == [t.id for t in load_environment(num_examples=200, seed=9).tasks("train")]


@pytest.mark.parametrize(("args", "where"), [({"num_examples": -1}, "num_examples"), ({"num_examples": 10**9}, "num_examples"), ({"seed": 1.5}, "seed")])
def test_bad_args_name_the_key(args: dict, where: str) -> None:
    with pytest.raises(ConfigError, match=rf"env\.args\.{where} = .*: must be an integer"):
        load_environment(**args)


def test_rubric_weights() -> None:
    rubric = load_environment(num_examples=1).rubric
    assert list(zip(rubric.names, rubric.weights)) == [(name, weight) for name, _, weight in REWARDS]
    assert rubric.weights == [0.2, 0.5, 0.3]
