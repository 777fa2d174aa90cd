"""A tinker-cookbook environment as a minds ``Environment``: its groups as tasks, its envs as episodes.

Each task is one ``EnvGroupBuilder`` (or one ``Env``; see ``sources``). minds' group size decides how
many rollouts a task gets (``trainer.group_size`` or ``env.group_size``): the rollouts of a task take
envs from the envs its ``make_envs()`` made, calling it again when they are used up (a retry takes a
fresh env). Once the group finished, the builder's ``compute_group_rewards`` (when it overrides
the cookbook's) gets the group's trajectories and envs, and its ``cleanup()`` runs;
``logging_tags()`` become the tasks' ``tags``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Mapping, Sequence
from typing import Any

from minds_core.base.blocking import plugin_call
from minds_core.contract.environment import Context, EpisodeConversation, Task
from minds_core.envs.cookbook.episode import CookbookEpisode, Played
from minds_core.envs.cookbook.sources import GroupSource
from minds_core.envs.sampler import PolicySampler

#: Groups whose unplayed envs and finished rollouts an environment keeps at most (a process that plays but never scores).
KEPT_GROUPS = 1024


def _trim(table: collections.OrderedDict) -> None:
    while len(table) > KEPT_GROUPS:
        table.popitem(last=False)


class PlayedElsewhere:
    """What ``compute_group_rewards`` gets for an ``Env`` played in another process (a Ray worker): the
    trajectory came back, the env did not; using it raises, naming why."""

    def __init__(self, builder: str) -> None:
        self._builder = builder

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            f"{self._builder}.compute_group_rewards read .{name} of an Env played in another process (a cluster rollout "
            "executor), which stays there; only the trajectories come back. Train this environment with "
            "rollout.executor = 'local', or score from the trajectories alone"
        )


def overrides(obj: Any, method: str) -> bool:
    """Whether ``obj``'s class defines ``method`` itself rather than inheriting tinker-cookbook's default."""
    for cls in type(obj).__mro__:
        if method in vars(cls):
            return not cls.__module__.startswith("tinker_cookbook.rl.types")
    return False


class CookbookEnvironment:
    """The tasks of a cookbook dataset (or builder, or env) per split, played by ``CookbookEpisode``s."""

    def __init__(self, label: str, splits: Mapping[str, Sequence[GroupSource]]) -> None:
        self.label = label
        self.splits = {split: list(sources) for split, sources in splits.items()}
        # (task id, sampler id) -> envs made, not yet played; task id -> what its finished rollouts left. Both are
        # emptied when the group is scored; in a process that never scores groups (a Ray worker) the oldest go first.
        self._pools: collections.OrderedDict[tuple[str, int], list[Any]] = collections.OrderedDict()
        self._played: collections.OrderedDict[str, list[Played]] = collections.OrderedDict()
        self._lock = asyncio.Lock()

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self.splits:
            raise KeyError(f"the cookbook environment {self.label} has no {split!r} split (it has: {', '.join(self.splits)})")
        return [
            Task(prompt="", id=f"{split}-{i}", info={"split": split, "index": i}, tags=source.tags)
            for i, source in enumerate(self.splits[split])
        ]

    def source(self, task: Task) -> GroupSource:
        return self.splits[task.info["split"]][task.info["index"]]

    def episode(self, task: Task, ctx: Context) -> CookbookEpisode:
        return CookbookEpisode(self, task, ctx)

    async def take_env(self, task: Task, sampler: PolicySampler) -> Any:
        """An env of ``task`` no rollout played yet (``make_envs()`` again when none is left)."""
        key = (task.id, id(sampler.sampler))
        async with self._lock:
            pool = self._pools.setdefault(key, [])
            _trim(self._pools)
            if not pool:
                made = list(await self.source(task).make_envs(sampler))
                if not made:
                    raise ValueError(f"make_envs() of task {task.id} returned no envs")
                pool.extend(made)
            return pool.pop(0)

    def keep(self, task: Task, played: Played) -> None:
        """Remember a finished rollout of ``task`` for its group's rewards."""
        self._played.setdefault(task.id, []).append(played)
        _trim(self._played)

    async def group_rewards(self, task: Task, conversations: Sequence[EpisodeConversation]) -> list[tuple[float, dict[str, float]]]:
        """The builder's ``compute_group_rewards`` over the group's trajectories and envs (0 when it keeps the
        cookbook's default); then its ``cleanup()``. An env played in another process is a ``PlayedElsewhere``."""
        played = {id(p.conversation): p for p in self._played.pop(task.id, [])}
        for key in [key for key in self._pools if key[0] == task.id]:
            del self._pools[key]
        builder = self.source(task).builder
        try:
            if builder is None or not overrides(builder, "compute_group_rewards"):
                return [(0.0, {}) for _ in conversations]
            trajectories = [c.record for c in conversations]
            if any(t is None for t in trajectories):
                raise RuntimeError("a rollout of the group kept no cookbook Trajectory (was it played by a CookbookEpisode?)")
            envs = [played[id(c)].env if id(c) in played else PlayedElsewhere(type(builder).__name__) for c in conversations]
            answered = await builder.compute_group_rewards(trajectories, envs)
            return [(float(reward), {str(k): float(v) for k, v in metrics.items()}) for reward, metrics in answered]
        finally:
            if builder is not None:
                await plugin_call(f"{type(builder).__qualname__}.cleanup", builder.cleanup)
