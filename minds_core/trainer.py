"""The training loop: tasks -> rollouts -> advantages -> datums -> forward_backward + optim_step.

``forward_backward`` and ``optim_step`` are submitted back to back before
either is awaited; a fresh sampling client follows every update. With
``max_steps_off_policy = k`` the batches of the next k steps are sampled while
this one trains, with samplers at most k updates old.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import tinker

from minds_core.advantages import kl_penalized, kl_terms
from minds_core.backends import choose_backend
from minds_core.checkpoint import Checkpoint, RunDirectory, default_run_name
from minds_core.config import EnvConfig, RunConfig
from minds_core.datums import build_datum
from minds_core.envs.loading import load_environment
from minds_core.envs.types import Context, Task
from minds_core.errors import ConfigError, MindsError, UsageError
from minds_core.evaluation import EVAL_DIR, EvalPlan, Evaluation, check_splits, evaluate_policy, save_evaluation
from minds_core.logs import get_logger
from minds_core.losses import CustomLoss
from minds_core.plugins import Plugins, load_plugins
from minds_core.render import Renderer, TemplateError
from minds_core.envs.rubric import maybe_await
from minds_core.rollout import EpisodeSettings, Group, close_quietly, run_group
from minds_core.schedule import DataSchedule
from minds_core.sinks import SinkSet
from minds_core.stats import batch_metrics, rollout_records

log = get_logger("trainer")

#: Service errors at start-up that mean the request was wrong (bad model name, key, checkpoint).
_REJECTED = (tinker.BadRequestError, tinker.AuthenticationError, tinker.PermissionDeniedError, tinker.NotFoundError)


@attrs.define
class EnvHandle:
    """A loaded environment with its tasks and per-environment settings."""

    name: str
    env: Any
    cfg: EnvConfig
    tasks: Sequence[Task]
    group_size: int
    max_failing: int
    needs_checkpoint: bool


@attrs.define
class Policy:
    """One version of the policy: its sampler and (when needed) its saved state."""

    version: int
    sampler: Any
    checkpoint: str | None = None


@attrs.define
class Batch:
    step: int
    groups: list[Group]
    policy_version: int
    seconds: float


def _load_envs(config: RunConfig, plugins: Plugins) -> list[EnvHandle]:
    if not config.environments:
        raise ConfigError("no environment: pass --env NAME or set [env] id in the config (minds envs lists them)")
    handles: list[EnvHandle] = []
    for index, cfg in enumerate(config.environments):
        try:
            env = load_environment(cfg, plugins.registry)
            tasks = list(env.tasks(cfg.split))
        except MindsError:
            raise
        except KeyError as exc:
            raise ConfigError(f"environment {cfg.id!r}, split {cfg.split!r} (env.split): {exc.args[0] if exc.args else exc}") from None
        except Exception as exc:  # noqa: BLE001 - a plugin's failure, reported with its name
            raise MindsError(f"environment {cfg.id!r} failed to load: {type(exc).__name__}: {exc}") from exc
        if not tasks:
            raise ConfigError(f"environment {cfg.id!r} has no tasks in split {cfg.split!r}")
        name = cfg.id if all(c.id != cfg.id for c in config.environments[:index]) else f"{cfg.id}#{index}"
        handles.append(
            EnvHandle(
                name=name,
                env=env,
                cfg=cfg,
                tasks=tasks,
                group_size=cfg.group_size or config.trainer.group_size,
                max_failing=config.rollout.max_failing_rollouts if cfg.max_failing_rollouts is None else cfg.max_failing_rollouts,
                needs_checkpoint=bool(getattr(env, "needs_policy_checkpoint", False)),
            )
        )
    return handles


def _sampling_params(config: RunConfig, cfg: EnvConfig) -> tinker.types.SamplingParams:
    s = config.sampling
    return tinker.types.SamplingParams(
        max_tokens=s.max_tokens,
        temperature=s.temperature if cfg.temperature is None else cfg.temperature,
        top_p=s.top_p if cfg.top_p is None else cfg.top_p,
        top_k=s.top_k,
    )


class Session:
    """One run: the service clients, the environments and the loop state."""

    def __init__(self, config: RunConfig, plugins: Plugins, envs: list[EnvHandle], service: Any) -> None:
        self.config = config
        self.plugins = plugins
        self.envs = envs
        self.service = service
        self.loss = plugins.registry.lookup("losses", config.trainer.loss_fn, "trainer.loss_fn").obj
        self.estimator = plugins.registry.lookup("advantage_estimators", config.trainer.advantage, "trainer.advantage").obj
        self.schedule = DataSchedule(
            config.seed, [h.cfg.weight for h in envs], [len(h.tasks) for h in envs], config.trainer.groups_per_batch
        )
        self.limiter = asyncio.Semaphore(config.rollout.concurrency)
        self.training_client: Any = None
        self.renderer: Renderer | None = None
        self.settings: list[EpisodeSettings] = []
        self.base_sampler: Any = None

    async def start(self, state_path: str | None, with_optimizer: bool) -> None:
        """Create (or restore) the policy's training client."""
        cfg = self.config
        if state_path and with_optimizer:
            future = self.service.create_training_client_from_state_with_optimizer(state_path)
        elif state_path:
            future = self.service.create_training_client_from_state(state_path)
        else:
            future = self.service.create_lora_training_client(
                base_model=cfg.model.base_model,
                rank=cfg.model.lora_rank,
                seed=cfg.seed,
                train_unembed=cfg.model.train_unembed,
            )
        try:
            self.training_client = await future
            self._use_tokenizer(self.training_client.get_tokenizer())
        except (TemplateError, *_REJECTED) as exc:
            raise UsageError(f"cannot start training on {cfg.model.base_model!r}: {exc}") from None
        if cfg.trainer.kl_penalty > 0:
            self.base_sampler = await self.service.create_sampling_client(base_model=cfg.model.base_model)

    async def start_sampling(self, model_path: str | None, state_path: str | None = None) -> Policy:
        """A policy to evaluate without any training client: the weights at ``model_path``, else the base model."""
        cfg = self.config
        what = model_path or cfg.model.base_model
        try:
            if model_path:
                sampler = await self.service.create_sampling_client(model_path=model_path)
            else:
                sampler = await self.service.create_sampling_client(base_model=cfg.model.base_model)
            self._use_tokenizer(sampler.get_tokenizer())
        except (TemplateError, *_REJECTED) as exc:
            raise UsageError(f"cannot sample from {what!r}: {exc}") from None
        return Policy(0, sampler, state_path)

    def _use_tokenizer(self, tokenizer: Any) -> None:
        self.renderer = Renderer(tokenizer, self.config.model.chat_template_args)
        self.settings = [EpisodeSettings(self.renderer, _sampling_params(self.config, h.cfg), self.config.rollout) for h in self.envs]

    async def policy(self, version: int) -> Policy:
        """Snapshot the current weights as a new sampler (and a state, when an env needs one)."""
        checkpoint = None
        if any(h.needs_checkpoint for h in self.envs):
            # only this version's rollouts read it: let the service expire it (1 h is the minimum TTL)
            saved = await self.training_client.save_state(f"policy-v{version:06d}", ttl_seconds=3600, overwrite=True)
            checkpoint = saved.path
        sampler = await self.training_client.save_weights_and_get_sampling_client()
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

    def _seed(self, step: int, group: int) -> int:
        return random.Random(f"{self.config.seed}:sample:{step}:{group}").randrange(2**30)

    async def collect(self, step: int, policy: Policy) -> Batch:
        """Roll out every group of ``step`` with ``policy``."""
        began = time.perf_counter()
        jobs = []
        for index, (env_index, task_index) in enumerate(self.schedule.batch(step)):
            handle = self.envs[env_index]
            jobs.append(
                run_group(
                    handle.name,
                    handle.env,
                    handle.tasks[task_index],
                    handle.group_size,
                    lambda: self.context(policy, step),
                    self.settings[env_index],
                    self.limiter,
                    handle.max_failing,
                    self._seed(step, index),
                )
            )
        groups = list(await asyncio.gather(*jobs))
        return Batch(step, groups, policy.version, time.perf_counter() - began)

    async def _base_logprobs(self, groups: list[Group]) -> dict[int, list[float | None]]:
        """Per trained rollout: the base model's log-probability of every token."""
        rollouts = [r for g in groups if not g.dropped for r in g.ok_rollouts]
        scored = await asyncio.gather(
            *(self.base_sampler.compute_logprobs(tinker.types.ModelInput.from_ints(r.conversation.tokens)) for r in rollouts)
        )
        return {id(r): list(lps) for r, lps in zip(rollouts, scored)}

    async def datums(self, batch: Batch) -> tuple[list[tinker.Datum], dict[int, float], dict[str, float]]:
        """Advantages per group, then one datum per rollout with any nonzero advantage."""
        base = await self._base_logprobs(batch.groups) if self.base_sampler is not None else {}
        coef = self.config.trainer.kl_penalty
        datums, advantages, extra = [], {}, {}
        kl_values: list[float] = []
        for group in batch.groups:
            if group.dropped:
                continue
            ok = group.ok_rollouts
            for rollout, advantage in zip(ok, self.estimator([r.reward for r in ok])):
                advantages[id(rollout)] = float(advantage)
                conv = rollout.conversation
                per_token = [float(advantage)] * len(conv.tokens)
                if id(rollout) in base:
                    terms = kl_terms(conv.logprobs, base[id(rollout)], conv.sampled)
                    per_token = kl_penalized(float(advantage), terms, coef)
                    kl_values.extend(t for t, s in zip(terms, conv.sampled) if s)
                if len(conv.tokens) < 2 or not any(a != 0 and s for a, s in zip(per_token, conv.sampled)):
                    continue
                datums.append(build_datum(conv.tokens, conv.sampled, conv.logprobs, per_token))
        if kl_values:
            extra["kl/sampler_base"] = statistics.fmean(kl_values)
        return datums, advantages, extra

    async def train_step(self, datums: list[tinker.Datum]) -> dict[str, float]:
        """Submit forward_backward and optim_step back to back, then await both."""
        cfg = self.config.trainer
        if isinstance(self.loss, CustomLoss):
            forward_backward = self.training_client.forward_backward_custom(datums, self.loss.fn)
        else:
            forward_backward = self.training_client.forward_backward(datums, self.loss, dict(cfg.loss_fn_config) or None)
        optim = self.training_client.optim_step(
            tinker.types.AdamParams(
                learning_rate=cfg.learning_rate,
                beta1=cfg.beta1,
                beta2=cfg.beta2,
                eps=cfg.eps,
                weight_decay=cfg.weight_decay,
                grad_clip_norm=cfg.grad_clip_norm,
            )
        )
        result = await forward_backward
        await optim
        return {f"train/{k}": float(v) for k, v in (result.metrics or {}).items()}

    async def save(self, step: int) -> Checkpoint:
        """Save weights + optimizer (to resume) and sampler weights (to sample from); recorded by the caller."""
        state = self.training_client.save_state(f"step-{step:06d}", overwrite=True)
        sampler = self.training_client.save_weights_for_sampler(f"step-{step:06d}")
        state_path, sampler_path = (await state).path, (await sampler).path
        log.info("checkpoint saved", step=step, path=state_path, sampler_path=sampler_path)
        return Checkpoint(step=step, state_path=state_path, sampler_path=sampler_path)


