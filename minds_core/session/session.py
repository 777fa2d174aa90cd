"""A run's resources and their lifetime, shared by training and evaluation.

``Session.open`` checks everything that can fail on bad input (names, the
backend, the environments) and connects to the service, before any run
directory exists. Used as ``async with``, the session closes what it opened
when the run ends, however it ends: the metric sinks (with the run's summary),
every environment, and the service session (told ``success``, ``errored`` or
``interrupted``). In between it starts the policy (a training client, or a
sampling client of fixed weights), snapshots it as samplers, and hands each
episode its ``Context``.
"""

from __future__ import annotations

import asyncio
import reprlib
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import attrs
import tinker

from minds_core.backends import model_tokenizer, sampler_tokenizer
from minds_core.backends.retry import REJECTIONS, Backoff
from minds_core.base.errors import ConfigError, MindsError, UsageError
from minds_core.base.logs import get_logger
from minds_core.config import EnvConfig, RunConfig
from minds_core.contract.environment import Context, Task, needs_policy_checkpoint
from minds_core.contract.parts import RolloutExecutor
from minds_core.contract.plugin_errors import error_text, raised_by_plugin
from minds_core.contract.plugins import Plugins, load_plugins
from minds_core.contract.rubric import maybe_await
from minds_core.envs.conflicts import known_conflict
from minds_core.envs.cookbook.models import use_run_model
from minds_core.envs.loading import build_environment
from minds_core.envs.render import Renderer, TemplateError
from minds_core.episodes.groups import EpisodeSettings
from minds_core.episodes.rollout import close_quietly
from minds_core.session.service import ServiceLifetime
from minds_core.sinks import SinkSet
from minds_core.training.run_directory import RunDirectory, secrets_not_given

log = get_logger("session")


@attrs.define
class EnvHandle:
    """A loaded environment with its tasks and per-environment settings."""

    name: str  #: what metrics and logs call it (its label, made unique with ``#<index>``)
    env: Any  #: the environment object its loader returned
    cfg: EnvConfig  #: its entry of the config
    tasks: Sequence[Task]  #: the tasks of its configured split
    group_size: int  #: rollouts per task (``env.group_size``, else ``trainer.group_size``)
    max_failing: int  #: failed rollouts a group may have before it is dropped
    needs_checkpoint: bool  #: whether its episodes read the policy's saved state (``Context.policy_checkpoint``)


@attrs.define
class Policy:
    """One version of the policy: its sampler and (when an environment needs one) its saved state."""

    version: int  #: updates applied since the run's start (a resumed run counts from its first step)
    sampler: Any  #: the sampling client of these weights
    checkpoint: str | None = None  #: a ``tinker://`` state path of these weights, when one was saved
    #: a ``tinker://`` path of these weights saved for sampling, when the executor's workers sample elsewhere
    #: (``RolloutExecutor.needs_sampler_path``); None with the base model's weights
    sampler_path: str | None = None


def load_environments(config: RunConfig, plugins: Plugins) -> list[EnvHandle]:
    """Every configured environment (weight > 0) with its tasks; a ConfigError or MindsError naming the one that failed."""
    if not config.environments:
        raise ConfigError("no environment: pass --env NAME or set [env] id in the config (minds envs lists them)")
    base_model = config.model.base_model
    use_run_model(base_model, lambda: model_tokenizer(base_model))  # what tinker-cookbook environments render for
    handles: list[EnvHandle] = []
    for index, cfg in enumerate(config.environments):
        try:
            env = build_environment(cfg, plugins.registry)
            tasks = list(env.tasks(cfg.split))
        except MindsError:
            raise
        except KeyError as exc:
            raise ConfigError(f"environment {cfg.id!r}, split {cfg.split!r} (env.split): {exc.args[0] if exc.args else exc}") from None
        except BaseException as exc:  # a plugin's failure (sys.exit included), reported with its name
            if not raised_by_plugin(exc):
                raise
            conflict = known_conflict(exc)
            if conflict is not None:
                raise UsageError(f"environment {cfg.id!r} failed to load ({error_text(exc)[:300]}): {conflict}") from None
            raise MindsError(f"environment {cfg.id!r} failed to load: {error_text(exc)}") from exc
        if not tasks:
            raise ConfigError(f"environment {cfg.id!r} has no tasks in split {cfg.split!r}")
        name = cfg.label if all(c.label != cfg.label for c in config.environments[:index]) else f"{cfg.label}#{index}"
        handles.append(
            EnvHandle(
                name=name,
                env=env,
                cfg=cfg,
                tasks=tasks,
                group_size=cfg.group_size or config.trainer.group_size,
                max_failing=config.rollout.max_failing_rollouts if cfg.max_failing_rollouts is None else cfg.max_failing_rollouts,
                needs_checkpoint=needs_policy_checkpoint(env),
            )
        )
    return handles


