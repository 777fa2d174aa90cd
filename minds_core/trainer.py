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
from minds_core.aggregation import token_scales
from minds_core.backends import choose_backend, sampler_tokenizer
from minds_core.backends.retry import Backoff, ServiceCallError, call_service, send_now, settle
from minds_core.checkpoint import Checkpoint, RunDirectory, check_resume_changes, default_run_name
from minds_core.config import EnvConfig, RunConfig
from minds_core.datums import build_datum
from minds_core.envs.loading import build_environment
from minds_core.envs.types import Context, Task, needs_policy_checkpoint
from minds_core.errors import ConfigError, MindsError, UsageError
from minds_core.evaluation import EVAL_DIR, EvalPlan, Evaluation, check_splits, evaluate_policy, save_evaluation
from minds_core.interrupt import RunInterrupted, StopOnSignal
from minds_core.length import is_truncated, overlong_penalty, window_tokens
from minds_core.logs import get_logger
from minds_core.lr_schedules import learning_rate
from minds_core.names import check_names
from minds_core.outcome import TrainingOutcome
from minds_core.losses import CustomLoss
from minds_core.plugins import Plugins, load_plugins
from minds_core.render import Renderer, TemplateError
from minds_core.envs.rubric import maybe_await
from minds_core.rollout import EpisodeSettings, Group, close_quietly, run_group
from minds_core.schedule import DataSchedule
from minds_core.sinks import SinkSet
from minds_core.stats import batch_metrics, rollout_records, sampler_train_kl

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
            env = build_environment(cfg, plugins.registry)
            tasks = list(env.tasks(cfg.split))
        except MindsError:
            raise
        except KeyError as exc:
            raise ConfigError(f"environment {cfg.id!r}, split {cfg.split!r} (env.split): {exc.args[0] if exc.args else exc}") from None
        except Exception as exc:  # noqa: BLE001 - a plugin's failure, reported with its name
            raise MindsError(f"environment {cfg.id!r} failed to load: {type(exc).__name__}: {exc}") from exc
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
        self.backoff = Backoff()
        self.rolling_saves = 0

    async def start(self, state_path: str | None, with_optimizer: bool) -> None:
        """Create (or restore) the policy's training client."""
        cfg = self.config
        try:  # the hosted SDK starts its session (and may fail) when the first client is requested
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
            self.training_client = await future
            self._use_tokenizer(self.training_client.get_tokenizer())
        except (TemplateError, *_REJECTED) as exc:
            raise UsageError(f"cannot start training on {cfg.model.base_model!r}: {exc}") from None
        except tinker.APIConnectionError as exc:
            raise UsageError(f"cannot start training on {cfg.model.base_model!r}: the service stopped answering ({exc})") from None
        if cfg.trainer.kl_penalty > 0:
            reference = cfg.trainer.kl_reference or cfg.model.base_model
            where = {"model_path": reference} if "://" in reference else {"base_model": reference}
            try:
                self.base_sampler = await self.service.create_sampling_client(**where)
            except _REJECTED as exc:
                raise UsageError(f"the KL reference {reference!r} (trainer.kl_reference) cannot be sampled from: {exc}") from None

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
        except (TemplateError, *_REJECTED) as exc:
            raise UsageError(f"cannot sample from {what!r}: {exc}") from None
        return Policy(0, sampler, state_path)

    def _use_tokenizer(self, tokenizer: Any) -> None:
        self.renderer = Renderer(tokenizer, self.config.model.chat_template_args)
        self.settings = [EpisodeSettings(self.renderer, _sampling_params(self.config, h.cfg), self.config.rollout) for h in self.envs]

    async def policy(self, version: int) -> Policy:
        """Snapshot the current weights as a new sampler (and a state, when an env needs one)."""
        checkpoint, where = None, f"policy v{version}"
        if any(h.needs_checkpoint for h in self.envs):
            # only this version's rollouts read it: let the service expire it (1 h is the minimum TTL)
            name = f"policy-v{version:06d}"
            save = lambda: self.training_client.save_state(name, ttl_seconds=3600, overwrite=True)
            saved, _ = await call_service(where, "save_state", save, self.backoff)
            checkpoint = saved.path
        sample = self.training_client.save_weights_and_get_sampling_client
        sampler, _ = await call_service(where, "save_weights_and_get_sampling_client", sample, self.backoff)
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

    async def _base_logprobs(self, groups: list[Group], where: str) -> dict[int, list[float | None]]:
        """Per trained rollout: the base model's log-probability of every token."""
        rollouts = [r for g in groups if not g.dropped for r in g.ok_rollouts]

        async def score(tokens: list[int]) -> list[float | None]:
            send = lambda: self.base_sampler.compute_logprobs(tinker.types.ModelInput.from_ints(tokens))
            return (await call_service(where, "compute_logprobs (base model)", send, self.backoff))[0]

        scored = await asyncio.gather(*(score(r.conversation.tokens) for r in rollouts))
        return {id(r): list(lps) for r, lps in zip(rollouts, scored)}

    async def datums(self, batch: Batch) -> tuple[list[tinker.Datum], dict[int, float], dict[str, float]]:
        """Advantages per group, then one datum per rollout with any nonzero advantage."""
        try:
            base = await self._base_logprobs(batch.groups, f"step {batch.step}") if self.base_sampler is not None else {}
        except ServiceCallError as exc:
            exc.intact_after = batch.step - 1
            raise
        coef = self.config.trainer.kl_penalty
        datums, advantages, extra = [], {}, {}
        kl_values: list[float] = []
        tcfg, max_tokens = self.config.trainer, self.config.sampling.max_tokens
        kept = [r for g in batch.groups if not g.dropped for r in g.ok_rollouts]
        filtered = {id(r) for r in kept if tcfg.overlong_filter and is_truncated(r.conversation)}
        trained = [r for r in kept if id(r) not in filtered]
        lengths = [r.conversation.sampled_tokens for r in trained]
        scales = dict(zip(map(id, trained), token_scales(tcfg.loss_aggregation, lengths, max_tokens)))
        window = window_tokens(tcfg.overlong_penalty_window, max_tokens)
        penalties = {id(r): overlong_penalty(r.conversation.sampled_tokens, max_tokens, window) for r in kept}
        for group in batch.groups:
            if group.dropped:
                continue
            ok = group.ok_rollouts
            for rollout, advantage in zip(ok, self.estimator([r.reward + penalties[id(r)] for r in ok])):
                advantages[id(rollout)] = float(advantage)
                if id(rollout) in filtered:
                    continue
                conv = rollout.conversation
                per_token = [float(advantage)] * len(conv.tokens)
                if id(rollout) in base:
                    terms = kl_terms(conv.logprobs, base[id(rollout)], conv.sampled)
                    per_token = kl_penalized(float(advantage), terms, coef)
                    kl_values.extend(t for t, s in zip(terms, conv.sampled) if s)
                per_token = [a * scales[id(rollout)] for a in per_token]
                if len(conv.tokens) < 2 or not any(a != 0 and s for a, s in zip(per_token, conv.sampled)):
                    continue
                datums.append(build_datum(conv.tokens, conv.sampled, conv.logprobs, per_token, self.loss == "gspo"))
        if tcfg.overlong_filter:
            extra["length/overlong_filtered"] = float(len(filtered))
        if window and kept:
            extra["length/overlong_penalty"] = statistics.fmean(penalties.values())
        if kl_values:
            extra["kl/sampler_reference" if self.config.trainer.kl_reference else "kl/sampler_base"] = statistics.fmean(kl_values)
        return datums, advantages, extra

    async def train_step(self, datums: list[tinker.Datum], step: int) -> dict[str, float]:
        """Submit forward_backward and optim_step back to back, then await both; transient failures are retried.

        When forward_backward had to be sent again, the optim_step submitted with the
        failed try is let finish and a fresh one follows the gradients that did arrive.
        When either fails for good, the error records that the state is still the
        previous step's (``intact_after``), so that it can be checkpointed.
        """
        cfg = self.config.trainer
        rate = learning_rate(step, cfg.steps, cfg.learning_rate, cfg.lr_schedule, cfg.lr_warmup_steps, cfg.lr_min_ratio)
        adam = tinker.types.AdamParams(
            learning_rate=rate,
            beta1=cfg.beta1,
            beta2=cfg.beta2,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            grad_clip_norm=cfg.grad_clip_norm,
        )

        def forward_backward() -> Any:
            if isinstance(self.loss, CustomLoss):
                return self.training_client.forward_backward_custom(datums, self.loss.fn)
            return self.training_client.forward_backward(datums, self.loss, dict(cfg.loss_fn_config) or None)

        def optim_step() -> Any:
            return self.training_client.optim_step(adam)

        where = f"step {step}"
        first_backward = send_now(forward_backward)
        first_optim = send_now(optim_step)
        try:
            result, tries = await call_service(where, "forward_backward", forward_backward, self.backoff, first_backward)
        except ServiceCallError as exc:
            await settle(first_optim)  # it had no gradients of this batch to apply
            exc.intact_after = step - 1
            raise
        if tries > 1:
            await settle(first_optim)
            first_optim = None
        try:
            await call_service(where, "optim_step", optim_step, self.backoff, first_optim)
        except ServiceCallError as exc:
            exc.intact_after = step - 1
            raise
        metrics = {"train/learning_rate": rate, **{f"train/{k}": float(v) for k, v in (result.metrics or {}).items()}}
        metrics.update(sampler_train_kl(datums, result.loss_fn_outputs or []))
        return metrics

    async def save(self, step: int, rolling: bool = False) -> Checkpoint:
        """Save weights + optimizer (to resume) and sampler weights (to sample from); recorded by the caller.

        ``rolling``: the state only, in one of two slots taken in turn, so periodic saves
        replace the older one instead of piling up. Transient service failures are retried.
        """
        where = f"step {step}"
        if rolling:
            self.rolling_saves += 1
            name = f"rolling-{self.rolling_saves % 2}"
        else:
            name = f"step-{step:06d}"
        save_state = lambda: self.training_client.save_state(name, overwrite=True)
        state = send_now(save_state)
        sampler_path = None
        if not rolling:
            save_sampler = lambda: self.training_client.save_weights_for_sampler(name)
            sampler = send_now(save_sampler)
        state_path = (await call_service(where, "save_state", save_state, self.backoff, state))[0].path
        if not rolling:
            sampler_path = (await call_service(where, "save_weights_for_sampler", save_sampler, self.backoff, sampler))[0].path
        log.info("checkpoint saved", step=step, path=state_path, sampler_path=sampler_path)
        return Checkpoint(step=step, state_path=state_path, sampler_path=sampler_path)