def _prepare(
    config: RunConfig, resume_dir: Path | None, plugins: Plugins | None
) -> tuple[RunConfig, Plugins, list[EnvHandle], Any, str]:
    """Everything that can fail on bad input (names, environments, backend credentials), before any run directory exists."""
    plugins = plugins or load_plugins()
    for broken in plugins.broken:
        log.warning("plugin is broken and was skipped", plugin=broken.name, errors=broken.errors)
    if resume_dir is not None:
        config = attrs.evolve(config, name=resume_dir.name, runs_dir=str(resume_dir.parent))
    elif not config.name:
        config = attrs.evolve(config, name=default_run_name(config))
    for kind, name, key in (
        ("losses", config.trainer.loss_fn, "trainer.loss_fn"),
        ("advantage_estimators", config.trainer.advantage, "trainer.advantage"),
        *(("metric_sinks", sink, "metrics.sinks") for sink in config.metrics.sinks),
    ):
        plugins.registry.lookup(kind, name, key)
    backend = choose_backend(config)
    factory = plugins.registry.lookup("backends", backend, "backend").obj
    if config.backend == "auto":
        log.info("backend chosen", backend=backend, reason="API key configured" if backend == "tinker" else "no Tinker API key")
    envs = _load_envs(config, plugins)
    service = factory(config, Path(config.runs_dir) / config.name)
    return config, plugins, envs, service, backend


