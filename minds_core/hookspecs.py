"""The plugin contract: one hook per extension point of minds.

Every hook receives a ``register`` callback. Call it once per part you provide:

    register(name, obj, description="one line shown by `minds plugins`")

The registry records which plugin registered each name; two plugins registering
the same name is an error that names both. Hooks run once per process, when the
plugins are loaded; keep them cheap (import heavy libraries such as torch inside
the objects you register, not at module level).
"""

from __future__ import annotations

from typing import Any, Protocol

import pluggy

PROJECT = "minds"

hookspec = pluggy.HookspecMarker(PROJECT)


class Register(Protocol):
    """The callback each hook receives."""

    def __call__(self, name: str, obj: Any, description: str = "") -> None: ...


@hookspec
def minds_register_environments(register: Register) -> None:
    """Provide environments: tasks to train on and the episodes that score them.

    Receives: ``register(name, loader, description)``.
    Must: register a ``loader(**args) -> Environment`` per environment name. The
    loader receives the ``[env.args]`` table of the config as keyword arguments
    and returns an object with ``tasks(split) -> Sequence[Task]`` and
    ``episode(task, ctx) -> Episode`` (see ``minds_core.envs``). Use a plain name
    (``ghost_trace``); it is what ``minds run --env NAME`` takes.

    Example::

        @hookimpl
        def minds_register_environments(register):
            register("echo", load_echo_env, description="repeat a word back")
    """


@hookspec
def minds_register_reward_functions(register: Register) -> None:
    """Provide named reward functions that configs can put in a rubric.

    Receives: ``register(name, fn, description)``.
    Must: register each function as ``"<plugin>.<name>"``. ``fn`` may be sync or
    async and receives, by parameter name, any of ``completion`` (text),
    ``prompt``, ``task``, ``answer``, ``info``, ``state`` and ``ctx``; it returns
    a number. A function naming a plural (``completions``, ``prompts``,
    ``tasks``, ``answers``, ``infos``) scores a whole group instead: it is
    called once per group with one list entry per rollout and returns one
    reward per rollout. A registered class is built once per rubric entry
    with the entry's ``args`` (a function gets them bound as keywords), and
    the instance is the reward function. A config re-weights or adds them
    without code::

        [[env.rewards]]
        name = "mytools.brevity"
        weight = 0.2

    Example::

        @hookimpl
        def minds_register_reward_functions(register):
            register("mytools.brevity", lambda completion: 1 / (1 + len(completion)))
    """


@hookspec
def minds_register_advantage_estimators(register: Register) -> None:
    """Provide ways to turn a group's rewards into advantages.

    Receives: ``register(name, fn, description)``.
    Must: register ``fn(rewards: Sequence[float]) -> list[float]``, called once
    per group (the rollouts of one task), returning one advantage per reward.
    ``trainer.advantage = "NAME"`` selects it.

    Example::

        @hookimpl
        def minds_register_advantage_estimators(register):
            register("sign", lambda rs: [float((r > 0) - (r < 0)) for r in rs])
    """


@hookspec
def minds_register_losses(register: Register) -> None:
    """Provide policy losses the trainer can select with ``trainer.loss_fn``.

    Receives: ``register(name, loss, description)``.
    Must: register either the name of a loss the service computes itself (a
    Tinker built-in: ``"ppo"``; ``trainer.loss_fn_config`` is passed along), or
    a ``minds_core.losses.CustomLoss`` whose function receives
    ``(data: list[tinker.Datum], logprobs: list[torch.Tensor])`` and returns
    ``(loss_tensor, metrics_dict)``; it runs through
    ``TrainingClient.forward_backward_custom``.

    Example::

        @hookimpl
        def minds_register_losses(register):
            register("clipped_pg", CustomLoss(clipped_policy_gradient))
    """


@hookspec
def minds_register_metric_sinks(register: Register) -> None:
    """Provide destinations for per-step metrics.

    Receives: ``register(name, factory, description)``.
    Must: register ``factory(run_dir: pathlib.Path, config: RunConfig) -> sink``;
    the sink has ``write(record: dict) -> None`` (one call per training step,
    flat keys such as ``reward/mean``) and ``close(summary: dict) -> None``.
    ``metrics.sinks = ["jsonl", "NAME"]`` selects sinks. A sink that raises is
    reported and disabled; it never stops training.

    Example::

        @hookimpl
        def minds_register_metric_sinks(register):
            register("stdout", lambda run_dir, config: PrintSink())
    """


@hookspec
def minds_register_backends(register: Register) -> None:
    """Provide a training/sampling service speaking the Tinker client API.

    Receives: ``register(name, factory, description)``.
    Must: register ``factory(config: RunConfig, run_dir: pathlib.Path)`` returning
    an object with the ``tinker.ServiceClient`` methods
    (``create_lora_training_client``, ``create_sampling_client``, ...) that use
    ``tinker.types``, or an awaitable of that object (to check a connection on
    the run's event loop, where Ctrl-C stops it). Raise
    ``minds_core.errors.UsageError`` for a missing package, credential or an
    unreachable service, before any work starts. ``backend = "NAME"`` selects it.

    Example::

        @hookimpl
        def minds_register_backends(register):
            register("mycloud", make_mycloud_service, description="our cluster")
    """


@hookspec
def minds_register_environment_adapters(register: Register) -> None:
    """Provide adapters that train objects of another framework returned by a loose ``load_environment()``.

    Receives: ``register(name, adapter, description)``.
    Must: register ``adapter(obj, env_id: str) -> Environment | None``. When a
    config's ``[env] id`` is a folder, file or module path, minds calls its
    ``load_environment(**args)`` and offers the result to every adapter; the
    first that returns an Environment wins, None means "not mine" (then minds
    reads the object's seed-style shape itself). Check the object's type
    cheaply: adapters see every loose environment.

    Example::

        @hookimpl
        def minds_register_environment_adapters(register):
            register("gymnasium", adapt_gym_env, description="gymnasium.Env objects")
    """
