"""The self_prediction environment: arithmetic questions answered with a stated confidence."""

from __future__ import annotations

import random
from typing import Any

import attrs

from minds_core import Rubric, SingleTurnEnvironment, Task, arg, at_least, env_args, within
from minds_self_prediction.problems import Problem, make_problems
from minds_self_prediction.prompts import SYSTEM_PROMPT, task_messages
from minds_self_prediction.scoring import accuracy_reward, calibration_reward, format_reward

#: Registered name, function and weight in the environment's rubric.
REWARDS = (
    ("self_prediction.format", format_reward, 0.2),
    ("self_prediction.accuracy", accuracy_reward, 0.5),
    ("self_prediction.calibration", calibration_reward, 0.3),
)

SPLITS = ("train", "test")
MAX_EXAMPLES = 1_000_000


@attrs.frozen
class SelfPredictionArgs:
    """The ``[env.args]`` of self_prediction."""

    num_examples: int = arg(1000, within(1, MAX_EXAMPLES), doc="distinct problems per split")
    seed: int = arg(0, at_least(0), doc="seed of the problems drawn")


def to_task(problem: Problem) -> Task:
    """A problem as a task: the worked example and the question; the answer and metadata travel with it."""
    info = {"operation": problem.op, "difficulty": problem.difficulty, "aliases": problem.aliases}
    return Task(prompt=task_messages(problem.question), answer=str(problem.answer), info=info, id=problem.question)


def load_environment(**args: Any) -> SingleTurnEnvironment:
    """``num_examples`` distinct problems per split; no test question appears in train (see SelfPredictionArgs)."""
    chosen = env_args(SelfPredictionArgs, args, env="self_prediction")
    rng = random.Random(chosen.seed)
    train = make_problems(chosen.num_examples, rng)
    test = make_problems(chosen.num_examples, rng, exclude={p.question for p in train})
    datasets = {"train": [to_task(p) for p in train], "test": [to_task(p) for p in test]}
    return SingleTurnEnvironment(datasets, Rubric.from_entries(REWARDS), system_prompt=SYSTEM_PROMPT)