async def _train(config: RunConfig, resume_dir: Path | None, plugins: Plugins | None) -> dict[str, Any]:
    config, plugins, envs, service, backend = _prepare(config, resume_dir, plugins)
    if config.trainer.eval_every:
        check_splits(envs, EvalPlan.from_config(config.trainer), require_held_out=True)
    if resume_dir is None:
        RunDirectory.ensure_new(config)
    last = RunDirectory(resume_dir).last_checkpoint() if resume_dir is not None else None
    start = last.step + 1 if last else 0
    if resume_dir is not None:
        log.info("resuming", run=str(resume_dir), step=start, checkpoint=last.state_path if last else None)
    session = Session(config, plugins, envs, service)
    status = "errored"
    try:
        await session.start(last.state_path if last else (config.trainer.resume_from or None), with_optimizer=last is not None)
        sinks = SinkSet(config, plugins.registry, Path(config.runs_dir) / config.name)
        summary: dict[str, Any] = {"run_dir": str(Path(config.runs_dir) / config.name), "stopped": "early"}
        try:
            run = RunDirectory.create(config) if resume_dir is None else RunDirectory.resume(resume_dir, config, start)
            log.info("training", run=str(run.path), backend=backend, envs=[h.name for h in envs], steps=config.trainer.steps, start=start)
            summary = await _loop(session, run, sinks, start)
            status = "success"
        finally:
            sinks.close(summary)  # also on an error or Ctrl-C: the progress bar stops, files stay whole
    except (KeyboardInterrupt, asyncio.CancelledError):
        status = "interrupted"
        raise
    finally:
        await _close_environments(envs)
        await _close_service(service, status)
    return summary


