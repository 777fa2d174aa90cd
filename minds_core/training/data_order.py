"""Seeded data order: which (environment, task) each group of each step uses.

The order depends only on the seed, the environments' weights and task counts,
so a resumed run sees exactly the batches the interrupted run would have seen.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class DataOrder:
    """Draws environments by weight and walks each environment's tasks in seeded epochs."""

    def __init__(self, seed: int, weights: Sequence[float], task_counts: Sequence[int], groups_per_batch: int) -> None:
        if any(n == 0 for n in task_counts):
            raise ValueError("every environment needs at least one task")
        self.seed = seed
        self.weights = list(weights)
        self.task_counts = list(task_counts)
        self.groups_per_batch = groups_per_batch

    def _env_choices(self, step: int) -> list[int]:
        rng = random.Random(f"{self.seed}:envs:{step}")
        return rng.choices(range(len(self.weights)), weights=self.weights, k=self.groups_per_batch)

    def _task(self, env: int, draw: int) -> int:
        n = self.task_counts[env]
        epoch, offset = divmod(draw, n)
        order = list(range(n))
        random.Random(f"{self.seed}:tasks:{env}:{epoch}").shuffle(order)
        return order[offset]

    def batch(self, step: int) -> list[tuple[int, int]]:
        """(environment index, task index) for each group of ``step``."""
        draws = [0] * len(self.weights)
        for earlier in range(step):
            for env in self._env_choices(earlier):
                draws[env] += 1
        out = []
        for env in self._env_choices(step):
            out.append((env, self._task(env, draws[env])))
            draws[env] += 1
        return out
