"""The ``openreward`` environment: an ORS environment's splits and tasks as minds tasks."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import aiohttp

from minds_core import ConfigError, Context, Task
from minds_openreward.capacity import AdaptiveLimiter
from minds_openreward.connection import ClientPool, Connection, connect, query, read_key, sdk_secrets
from minds_openreward.episode import OpenRewardEpisode
from minds_openreward.settings import BridgeSettings, SplitSettings, parse_settings, resolve_secrets
from minds_openreward.upload import TrajectoryUploader


class OpenRewardEnvironment:
    """Tasks come from the environment's split; each episode is one ORS session.

    ``terminal`` is the environment's terminal tool (None without one): a reply
    without tool calls is passed to it and ends the episode.
    """

    def __init__(
        self,
        settings: BridgeSettings,
        connection: Connection,
        splits: Sequence[str],
        terminal: Any,
        secrets: dict[str, Any],
        uploader: TrajectoryUploader | None = None,
    ) -> None:
        self.settings = settings
        self.connection = connection
        self.splits = list(splits)
        self.terminal = terminal
        self.secrets = secrets
        self.uploader = uploader
        self.limiter = AdaptiveLimiter(settings.max_sessions or None)
        self.clients = ClientPool(connection)
        self._ors_tasks: dict[str, Any] = {}

    def tasks(self, split: str) -> list[Task]:
        """The split's tasks, shuffled and/or cut to ``num_samples`` as configured."""
        if split not in self.splits:
            raise ConfigError(f"{self.connection.target} has no split {split!r}; its splits: {', '.join(self.splits)}")
        listed = query(self.connection, lambda env: fetch_tasks(env, split))
        tasks = []
        for index in choose(len(listed), self.settings.split(split), self.settings.seed):
            spec = listed[index]
            info = {"split": split, "index": index, "spec": spec.task_spec if spec is not None else None}
            task = Task(prompt="", info=info, id=f"{split}/{index}")
            self._ors_tasks[task.id] = spec
            tasks.append(task)
        return tasks

    def episode(self, task: Task, ctx: Context) -> OpenRewardEpisode:
        return OpenRewardEpisode(self, task, ctx)

    def session(self, task: Task) -> Any:
        """A new (not yet started) SDK session for a task from ``tasks()``, on the running loop's client."""
        if task.id not in self._ors_tasks:
            raise KeyError(f"task {task.id!r} did not come from this environment's tasks()")
        spec, client = self._ors_tasks[task.id], self.clients.environment()
        secrets = self.secrets or None
        if spec is None:
            return client.session(split=task.info["split"], index=task.info["index"], secrets=secrets)
        return client.session(task=spec, secrets=secrets)

    async def close(self) -> None:
        """Close the running loop's client and flush uploads."""
        await self.clients.close()
        if self.uploader is not None:
            await self.uploader.close()


async def fetch_tasks(env: Any, split: str) -> list[Any]:
    """The SDK tasks of a split; None for each task of an environment that serves tasks only by index."""
    try:
        return await env.list_tasks(split)
    except aiohttp.ClientResponseError as exc:
        if exc.status != 400 or "not supported" not in str(exc.message):
            raise
    return [None] * await env.num_tasks(split)


def choose(count: int, split: SplitSettings, seed: int) -> list[int]:
    """Task indices in order, or shuffled by ``seed``; at most ``num_samples`` of them."""
    indices = list(range(count))
    if split.shuffle:
        random.Random(seed).shuffle(indices)
    return indices if split.num_samples is None else indices[: split.num_samples]


async def _describe(env: Any) -> tuple[list[str], Any]:
    return await env.list_splits(), await env.terminal_tool()


def load_environment(**args: Any) -> OpenRewardEnvironment:
    """The ``openreward`` loader: validates args, checks the key and the connection before training."""
    settings = parse_settings(args)
    connection = connect(settings)
    secrets = sdk_secrets(resolve_secrets(settings.secrets))
    splits, terminal = query(connection, _describe)
    unknown = sorted(set(settings.splits) - set(splits))
    if unknown:
        raise ConfigError(f"splits: {connection.target} has no split {', '.join(map(repr, unknown))}; its splits: {', '.join(splits)}")
    uploader = None
    if settings.upload_run_name:
        upload_key = read_key(settings.upload_key_env, "the OpenReward trajectory upload")
        uploader = TrajectoryUploader(settings.upload_run_name, settings.name, upload_key)
    return OpenRewardEnvironment(settings, connection, splits, terminal, secrets, uploader)
