"""What travels to a Ray worker for one episode, and what it checks before playing it."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import attrs

from minds_core import Task


class WorkerRefused(Exception):
    """A worker that cannot play episodes of this run (versions differ, a key is missing); stops the run."""


@attrs.frozen
class Endpoint:
    """Where workers sample: a Tinker API URL and the NAME of the variable holding its key (never the key)."""

    url: str  #: the service's base URL ('' = the SDK's default, the hosted service)
    key_env: str  #: the environment variable a worker reads the API key from


@attrs.frozen
class EpisodeOrder:
    """One rollout, from its attempt ``attempt`` on, as plain data (the environment is built on the worker from ``env``)."""

    env: Any  #: the environment's ``EnvConfig`` (id and args)
    task: Task  #: the task to play
    seed: int | None  #: the rollout's sampling seed (attempt k adds 7919 * (k - 1), as in process)
    attempt: int  #: the first attempt to play (1, or past those lost with a worker)
    step: int  #: the training step (``Context.step``)
    params: Any  #: the environment's ``tinker.types.SamplingParams``
    rollout: Any  #: the run's ``RolloutConfig`` (budgets, timeout, invalid-reward policy)
    base_model: str  #: the model sampled (and whose tokenizer renders the chat)
    chat_template_args: dict[str, Any]  #: ``model.chat_template_args``
    lora_rank: int  #: ``model.lora_rank`` (``Context.lora_rank``)
    sampler_path: str | None  #: the policy's sampler weights (None: the base model)
    policy_checkpoint: str | None  #: the policy's saved state, when the environment needs one
    endpoint: Endpoint  #: where to sample
    versions: dict[str, str]  #: the driver's minds distributions and their versions


@attrs.frozen
class WorkerSetup:
    """What a worker loads when it starts (``Player.ready``), before step 0: what every episode of the run shares."""

    versions: dict[str, str]  #: the driver's minds distributions and their versions
    endpoint: Endpoint  #: where to sample
    base_model: str  #: the model sampled (its tokenizer renders the chat)
    chat_template_args: dict[str, Any]  #: ``model.chat_template_args``
    envs: list[Any]  #: every environment's ``EnvConfig`` (id and args), built on the worker


def installed_versions(distributions: list[str]) -> dict[str, str]:
    """Each distribution's installed version ('not installed' when it is not)."""
    found = {}
    for name in distributions:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def check_versions(driver: dict[str, str], node: str) -> None:
    """A WorkerRefused naming both sides when this worker's minds distributions differ from the driver's."""
    here = installed_versions(sorted(driver))
    differ = [f"{name} {driver[name]} on the driver, {here[name]} on the worker" for name in sorted(driver) if here[name] != driver[name]]
    if differ:
        raise WorkerRefused(
            f"the Ray worker on node {node} has other minds versions than the driver: {'; '.join(differ)}. "
            "Install the same minds-core and plugins on every node of the cluster"
        )