async def _close_service(service: Any, status: str) -> None:
    """End the service session (the hosted SDK records success, errored or interrupted)."""
    close = getattr(service, "close", None)
    if callable(close):
        try:
            await maybe_await(close(status))
        except Exception as exc:  # noqa: BLE001 - closing never hides the run's own outcome
            log.warning("closing the service failed", error=f"{type(exc).__name__}: {exc}")


async def _close_environments(envs: list[EnvHandle]) -> None:
    for handle in envs:
        await close_quietly(handle.env, f"environment {handle.name}")


async def _loop(session: Session, run: RunDirectory, sinks: SinkSet, start: int) -> dict[str, Any]:
    cfg = session.config
    steps, ahead = cfg.trainer.steps, cfg.trainer.max_steps_off_policy
    policy = await session.policy(start)
    pending: dict[int, asyncio.Task[Batch]] = {}
    next_launch = start
    rewards: list[float] = []
    began = time.perf_counter()
    try:
        for step in range(start, steps):
            step_began = time.perf_counter()
            while next_launch < steps and next_launch <= step + ahead:
                pending[next_launch] = asyncio.create_task(session.collect(next_launch, policy))
                next_launch += 1
            batch = await pending.pop(step)
            waited = time.perf_counter() - step_began
            datums, advantages, extra = await session.datums(batch)
            train_began = time.perf_counter()
            train_metrics = await session.train_step(datums) if datums else {"train/skipped": 1.0}
            policy = await session.policy(policy.version + 1)
            train_seconds = time.perf_counter() - train_began
            record = batch_metrics(batch.groups, advantages, session.envs)
            record.update(train_metrics)
            record.update(extra)
            record.update(
                {
                    "step": step,
                    "train/datums": len(datums),
                    "sampler/staleness": policy.version - 1 - batch.policy_version,
                    "time/sample": batch.seconds,
                    "time/wait_for_batch": waited,
                    "time/train": train_seconds,
                }
            )
            run.log_rollouts(rollout_records(step, batch.groups, advantages, cfg.metrics.rollouts_per_step))
            if cfg.trainer.eval_every and ((step + 1) % cfg.trainer.eval_every == 0 or step == steps - 1):
                record.update(await _evaluate_during_training(session, policy, run, step))
            checkpoint = None
            save_began = time.perf_counter()
            if step == steps - 1 or (cfg.trainer.save_every and (step + 1) % cfg.trainer.save_every == 0):
                checkpoint = await session.save(step)
            record["time/save"] = time.perf_counter() - save_began
            record["time/step"] = time.perf_counter() - step_began
            sinks.write(record)
            if checkpoint is not None:  # after the metrics line: a resume never skips a step's metrics
                run.record_checkpoint(checkpoint)
            if "reward/mean" in record:
                rewards.append(record["reward/mean"])
    finally:
        for task in pending.values():
            task.cancel()
    return {
        "steps": steps - start,
        "reward/first": rewards[0] if rewards else None,
        "reward/last": rewards[-1] if rewards else None,
        "seconds": time.perf_counter() - began,
        "run_dir": str(run.path),
    }