async def _prepare(
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
    check_names(config, plugins.registry)
    choice = choose_backend(config, plugins.registry)
    backend = choice.name
    factory = plugins.registry.lookup("backends", backend, "backend").obj
    if config.backend == "auto":
        log.info("backend chosen", backend=backend, reason=choice.reason)
    envs = _load_envs(config, plugins)
    service = await maybe_await(factory(config, Path(config.runs_dir) / config.name))  # a backend may check its connection
    return config, plugins, envs, service, backend


async def _train(config: RunConfig, resume_dir: Path | None, plugins: Plugins | None) -> dict[str, Any]:
    changed = sorted(check_resume_changes(resume_dir, config)) if resume_dir is not None else []
    config, plugins, envs, service, backend = await _prepare(config, resume_dir, plugins)
    if config.trainer.eval_every:
        check_splits(envs, EvalPlan.from_config(config.trainer), require_held_out=True)
    if resume_dir is None:
        RunDirectory.ensure_new(config)
    last = RunDirectory(resume_dir).last_checkpoint() if resume_dir is not None else None
    start = last.step + 1 if last else 0
    if resume_dir is not None:
        log.info("resuming", run=str(resume_dir), step=start, checkpoint=last.state_path if last else None, changed=changed)
    session = Session(config, plugins, envs, service)
    status = "errored"
    try:
        await session.start(last.state_path if last else (config.trainer.resume_from or None), with_optimizer=last is not None)
        run = RunDirectory.create(config) if resume_dir is None else RunDirectory.resume(resume_dir, config, start)
        sinks = SinkSet(config, plugins.registry, run)  # after the claim: sinks write into the folder
        summary: dict[str, Any] = {"run_dir": str(run.path), "stopped": "early"}
        try:
            log.info("training", run=str(run.path), backend=backend, envs=[h.name for h in envs], steps=config.trainer.steps, start=start)
            try:
                summary = await _loop(session, run, sinks, start)
            except ServiceCallError as exc:  # keep what the run trained, say how to continue it
                raise exc.resumable(run.path, await _save_after_failure(session, run, exc.intact_after)) from exc.error
            status = "success"
        finally:
            sinks.close(summary)  # also on an error or Ctrl-C: the progress bar stops, files stay whole
    except (KeyboardInterrupt, asyncio.CancelledError, RunInterrupted):
        status = "interrupted"
        raise
    finally:
        await _close_environments(envs)
        await _close_service(service, status)
    return summary


async def _save_after_failure(session: Session, run: RunDirectory, intact_after: int | None) -> int | None:
    """Checkpoint the state a failed step left intact, unless already saved; the last checkpoint's step."""
    last = run.last_checkpoint()
    if intact_after is None or intact_after < 0 or (last is not None and last.step >= intact_after):
        return last.step if last else None
    try:
        checkpoint = await session.save(intact_after)
    except ServiceCallError as exc:
        log.warning("could not save a checkpoint after the failure", step=intact_after, error=str(exc))
        return last.step if last else None
    run.record_checkpoint(checkpoint)
    return checkpoint.step


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
    outcome = TrainingOutcome()
    began = time.perf_counter()
    stop = StopOnSignal(f"minds run --resume {run.path}")
    stop.install()
    try:
        for step in range(start, steps):
            step_began = time.perf_counter()
            while next_launch < steps and next_launch <= step + ahead:
                pending[next_launch] = asyncio.create_task(session.collect(next_launch, policy))
                next_launch += 1
            batch = await pending.pop(step)
            waited = time.perf_counter() - step_began
            datums, advantages, extra = await session.datums(batch)
            outcome.record(step, len(datums), batch.groups, advantages)
            train_began = time.perf_counter()
            train_metrics = await session.train_step(datums, step) if datums else {"train/skipped": 1.0}
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
            stopping = stop.requested
            if step == steps - 1 or stopping:
                checkpoint = await session.save(step)
            elif cfg.trainer.save_every and (step + 1) % cfg.trainer.save_every == 0:
                checkpoint = await session.save(step, rolling=True)
            record["time/save"] = time.perf_counter() - save_began
            record["time/step"] = time.perf_counter() - step_began
            sinks.write(record)
            if checkpoint is not None:  # after the metrics line: a resume never skips a step's metrics
                run.record_checkpoint(checkpoint)
            if "reward/mean" in record:
                rewards.append(record["reward/mean"])
            if stopping and step < steps - 1:
                raise RunInterrupted(
                    f"stopped by {stop.signal_name} after step {step} ({step + 1} of {steps} done); checkpoint saved. "
                    f"Continue with: minds run --resume {run.path}",
                    stop.signum or 0,
                )
    finally:
        stop.restore()
        for task in pending.values():
            task.cancel()
    return {
        "steps": steps - start,
        "reward/first": rewards[0] if rewards else None,
        "reward/last": rewards[-1] if rewards else None,
        "seconds": time.perf_counter() - began,
        "run_dir": str(run.path),
        **outcome.summary(),
    }


async def _evaluate_during_training(session: Session, policy: Policy, run: RunDirectory, step: int) -> dict[str, float]:
    """The updated policy of ``step`` on the held-out split: ``eval/*`` metrics, rollouts in eval/step-NNNNNN.jsonl."""
    evaluation = await evaluate_policy(session, policy, EvalPlan.from_config(session.config.trainer), step=step, require_held_out=True)
    save_evaluation(run.path / EVAL_DIR / f"step-{step:06d}.jsonl", evaluation, {"step": step})
    return evaluation.metrics()


def train(config: RunConfig, resume_dir: Path | None = None, plugins: Plugins | None = None) -> dict[str, Any]:
    """Run (or resume) training; returns a summary of the run (``trained_steps``, and ``not_trained`` saying why
    when steps ran but none trained). ``plugins`` defaults to the installed ones."""
    if config.trainer.mode == "sft":
        if resume_dir is not None:
            raise UsageError("--resume continues RL runs; start SFT from saved weights with trainer.resume_from")
        from minds_core.sft import train_sft

        return train_sft(config, plugins)
    return asyncio.run(_train(config, resume_dir, plugins))


async def _evaluate(
    config: RunConfig, plan: EvalPlan, model_path: str | None, state_path: str | None, plugins: Plugins | None
) -> Evaluation:
    config, plugins, envs, service, _ = await _prepare(config, None, plugins)
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
