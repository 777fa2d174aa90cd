"""What each hook registers: one typed protocol per kind of registered object.

``minds_core.hookspecs`` names the hooks; this module says what the objects
they register must look like. Every name a hook registers follows one rule
(NAME_RULE): lower-case words joined by ``_``; a reward function's name is
namespaced by a dot, ``<environment or plugin>.<name>`` (the core's own are
``minds.<name>``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from minds_core.envs.types import Environment, Task

if TYPE_CHECKING:
    from minds_core.config import EnvConfig, RunConfig
    from minds_core.rollout import Group
    from minds_core.session import Policy, Session

#: The rule for registered names; reward functions carry a ``namespace.`` prefix (REWARD_NAME_RULE).
NAME_RULE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
REWARD_NAME_RULE = re.compile(rf"{NAME_RULE.pattern}\.{NAME_RULE.pattern}")


class Register(Protocol):
    """The callback every hook receives; call it once per part the plugin provides."""

    def __call__(self, name: str, obj: Any, description: str = "") -> None:
        """Register ``obj`` under ``name``.

        :param name: the name configs and the command line use (see NAME_RULE);
            unique per kind across all plugins.
        :param obj: the part, shaped as this module's protocol for the hook's kind.
        :param description: one line shown by ``minds plugins``.
        """


class OpenEnvironment(Protocol):
    """Builds another environment by id, as ``[env] id`` would; given to loaders that ask for it.

    A loader that declares a keyword parameter named ``open_environment`` receives
    this (the name is reserved: ``[env.args]`` cannot set it), so that an
    environment wrapping another one never loads the plugins itself.
    """

    def __call__(self, env_id: str, args: Mapping[str, Any]) -> Environment:
        """The environment ``env_id`` (a registered name or a path) built with ``args``.

        :param env_id: what an ``[env] id`` may hold.
        :param args: that environment's ``[env.args]``.
        """
        ...


class EnvironmentLoader(Protocol):
    """Builds an environment from the ``[env.args]`` table of a config."""

    def __call__(self, **args: Any) -> Environment:
        """:param args: the ``[env.args]`` table as keyword arguments (plus ``open_environment`` when declared)."""
        ...


class RewardFunction(Protocol):
    """Scores one rollout (or, naming a plural input, a whole group); sync or async.

    The function declares the inputs it wants by parameter name (see
    ``REWARD_INPUTS`` and ``GROUP_REWARD_INPUTS`` in ``minds_core``); asking
    for any other name without a default is a ConfigError when the rubric is
    built. A registered class is built once per rubric entry with the entry's
    ``args``; its instance is the reward function.
    """

    def __call__(self, **inputs: Any) -> float | Sequence[float] | Awaitable[float | Sequence[float]]:
        """:param inputs: the inputs the function names, by name.

        Returns a number (per-rollout), or one number per group member (group
        functions); anything but a finite number counts 0 and is reported.
        """
        ...


class AdvantageEstimator(Protocol):
    """Turns the rewards of one group (the rollouts of one task) into advantages."""

    def __call__(self, rewards: Sequence[float]) -> list[float]:
        """:param rewards: one reward per successful rollout of the group; returns one advantage each."""
        ...


class LossFunction(Protocol):
    """The function inside a ``CustomLoss``, run on the client through ``forward_backward_custom``."""

    def __call__(self, data: list[Any], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
        """:param data: the batch as ``tinker.Datum`` objects.
        :param logprobs: per datum, a torch tensor (requiring grad) of its target tokens' log-probabilities.

        Returns the scalar loss tensor and metrics to log.
        """
        ...


class MetricSink(Protocol):
    """Receives one flat record per training step, then a summary at the end."""

    def write(self, record: dict[str, Any]) -> None:
        """:param record: the step's metrics, flat keys such as ``reward/mean``."""

    def close(self, summary: dict[str, Any]) -> None:
        """:param summary: the run's summary (also after an error or Ctrl-C)."""


