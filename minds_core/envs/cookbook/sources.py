"""What a checkout hands over, as minds' tasks: one ``GroupSource`` per task, each making the task's cookbook ``Env``s.

The shapes read (tinker-cookbook's classes are recognized by their bases, never imported to check):

- an ``RLDatasetBuilder`` (a chz config; async ``__call__`` -> train and optional test ``RLDataset``),
  also as a class an ``[env] id = "pkg.module:Builder"`` names, made with ``[env.args]``;
- an ``RLDataset``: every batch's ``EnvGroupBuilder`` is a task of the train split, in order;
- an ``EnvGroupBuilder`` or a list of them: each a task;
- one ``Env``: one task, each rollout playing its own deep copy;
- the seed harness's builder: ``build(sampling_client)`` returning a list of ``Env``s; task ``i`` is
  ``Env`` ``i`` of the list built with the rollout's policy sampler, each rollout playing its own copy.
"""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import Sequence
from typing import Any, Protocol

from minds_core.base.blocking import plugin_call
from minds_core.base.errors import ConfigError
from minds_core.envs.loops import run_to_completion
from minds_core.envs.sampler import PolicySampler

#: Policies whose built list of instances a seed builder keeps (off-policy rollouts may still use an older one).
BUILT_POLICIES = 4
#: The cookbook classes a loaded object may be, by name.
KINDS = ("RLDatasetBuilder", "RLDataset", "EnvGroupBuilder", "Env")


def cookbook_kind(obj: Any) -> str | None:
    """Which tinker-cookbook class (``KINDS``) ``obj`` (an instance or a class) is, by its bases; None: none."""
    cls = obj if isinstance(obj, type) else type(obj)
    names = {c.__name__ for c in cls.__mro__ if c.__module__.startswith("tinker_cookbook.")}
    return next((kind for kind in KINDS if kind in names), None)


def is_cookbook(obj: Any) -> bool:
    """Whether ``obj`` is a cookbook object minds runs (or a non-empty list of cookbook envs or group builders)."""
    if isinstance(obj, (list, tuple)):
        return bool(obj) and all(cookbook_kind(o) in ("EnvGroupBuilder", "Env") for o in obj)
    return cookbook_kind(obj) is not None and not isinstance(obj, type)


class GroupSource(Protocol):
    """Where one task's envs come from."""

    tags: tuple[str, ...]  #: the group's ``logging_tags()``
    builder: Any  #: the ``EnvGroupBuilder`` (its ``compute_group_rewards`` and ``cleanup``), or None

    async def make_envs(self, sampler: PolicySampler) -> Sequence[Any]:
        """Fresh envs of the task, for rollouts sampling from ``sampler``."""
        ...


class BuilderSource:
    """A task that is one ``EnvGroupBuilder``: ``make_envs()`` as often as rollouts need envs."""

    def __init__(self, builder: Any) -> None:
        self.builder = builder
        self.tags = tuple(str(t) for t in builder.logging_tags())

    async def make_envs(self, sampler: PolicySampler) -> Sequence[Any]:
        return list(await plugin_call(f"{type(self.builder).__qualname__}.make_envs", self.builder.make_envs))


class CopySource:
    """A task that is one ``Env``: each rollout plays a deep copy of it as loaded (an ``Env`` is single-use)."""

    builder = None
    tags: tuple[str, ...] = ()

    def __init__(self, env: Any) -> None:
        self.env = env

    async def make_envs(self, sampler: PolicySampler) -> Sequence[Any]:
        return [copy.deepcopy(self.env)]


class PolicyBuilds:
    """A seed builder's lists of ``Env``s, one per policy sampler (``build(sampling_client)`` on a copy of it)."""

    def __init__(self, obj: Any, count: int) -> None:
        self.obj, self.count = obj, count
        self._built: collections.deque[tuple[Any, list[Any]]] = collections.deque(maxlen=BUILT_POLICIES)
        self._lock = asyncio.Lock()

    async def instances(self, sampler: PolicySampler) -> list[Any]:
        async with self._lock:
            for seen, built in self._built:
                if seen is sampler.sampler:
                    return built
            made = await plugin_call(f"{type(self.obj).__qualname__}.build", copy.deepcopy(self.obj).build, sampler)
            if not isinstance(made, (list, tuple)) or len(made) != self.count:
                size = len(made) if isinstance(made, (list, tuple)) else "-"
                raise TypeError(
                    f"build(sampling_client) returned {type(made).__name__} of {size} envs for this policy, but {self.count} "
                    "at load; it must list the same tasks every time"
                )
            self._built.append((sampler.sampler, list(made)))
            return list(made)


class InstanceSource:
    """Task ``index`` of a seed builder: a copy of env ``index`` of the list built for the rollout's policy."""

    builder = None
    tags: tuple[str, ...] = ()

    def __init__(self, builds: PolicyBuilds, index: int) -> None:
        self.builds, self.index = builds, index

    async def make_envs(self, sampler: PolicySampler) -> Sequence[Any]:
        return [copy.deepcopy((await self.builds.instances(sampler))[self.index])]


def dataset_sources(dataset: Any) -> list[GroupSource]:
    """Every ``EnvGroupBuilder`` of an ``RLDataset``, batch after batch, as tasks."""
    return [BuilderSource(b) for index in range(len(dataset)) for b in dataset.get_batch(index)]


def splits_of(obj: Any) -> dict[str, list[GroupSource]]:
    """The tasks of each split a loaded cookbook object has: ``train``, and ``test`` when it gives a test dataset."""
    kind = None if isinstance(obj, (list, tuple)) else cookbook_kind(obj)
    if kind == "RLDatasetBuilder":
        made = run_to_completion(obj())
        train, test = made if isinstance(made, tuple) else (made, None)
        splits = {"train": dataset_sources(train)}
        if test is not None:
            splits["test"] = dataset_sources(test)
        return splits
    if kind == "RLDataset":
        return {"train": dataset_sources(obj)}
    if kind == "EnvGroupBuilder":
        return {"train": [BuilderSource(obj)]}
    if kind == "Env":
        return {"train": [CopySource(obj)]}
    return {"train": [BuilderSource(o) if cookbook_kind(o) == "EnvGroupBuilder" else CopySource(o) for o in obj]}


def seed_build_sources(obj: Any, count: int) -> dict[str, list[GroupSource]]:
    """The tasks of a seed builder whose ``build(sampling_client)`` listed ``count`` envs at load."""
    builds = PolicyBuilds(obj, count)
    return {"train": [InstanceSource(builds, i) for i in range(count)]}


def loaded_splits(label: str, obj: Any) -> dict[str, list[GroupSource]]:
    """``splits_of(obj)``; a call the environment makes to the hosted Tinker service itself, which minds cannot
    answer for it, is a ConfigError saying so."""
    try:
        return splits_of(obj)
    except Exception as exc:
        module = type(exc).__module__
        if module != "tinker" and not module.startswith("tinker."):
            raise
        raise ConfigError(
            f"environment {label!r}: building it called the Tinker service itself ({type(exc).__name__}: {str(exc)[:300]}), "
            "outside the run's backend, which minds cannot answer for it: give the environment what it asks for "
            "(TINKER_API_KEY for a hosted model it samples from), or change it to sample through the policy it is given"
        ) from None