def sampling_params(config: RunConfig, cfg: EnvConfig) -> tinker.types.SamplingParams:
    """The sampling settings of one environment: ``[sampling]``, with the environment's own temperature and top_p."""
    s = config.sampling
    return tinker.types.SamplingParams(
        max_tokens=s.max_tokens,
        temperature=s.temperature if cfg.temperature is None else cfg.temperature,
        top_p=s.top_p if cfg.top_p is None else cfg.top_p,
        top_k=s.top_k,
    )


class Session:
    """One run's environments, service, policy clients and metric sinks; an async context manager that closes them."""

    def __init__(self, config: RunConfig, plugins: Plugins, envs: list[EnvHandle], door: ServiceLifetime) -> None:
        self.config = config
        self.plugins = plugins
        self.envs = envs
        self.door = door  #: the service's lifetime: its backend, retries, signals and closing
        self.limiter = asyncio.Semaphore(config.rollout.concurrency)  #: rollouts in flight at once
        self.training_client: Any = None
        self.renderer: Renderer | None = None
        self.settings: list[EpisodeSettings] = []  #: per environment, what its rollouts run with
        self.sinks: SinkSet | None = None
        self._executor: RolloutExecutor | None = None
        self._endpoint: Any = None  #: the engine served for environments' own tinker clients, when it is
        #: What the sinks are closed with: the run's summary once it finished, else this placeholder.
        self.summary: dict[str, Any] = {"stopped": "early"}

    @property
    def service(self) -> Any:
        """The open service client (the door's)."""
        return self.door.service

    @property
    def backend(self) -> str:
        """The registered name of the backend serving the run."""
        return self.door.backend

    @property
    def backoff(self) -> Backoff:
        """The door's retries, for the loop's own requests."""
        return self.door.backoff

    @property
    def executor(self) -> RolloutExecutor:
        """The ``rollout.executor`` running the episodes, made as ``Session.open`` ends (``start_executor``)."""
        if self._executor is None:
            raise MindsError("the session has no rollout executor yet: Session.open makes it once the service is open")
        return self._executor

    @classmethod
    async def open(cls, config: RunConfig, plugins: Plugins | None = None, resume_dir: Path | None = None) -> Session:
        """Check the config's names, load the environments and connect to the backend; no run directory is made.

        The run is named after ``resume_dir`` when resuming, else given a default name when it has none.
        """
        plugins = plugins or load_plugins()
        for broken in plugins.broken:
            log.warning("plugin is broken and was skipped", plugin=broken.name, errors=broken.errors)
        door = ServiceLifetime.for_run(config, plugins.registry, resume_dir)
        config = door.config
        try:
            envs = load_environments(config, plugins)
        except MindsError as exc:
            forgotten = secrets_not_given(resume_dir, config) if resume_dir is not None else []
            if not forgotten:
                raise
            raise UsageError(
                f"{exc}\n--resume {resume_dir}: secrets are not saved with a run, and these were not given again: "
                f"{', '.join(forgotten)}; pass them again (--set KEY=VALUE), or set the environment variable "
                "the environment reads them from"
            ) from exc
        session = cls(config, plugins, envs, await door.open())
        try:
            session.serve_environments()
            await session.start_executor()
        except BaseException as exc:
            if session._endpoint is not None:
                session._endpoint.close()
            await door.close(exc)
            raise
        return session

    def serve_environments(self) -> None:
        """On the local backend, serve the engine for tinker-cookbook environments that make their own
        ``tinker.ServiceClient()`` (``serve.for_environments``); closed with the session."""
        from minds_core.envs.cookbook.environment import CookbookEnvironment

        if not any(isinstance(h.env, CookbookEnvironment) for h in self.envs):
            return
        from minds_core.backends.local import ServiceClient as LocalService

        if isinstance(self.service, LocalService):
            from minds_core.serve.for_environments import serve_for_environments

            self._endpoint = serve_for_environments(self.service, self.config.model.base_model)

    async def start_executor(self) -> None:
        """Make the ``rollout.executor`` (a cluster executor connects here, before any run directory exists)."""
        name = self.config.rollout.executor
        entry = self.plugins.registry.lookup("rollout_executors", name, "rollout.executor")
        executor = await maybe_await(entry.obj(self))
        lacking = [part for part in ("needs_sampler_path", "run_groups", "close") if not hasattr(executor, part)]
        if lacking:
            raise MindsError(
                f"rollout.executor = {name!r} (plugin {entry.plugin}): its factory returned {type(executor).__name__} "
                f"{reprlib.repr(executor)}, not a RolloutExecutor: it lacks {', '.join(lacking)}"
            )
        self._executor = executor

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self.sinks is not None:
            self.sinks.close(self.summary)  # also on an error or Ctrl-C: the progress bar stops, files stay whole
        if self._executor is not None:
            await close_quietly(self._executor, f"rollout executor {self.config.rollout.executor}", self.config.rollout.timeout)
        for handle in self.envs:
            await close_quietly(handle.env, f"environment {handle.name}", self.config.rollout.timeout)
        if self._endpoint is not None:
            self._endpoint.close()
        await self.door.close(error)

    def open_sinks(self, run: RunDirectory) -> SinkSet:
        """The configured metric sinks, writing into ``run``'s folder; closed with ``summary`` when the session ends."""
        self.summary = {"run_dir": str(run.path), "stopped": "early"}
        self.sinks = SinkSet(self.config, self.plugins.registry, run)
        return self.sinks

    async def start_training(self, state_path: str | None, with_optimizer: bool) -> None:
        """Create the policy's training client: a new LoRA adapter, or one restored from ``state_path``."""
        self.training_client = await self.door.start_training(state_path, with_optimizer)
        try:
            self._use_tokenizer(self.training_client.get_tokenizer())
        except (TemplateError, *REJECTIONS) as exc:
            raise self.door.cannot_start_training(state_path, exc) from None

    async def start_sampling(self, model_path: str | None, state_path: str | None = None) -> Policy:
        """A policy to evaluate without any training client: the weights at ``model_path``, else the base model."""
        cfg = self.config
        what = model_path or cfg.model.base_model
        try:
            if model_path:
                sampler = await self.service.create_sampling_client(model_path=model_path)
            else:
                sampler = await self.service.create_sampling_client(base_model=cfg.model.base_model)
            self._use_tokenizer(sampler_tokenizer(sampler, cfg.model.base_model))
        except (TemplateError, *REJECTIONS) as exc:
            raise UsageError(f"cannot sample from {what!r}: {exc}") from None
        return Policy(0, sampler, state_path, sampler_path=model_path)

    def _use_tokenizer(self, tokenizer: Any) -> None:
        self.renderer = Renderer(tokenizer, self.config.model.chat_template_args)
        self.settings = [EpisodeSettings(self.renderer, sampling_params(self.config, h.cfg), self.config.rollout) for h in self.envs]

    async def policy(self, version: int, step: int | None = None) -> Policy:
        """Snapshot the training client's current weights as a new sampler (and a state, when an env needs one);
        ``step``: the step that made them, as a failure's message names it."""
        checkpoint, where = None, f"policy v{version}" if step is None else f"step {step}"
        if any(h.needs_checkpoint for h in self.envs):
            # only this version's rollouts read it: let the service expire it (1 h is the minimum TTL)
            name = f"policy-v{version:06d}"
            save = lambda: self.training_client.save_state(name, ttl_seconds=3600, overwrite=True)
            saved = await self.door.call(where, "save_state", save)
            checkpoint = saved.path
        if self.executor.needs_sampler_path:
            # workers elsewhere sample from a path: save the weights once, and sample here from the same path
            publish = lambda: self.training_client.save_weights_for_sampler(f"sampler-v{version:06d}", ttl_seconds=3600)
            saved = await self.door.call(where, "save_weights_for_sampler", publish)
            sampler = await self.door.call(where, "create_sampling_client", lambda: self.service.create_sampling_client(model_path=saved.path))
            return Policy(version, sampler, checkpoint, sampler_path=saved.path)
        sample = self.training_client.save_weights_and_get_sampling_client
        sampler = await self.door.call(where, "save_weights_and_get_sampling_client", sample)
        return Policy(version, sampler, checkpoint)

    def context(self, policy: Policy, step: int) -> Context:
        """What an episode of ``step`` receives: ``policy``'s sampler, the service and the renderer."""
        return Context(
            sampler=policy.sampler,
            tokenizer=self.renderer.tokenizer if self.renderer else None,
            service=self.service,
            renderer=self.renderer,
            base_model=self.config.model.base_model,
            lora_rank=self.config.model.lora_rank,
            step=step,
            policy_checkpoint=policy.checkpoint,
        )
