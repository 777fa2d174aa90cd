"""The plugin contract: one hook per extension point of minds.

Every hook receives a ``register`` callback, typed by what the hook registers
(``minds_core.Register[EnvironmentLoader]``, ...). Call it once per part you provide:

    register(name, obj, description="one line shown by `minds plugins`")

What ``obj`` must be is a typed protocol per hook (``minds_core.EnvironmentLoader``,
``RewardFunction``, ...), and names follow one rule (``minds_core.NAME_RULE``).
Registration checks both: a name that breaks the rule, or an object minds cannot
call as its protocol says, is not registered and its plugin is reported broken
(its other parts still load).

The registry records which plugin registered each name; two plugins registering
the same name is an error that names both. Hooks run once per process, when the
plugins are loaded; keep them cheap (import heavy libraries such as torch inside
the objects you register, not at module level).
"""

from __future__ import annotations

import pluggy

from minds_core.contract.parts import (
    AdvantageEstimator,
    BackendFactory,
    CustomLoss,
    EnvironmentAdapter,
    EnvironmentLoader,
    ExecutorFactory,
    Register,
    RewardFunction,
    SinkFactory,
)

PROJECT = "minds"

hookspec = pluggy.HookspecMarker(PROJECT)


@hookspec
def minds_register_environments(register: Register[EnvironmentLoader]) -> None:
    """Provide environments: tasks to train on and the episodes that score them.

    :param register: takes ``(name, loader: EnvironmentLoader, description)``,
        one ``loader(**args) -> Environment`` per environment. The loader receives
        the ``[env.args]`` table of the config as keyword arguments and returns an
        ``Environment`` (``tasks(split)``, ``episode(task, ctx)``; see
        ``minds_core.Environment``). A loader wrapping another environment
        declares ``open_environment`` (``minds_core.OpenEnvironment``) to build
        it. The name (``ghost_trace``) is what ``minds run --env NAME`` takes.

    Example::

        @hookimpl
        def minds_register_environments(register):
            register("echo", load_echo_env, description="repeat a word back")
    """


@hookspec
def minds_register_reward_functions(register: Register[RewardFunction]) -> None:
    """Provide named reward functions that configs can put in a rubric.

    :param register: takes ``(name, fn: RewardFunction, description)``, each
        function named ``"<plugin>.<name>"``. ``fn`` may be sync or async and
        receives, by parameter name, any of ``REWARD_INPUTS`` (``completion``,
        ``prompt``, ``task``, ``answer``, ``info``, ``state``, ``ctx``,
        ``messages``); it returns a number. A function naming one of
        ``GROUP_REWARD_INPUTS`` (``completions``, ``prompts``, ...) scores a whole
        group: it is called once per group with one list entry per rollout and
        returns one reward per rollout. Asking for any other name is a
        ConfigError when the rubric is built. A registered class is built once
        per rubric entry with the entry's ``args`` (a function gets them bound
        as keywords), and the instance is the reward function.

    A config re-weights or adds reward functions without code::

        [[env.rewards]]
        name = "mytools.brevity"
        weight = 0.2

    Example::

        @hookimpl
        def minds_register_reward_functions(register):
            register("mytools.brevity", lambda completion: 1 / (1 + len(completion)))
    """


@hookspec
def minds_register_advantage_estimators(register: Register[AdvantageEstimator]) -> None:
    """Provide ways to turn a group's rewards into advantages.

    :param register: takes ``(name, fn: AdvantageEstimator, description)``;
        ``fn(rewards) -> list[float]`` is called once per group (the rollouts of
        one task) and returns one advantage per reward. ``trainer.advantage =
        "NAME"`` selects it.

    Example::

        @hookimpl
        def minds_register_advantage_estimators(register):
            register("sign", lambda rs: [float((r > 0) - (r < 0)) for r in rs])
    """