class SinkFactory(Protocol):
    """Makes a metric sink for one run."""

    def __call__(self, config: RunConfig, run_dir: Path) -> MetricSink:
        """:param config: the run's configuration.
        :param run_dir: the run's folder (``runs/<name>``), already created.
        """
        ...


@attrs.frozen
class BackendFit:
    """A backend's answer to ``backend = "auto"``: whether it can serve this run, and why."""

    serves: bool  #: whether this backend can serve the run's model with the run's settings
    reason: str  #: one sentence, logged when ``auto`` picks a backend (never a secret)
    preference: int = 0  #: among backends that serve, the highest preference wins (ties: by name)


class BackendFactory(Protocol):
    """Makes the training/sampling service of a run (an object with the ``tinker.ServiceClient`` methods).

    It may also have ``can_serve(config) -> BackendFit``; ``backend = "auto"``
    asks every registered backend that has it and picks among those that serve.
    """

    def __call__(self, config: RunConfig, run_dir: Path) -> Any:
        """:param config: the run's configuration.
        :param run_dir: the run's folder (may not exist yet).

        Returns the service, or an awaitable of it (to check a connection on the run's event loop).
        """
        ...


class EnvironmentAdapter(Protocol):
    """Turns an object of another framework, returned by a loose ``load_environment()``, into an Environment."""

    def __call__(self, obj: Any, env_id: str) -> Environment | None:
        """:param obj: what the loose module's ``load_environment(**args)`` returned.
        :param env_id: the ``[env] id`` it came from (for messages).

        Returns None when the object is not this adapter's kind.
        """
        ...


@attrs.frozen
class GroupOrder:
    """One group of rollouts the loop (or an evaluation) hands to a rollout executor.

    Everything here is plain data: a remote executor sends it to its workers as it is
    (the environment object never travels; a worker builds its own from ``env``).
    """

    env_index: int  #: the environment's place in ``Session.envs`` (its loaded object and ``Session.settings`` entry)
    env: EnvConfig  #: the environment's config entry: ``id`` and ``args``, what a worker builds it from
    env_name: str  #: what metrics and logs call the environment
    task: Task  #: the task every rollout of the group plays
    group_size: int  #: rollouts of the task
    seed: int | None  #: rollout ``i`` samples with seed ``seed + i`` (None: unseeded)
    max_failing: int  #: failed rollouts the group may have before it is dropped
    step: int  #: the training step the rollouts belong to (``Context.step``)


class RolloutExecutor(Protocol):
    """Runs groups of episodes somewhere (this process, a cluster) and returns them as ``Group`` records.

    Sampling settings, timeouts, retries and budgets are the session's (``Session.settings``, per
    environment); the policy to sample from is the ``Policy`` handed to ``run_groups``.
    """

    #: Whether workers sample from a saved path (``Policy.sampler_path``): the session then saves
    #: each policy's sampler weights (``save_weights_for_sampler``) as it snapshots them.
    needs_sampler_path: bool

    async def run_groups(self, orders: Sequence[GroupOrder], policy: Policy) -> list[Group]:
        """:param orders: the groups to roll out.
        :param policy: the policy whose sampler (``sampler``; ``sampler_path`` on another machine) samples them.

        Returns one ``Group`` per order, in order, with every rollout: finished, failed (its
        ``error`` says why, ``attempts`` how often it was tried) or timed out; dropped by the
        same rules as in process (``max_failing``, constant rewards). Raises only for what
        stops the run (a ``MindsError`` for a misconfigured cluster, say).
        """
        ...

    async def close(self) -> None:
        """Release what the executor holds (workers, servers); called once, when the session ends."""


class ExecutorFactory(Protocol):
    """Makes the rollout executor of one session."""

    def __call__(self, session: Session) -> RolloutExecutor | Awaitable[RolloutExecutor]:
        """:param session: the open session (its config, environments, service and settings).

        Returns the executor, or an awaitable of it (to connect to a cluster on the run's event
        loop); raise ``minds_core.UsageError`` for an unreachable cluster or a missing package.
        """
        ...
