"""What each hook registers: one typed protocol per kind of registered object.

``minds_core.contract.hookspecs`` names the hooks; this module says what the objects
they register must look like. Every name a hook registers follows one rule
(NAME_RULE): lower-case words joined by ``_``; a reward function's name is
namespaced by a dot, ``<environment or plugin>.<name>`` (the core's own are
``minds.<name>``).
"""

from __future__ import annotations

import inspect
import re
import reprlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs

from minds_core.contract.environment import Environment, Task

if TYPE_CHECKING:
    from minds_core.config import EnvConfig, RunConfig
    from minds_core.episodes.groups import Group
    from minds_core.session.session import Policy, Session

@attrs.frozen
class CustomLoss:
    """A loss computed on the client: ``fn(data, logprobs) -> (loss, metrics)``.

    ``logprobs[i]`` is a torch tensor (requires grad) of the target-token
    log-probabilities of ``data[i]``; the loss is a scalar tensor. ``inputs``
    names the datum inputs ``fn`` reads beyond ``target_tokens``, ``logprobs``
    and ``advantages`` (e.g. ``("sequence_ratio_mask",)``), so every datum carries them.
    """

    fn: Callable[[list[Any], list[Any]], tuple[Any, dict[str, float]]]
    inputs: tuple[str, ...] = attrs.field(default=(), converter=tuple)


#: The rule for registered names; reward functions carry a ``namespace.`` prefix (REWARD_NAME_RULE).
NAME_RULE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
REWARD_NAME_RULE = re.compile(rf"{NAME_RULE.pattern}\.{NAME_RULE.pattern}")

Part_contra = TypeVar("Part_contra", contravariant=True)


class Register(Protocol[Part_contra]):
    """The callback every hook receives, typed by what its hook registers; call it once per part the plugin provides.

    Each hook's ``register`` is a ``Register[<that kind's protocol>]`` (``Register[EnvironmentLoader]``, ...),
    so that a type checker sees what the object must be. Registration checks it too: a name that breaks
    its rule or an object minds cannot call as its kind's protocol is not registered, and the plugin is
    reported broken.
    """

    def __call__(self, name: str, obj: Part_contra, description: str = "") -> None:
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

    # Optional: ``check(config) -> None``, raising ``minds_core.UsageError`` (or ``ConfigError``) when the sink cannot
    # start with ``config`` (a missing package or setting). minds calls it with the names check, before any service
    # opens or run folder is made, and on ``--dry-run``, so such a run fails in seconds and writes nothing.


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
    And it may have ``export_adapter(config, service, checkpoint, out_dir) -> str``
    (see ``BackendExport``), which ``minds export`` asks for a checkpoint's files.
    """

    def __call__(self, config: RunConfig, run_dir: Path) -> Any:
        """:param config: the run's configuration.
        :param run_dir: the run's folder (may not exist yet).

        Returns the service, or an awaitable of it (to check a connection on the run's event loop).
        """
        ...


class BackendExport(Protocol):
    """A backend factory's optional ``export_adapter``: a checkpoint of its service as a PEFT adapter's files."""

    def export_adapter(self, config: RunConfig, service: Any, checkpoint: str, out_dir: Path) -> str:
        """:param config: the config of the run that saved the checkpoint (or the one given with ``--config``).
        :param service: the open service this factory made for the command (from ``__call__``).
        :param checkpoint: the ``tinker://`` path: the saved state when the run recorded one, else the sampler weights.
        :param out_dir: an empty folder to write ``adapter_config.json`` and ``adapter_model.safetensors`` into.

        Returns the base model's name (written into ``adapter_config.json`` when the files do not name it).
        Raise ``UsageError`` for a checkpoint that cannot be exported, saying why.
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
    # Optional: ``startup_seconds: float | None``, the seconds the executor took to start its workers before step 0
    # (a run's first metrics line has it as ``executor/startup_seconds``); absent or None: nothing to start.

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


@attrs.frozen
class Contract:
    """What registration checks of one kind of part: its names' rule and how minds calls its objects."""

    protocol: Any  #: what the kind's hook takes (its ``register`` is a ``Register[protocol]``)
    call: str  #: how minds calls an object of the kind, for messages: ``loader(**args) (an EnvironmentLoader)``
    positional: int | None  #: the positional arguments minds passes it; None: keyword arguments only
    name_rule: re.Pattern[str] = NAME_RULE  #: the rule the kind's names follow
    methods: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)  #: optional methods minds calls when present -> their positional arguments

    def problems(self, obj: Any) -> list[str]:
        """Why minds could not call ``obj`` (and its optional methods) as this kind; empty when it can."""
        found = [_call_problem(obj, self.call, self.positional)]
        for method, arguments in self.methods.items():
            if hasattr(obj, method):
                found.append(_call_problem(getattr(obj, method), f"{method}({', '.join(arguments)})", len(arguments)))
        return [problem for problem in found if problem]