@hookspec
def minds_register_losses(register: Register[str | CustomLoss]) -> None:
    """Provide policy losses the trainer can select with ``trainer.loss_fn``.

    :param register: takes ``(name, loss: str | CustomLoss, description)``:
        either the name of a loss the service computes itself (a Tinker
        built-in: ``"ppo"``; ``trainer.loss_fn_config`` is passed along), or a
        ``minds_core.CustomLoss`` around a ``LossFunction`` (``(data, logprobs)
        -> (loss_tensor, metrics)``), run through
        ``TrainingClient.forward_backward_custom``; its ``inputs`` name the
        datum inputs it reads beyond target_tokens, logprobs and advantages.

    Example::

        @hookimpl
        def minds_register_losses(register):
            register("clipped_pg", CustomLoss(clipped_policy_gradient))
    """


@hookspec
def minds_register_metric_sinks(register: Register[SinkFactory]) -> None:
    """Provide destinations for per-step metrics.

    :param register: takes ``(name, factory: SinkFactory, description)``;
        ``factory(config, run_dir) -> MetricSink``, whose ``write(record)`` is
        called once per training step (flat keys such as ``reward/mean``) and
        ``close(summary)`` at the end. ``metrics.sinks = ["console", "NAME"]``
        selects sinks (``<run>/metrics.jsonl`` is always written by the run
        directory itself). A sink that raises is reported and disabled; it
        never stops training.

    Example::

        @hookimpl
        def minds_register_metric_sinks(register):
            register("stdout", lambda config, run_dir: PrintSink())
    """


@hookspec
def minds_register_backends(register: Register[BackendFactory]) -> None:
    """Provide a training/sampling service speaking the Tinker client API.

    :param register: takes ``(name, factory: BackendFactory, description)``;
        ``factory(config, run_dir)`` returns an object with the
        ``tinker.ServiceClient`` methods (``create_lora_training_client``,
        ``create_sampling_client``, ...) that use ``tinker.types``, or an
        awaitable of that object (to check a connection on the run's event
        loop, where Ctrl-C stops it). Raise ``minds_core.UsageError`` for a
        missing package, credential or an unreachable service, before any work
        starts. ``backend = "NAME"`` selects it; a factory with
        ``can_serve(config) -> BackendFit`` also takes part in ``backend = "auto"``.

    Example::

        @hookimpl
        def minds_register_backends(register):
            register("mycloud", make_mycloud_service, description="our cluster")
    """


@hookspec
def minds_register_environment_adapters(register: Register[EnvironmentAdapter]) -> None:
    """Provide adapters that train objects of another framework returned by a loose ``load_environment()``.

    :param register: takes ``(name, adapter: EnvironmentAdapter, description)``;
        ``adapter(obj, env_id) -> Environment | None``. When a config's ``[env]
        id`` is a folder, file or module path, minds calls its
        ``load_environment(**args)`` and offers the result to every adapter; the
        first that returns an Environment wins, None means "not mine" (then
        minds reads the object's seed-style shape itself). Check the object's
        type cheaply: adapters see every loose environment.

    Example::

        @hookimpl
        def minds_register_environment_adapters(register):
            register("gymnasium", adapt_gym_env, description="gymnasium.Env objects")
    """


@hookspec
def minds_register_rollout_executors(register: Register[ExecutorFactory]) -> None:
    """Provide places where episodes run: this process (``local``, the core's) or a cluster.

    :param register: takes ``(name, factory: ExecutorFactory, description)``;
        ``factory(session)`` returns a ``RolloutExecutor`` (or an awaitable of one)
        whose ``run_groups(orders, policy)`` rolls out each ``GroupOrder`` and
        returns the same ``Group``/``Rollout`` records as in process.
        ``[rollout] executor = "NAME"`` selects it.

    Example::

        @hookimpl
        def minds_register_rollout_executors(register):
            register("mycluster", MyClusterExecutor, description="episodes on our cluster")
    """