async def _evaluate_during_training(session: Session, policy: Policy, run: RunDirectory, step: int) -> dict[str, float]:
    """The updated policy of ``step`` on the held-out split: ``eval/*`` metrics, rollouts in eval/step-NNNNNN.jsonl."""
    evaluation = await evaluate_policy(session, policy, EvalPlan.from_config(session.config.trainer), step=step, require_held_out=True)
    save_evaluation(run.path / EVAL_DIR / f"step-{step:06d}.jsonl", evaluation, {"step": step})
    return evaluation.metrics()


def train(config: RunConfig, resume_dir: Path | None = None, plugins: Plugins | None = None) -> dict[str, Any]:
    """Run (or resume) training; returns a summary of the run. ``plugins`` defaults to the installed ones."""
    return asyncio.run(_train(config, resume_dir, plugins))


async def _evaluate(
    config: RunConfig, plan: EvalPlan, model_path: str | None, state_path: str | None, plugins: Plugins | None
) -> Evaluation:
    config, plugins, envs, service, _ = _prepare(config, None, plugins)
    session = Session(config, plugins, envs, service)
    status = "errored"
    try:
        policy = await session.start_sampling(model_path, state_path)
        evaluation = await evaluate_policy(session, policy, plan, step=0, require_held_out=False)
        status = "success"
    finally:
        await _close_environments(envs)
        await _close_service(service, status)
    return evaluation


def evaluate(
    config: RunConfig,
    plan: EvalPlan,
    model_path: str | None = None,
    state_path: str | None = None,
    plugins: Plugins | None = None,
) -> Evaluation:
    """Evaluate the weights at ``model_path`` (else the base model) without training; ``state_path`` is their saved state."""
    return asyncio.run(_evaluate(config, plan, model_path, state_path, plugins))