class LossContract(Contract):
    """A loss is the name of a loss the service computes, or a ``CustomLoss`` whose function minds calls."""

    def problems(self, obj: Any) -> list[str]:
        if isinstance(obj, CustomLoss):
            return super().problems(obj.fn)
        if isinstance(obj, str):
            return [] if obj else ["the loss is an empty str; name a loss the service computes, such as 'ppo'"]
        return [f"{_shown(obj)} is neither the name of a loss the service computes (a str) nor a CustomLoss"]


#: Registry kind -> what its hook registers and how registration checks it.
CONTRACTS: dict[str, Contract] = {
    "environments": Contract(EnvironmentLoader, "loader(**args) (an EnvironmentLoader)", None),
    "reward_functions": Contract(RewardFunction, "fn(**inputs) (a RewardFunction)", None, REWARD_NAME_RULE),
    "advantage_estimators": Contract(AdvantageEstimator, "fn(rewards) (an AdvantageEstimator)", 1),
    "losses": LossContract(str | CustomLoss, "fn(data, logprobs) (the LossFunction of a CustomLoss)", 2),
    "metric_sinks": Contract(SinkFactory, "factory(config, run_dir) (a SinkFactory)", 2, methods={"check": ("config",)}),
    "backends": Contract(
        BackendFactory,
        "factory(config, run_dir) (a BackendFactory)",
        2,
        methods={"can_serve": ("config",), "export_adapter": ("config", "service", "checkpoint", "out_dir")},
    ),
    "environment_adapters": Contract(EnvironmentAdapter, "adapter(obj, env_id) (an EnvironmentAdapter)", 2),
    "rollout_executors": Contract(ExecutorFactory, "factory(session) (an ExecutorFactory)", 1),
}


def registration_problems(kind: str, name: Any, obj: Any, description: Any, plugin: str) -> list[str]:
    """Everything wrong with registering ``obj`` as ``name`` of ``kind`` for ``plugin``; empty when nothing is."""
    contract = CONTRACTS[kind]
    named = isinstance(name, str) and contract.name_rule.fullmatch(name)
    found = [] if named else [_name_problem(name, contract.name_rule, plugin)]
    found += contract.problems(obj)
    if not isinstance(description, str):
        found.append(f"the description is {_shown(description)}, not a str (one line shown by `minds plugins`)")
    return found


def _name_problem(name: Any, rule: re.Pattern[str], plugin: str) -> str:
    if not isinstance(name, str):
        return f"the name is {_shown(name)}, not a str"
    if rule is REWARD_NAME_RULE:
        namespace, _, rest = name.rpartition(".")
        fixed = f"{_words(namespace or plugin)}.{_words(rest)}"
        said = "REWARD_NAME_RULE: '<plugin>.<name>', each lower-case words joined by '_', e.g. 'ghost_trace.latent_logprob'"
    else:
        fixed = _words(name)
        said = "NAME_RULE: lower-case words joined by '_', e.g. 'ghost_trace'"
    hint = f"; say {fixed!r}" if rule.fullmatch(fixed) else ""
    return f"the name breaks {said}{hint}"


def _words(text: str) -> str:
    """``text`` as lower-case words joined by ``_``: ``Bad Name!`` -> ``bad_name``."""
    return "_".join(re.findall(r"[a-z0-9]+", text.lower()))


def _call_problem(obj: Any, call: str, positional: int | None) -> str | None:
    """Why minds could not call ``obj`` as ``call``; None when it can or its signature cannot be read."""
    if not callable(obj):
        return f"{_shown(obj)} is not callable as {call}"
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # no signature to read (some builtins): the call itself will tell
        return None
    if positional is None:
        stuck = [p.name for p in signature.parameters.values() if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
        if stuck:
            return f"{_shown(obj)} {signature} cannot be called as {call}: it takes {', '.join(stuck)} by position only"
        return None
    try:
        signature.bind(*[None] * positional)
    except TypeError as exc:
        return f"{_shown(obj)} {signature} cannot be called as {call}: {exc}"
    return None


def _shown(obj: Any) -> str:
    """``obj`` in a message: a function or class by its name, another callable by its type, anything else by its value."""
    if isinstance(obj, type) or inspect.isroutine(obj):
        return getattr(obj, "__name__", repr(obj))
    if callable(obj):
        return f"a {type(obj).__name__} object"
    return f"{type(obj).__name__} {reprlib.repr(obj)}"
