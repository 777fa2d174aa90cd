"""The ghost_trace environment: one task per target word, scored by the latent reward."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import attrs

from minds_core import Rubric, SingleTurnEnvironment, Task, arg, at_least, env_args, within
from minds_ghost_trace.prompts import SYSTEM_PROMPT, task_prompt
from minds_ghost_trace.reward import latent_logprob
from minds_ghost_trace.words import WORDS

REWARD_NAME = "ghost_trace.latent_logprob"

#: Share of the word bank held out for the "test" split.
TEST_FRACTION = 0.2

SPLITS = ("train", "test")
MAX_EXAMPLES = 1_000_000


@attrs.frozen
class GhostTraceArgs:
    """The ``[env.args]`` of ghost_trace."""

    num_examples: int = arg(256, within(1, MAX_EXAMPLES), doc="tasks per split (words repeat past the bank)")
    seed: int = arg(0, at_least(0), doc="seed of the train/test cut of the word bank and of the task order")


def split_words(seed: int) -> dict[str, tuple[str, ...]]:
    """The bank shuffled by ``seed`` and cut into disjoint train and test words."""
    words = list(WORDS)
    random.Random(seed).shuffle(words)
    n_test = max(1, round(len(words) * TEST_FRACTION))
    return {"train": tuple(words[n_test:]), "test": tuple(words[:n_test])}


def make_tasks(words: Sequence[str], num_examples: int, seed: int) -> list[Task]:
    """``num_examples`` tasks cycling through ``words``, each pass in a fresh seeded order."""
    rng = random.Random(seed)
    tasks: list[Task] = []
    while len(tasks) < num_examples:
        order = list(words)
        rng.shuffle(order)
        for word in order[: num_examples - len(tasks)]:
            tasks.append(Task(prompt=task_prompt(word), answer=word, id=f"{word}/{len(tasks)}"))
    return tasks


def load_environment(**args: Any) -> SingleTurnEnvironment:
    """The ghost_trace environment: ``num_examples`` tasks per split, drawn with ``seed`` (see GhostTraceArgs)."""
    chosen = env_args(GhostTraceArgs, args, env="ghost_trace")
    words = split_words(chosen.seed)
    datasets = {split: make_tasks(words[split], chosen.num_examples, chosen.seed + i) for i, split in enumerate(SPLITS)}
    rubric = Rubric([latent_logprob], [1.0], [REWARD_NAME])
    return SingleTurnEnvironment(datasets, rubric, system_prompt=SYSTEM_PROMPT)
