"""The self_prediction environment: arithmetic questions answered with a stated confidence."""

from __future__ import annotations

import random

from minds_core import Rubric, SingleTurnEnvironment, Task, int_arg

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



def to_task(problem: Problem) -> Task:
    """A problem as a task: the worked example and the question; the answer and metadata travel with it."""
    info = {"operation": problem.op, "difficulty": problem.difficulty, "aliases": problem.aliases}
    return Task(prompt=task_messages(problem.question), answer=str(problem.answer), info=info, id=problem.question)


def load_environment(num_examples: int = 1000, seed: int = 0) -> SingleTurnEnvironment:
    """``num_examples`` distinct problems per split; no test question appears in train."""
    num_examples = int_arg("num_examples", num_examples, 1, MAX_EXAMPLES)
    seed = int_arg("seed", seed, 0)
    rng = random.Random(seed)
    train = make_problems(num_examples, rng)
    test = make_problems(num_examples, rng, exclude={p.question for p in train})
    datasets = {"train": [to_task(p) for p in train], "test": [to_task(p) for p in test]}
    return SingleTurnEnvironment(datasets, Rubric.from_entries(REWARDS), system_prompt=SYSTEM_PROMPT)
