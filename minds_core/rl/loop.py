"""RL training, one step as a pipeline: collect -> score -> process -> train -> record -> save.

- collect: roll out the step's groups with the newest policy (``rollout``);
- score: with ``trainer.kl_penalty``, the KL reference's log-probs of every kept rollout (``kl_reference``);
  with a loss that reads the teacher's top-k (``topk_distill``), the teacher's top-k at every token (``distill_teacher``);
- process: advantages, length and KL shaping, datums (``data_processing``, no service calls);
- train: ``forward_backward`` and ``optim_step`` submitted back to back before either is awaited
  (``training_requests``); a fresh sampling client follows every update;
- record: one metrics line (and a few rollouts) per step; ``trainer.eval_every`` adds ``eval/*``;
- save: the last step, every ``trainer.save_every`` steps (two rolling slots), and on Ctrl-C/SIGTERM.

When to evaluate and save, the batches sampled ahead and the step's timings live in ``rl_pacing``.

With ``max_steps_off_policy = k`` the batches of the next k steps are sampled
while this one trains, with samplers at most k updates old.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import tinker

from minds_core.backends.retry import ServiceCallError, ServiceLost, guarded
from minds_core.base.logs import get_logger
from minds_core.base.tracing import SelfTimes, active, memory_bytes, run_tracer, span
from minds_core.config import RunConfig
from minds_core.contract.parts import GroupOrder
from minds_core.contract.plugins import Plugins
from minds_core.episodes.groups import Group
from minds_core.episodes.rollout_records import group_record
from minds_core.evaluation.evaluation import EVAL_DIR, EvalPlan, check_splits, evaluate_policy, save_evaluation
from minds_core.rl.data_processing import ProcessedBatch, ProcessingSettings, process_batch
from minds_core.rl.distill_teacher import TeacherScorer
from minds_core.rl.kl_reference import ReferenceScorer
from minds_core.rl.outcome import TrainingOutcome
from minds_core.rl.step_metrics import batch_metrics
from minds_core.rl.updates import train_step
from minds_core.session.session import Policy, Session
from minds_core.sinks import SinkSet
from minds_core.training.data_order import DataOrder
from minds_core.training.pacing import BatchesAhead, Cadence, Save, StepTimer
from minds_core.training.requests import check_losses, save_after_failure, save_checkpoint, step_checkpoint_name
from minds_core.training.run_directory import (
    ROLLING_KEPT,
    ROLLING_PREFIX,
    CheckpointRecord,
    RunDirectory,
    RunLock,
    check_resume_changes,
    file_error,
    start_point,
)

T = TypeVar("T")
log = get_logger("rl")


@attrs.define
class Batch:
    """The rollout groups of one step."""

    step: int  #: the step they train
    groups: list[Group]  #: one group per scheduled (environment, task), in schedule order
    policy_version: int  #: the version of the policy that sampled them
    seconds: float  #: wall time the rollouts took


class RLLoop:
    """The steps of one run, from ``start`` to ``trainer.steps``, on an open session with a training client."""

    def __init__(self, session: Session, reference: ReferenceScorer | None) -> None:
        config = session.config
        registry = session.plugins.registry
        self.session = session
        self.config = config
        self.reference = reference
        self.teacher: TeacherScorer | None = None  #: the distillation teacher (``start``), when the loss reads it
        self.loss = registry.lookup("losses", config.trainer.loss_fn, "trainer.loss_fn").obj
        estimator = registry.lookup("advantage_estimators", config.trainer.advantage, "trainer.advantage").obj
        self.processing = ProcessingSettings.from_config(config, estimator, self.loss)
        self.schedule = DataOrder(
            config.seed, [h.cfg.weight for h in session.envs], [len(h.tasks) for h in session.envs], config.trainer.groups_per_batch
        )
        self.outcome = TrainingOutcome()
        self.rolling_saves = 0
        #: the own times of the episodes' spans, which split each step's rollout time (``phase/*``); set by ``train_rl``
        self.self_times: SelfTimes | None = None

    @classmethod
    async def start(cls, session: Session) -> RLLoop:
        """The loop of an open session, with its KL reference and distillation teacher when the config asks for them."""
        config, backoff = session.config, session.backoff
        reference = await ReferenceScorer.start(session.service, config, backoff)
        loop = cls(session, reference)
        if loop.processing.distill is not None:
            loop.teacher = await TeacherScorer.start(session.service, config, backoff)
        return loop

    # ------------------------------------------------------------ the stages of a step

    async def collect(self, step: int, policy: Policy) -> Batch:
        """Roll out every group of ``step`` with ``policy``, on the session's rollout executor."""
        began = time.perf_counter()
        envs = self.session.envs
        orders = []
        for index, (env_index, task_index) in enumerate(self.schedule.batch(step)):
            handle = envs[env_index]
            seed = random.Random(f"{self.config.seed}:sample:{step}:{index}").randrange(2**30)
            task = handle.tasks[task_index]
            orders.append(GroupOrder(env_index, handle.cfg, handle.name, task, handle.group_size, seed, handle.max_failing, step))
        groups = await self.session.executor.run_groups(orders, policy)
        return Batch(step, groups, policy.version, time.perf_counter() - began)

    async def score(self, batch: Batch, policy: Policy) -> None:
        """The KL reference's log-probs (with a KL penalty) and the distillation teacher's top-k (with a loss that
        reads it; ``policy``'s sampler when the teacher is the policy) on the batch's kept rollouts."""
        where = f"step {batch.step}"
        try:
            if self.reference is not None:
                await self.reference.score(batch.groups, where)
            if self.teacher is not None:
                await self.teacher.score(batch.groups, policy.sampler, where)
        except ServiceCallError as exc:
            exc.intact_after = batch.step - 1
            raise

    def process(self, batch: Batch) -> ProcessedBatch:
        """The batch's datums (``data_processing``); the outcome remembers whether the step had any."""
        processed = process_batch(batch.groups, self.processing)
        self.outcome.record(batch.step, len(processed.datums), batch.groups)
        return processed

    async def train(self, datums: list[tinker.Datum], step: int, run: RunDirectory) -> dict[str, float]:
        """One optimizer step on ``datums`` (none: the step is skipped); ``train/*`` metrics. A non-finite loss stops the run."""
        if not datums:
            return {"train/skipped": 1.0}
        client, cfg = self.session.training_client, self.config.trainer
        metrics = await train_step(client, datums, self.loss, cfg, step, self.session.backoff)
        check_losses({k: v for k, v in metrics.items() if k.startswith("train/loss")}, step, run)
        return metrics

    async def record(
        self, batch: Batch, processed: ProcessedBatch, train_metrics: dict[str, float], policy: Policy, run: RunDirectory, evaluate: bool
    ) -> dict[str, Any]:
        """The step's metrics line without its timings (``eval/*`` too when ``evaluate``); its first groups to rollouts.jsonl."""
        run.log_rollouts([group_record(g, step=batch.step) for g in batch.groups[: self.config.metrics.rollouts_per_step]])
        record = batch_metrics(batch.groups, self.session.envs)
        record.update(train_metrics)
        record.update(processed.metrics)
        record.update(
            {
                "step": batch.step,
                "train/datums": len(processed.datums),
                "sampler/staleness": policy.version - 1 - batch.policy_version,
            }
        )
        if evaluate:
            record.update(await self.evaluate(policy, run, batch.step))
        return record

    async def evaluate(self, policy: Policy, run: RunDirectory, step: int) -> dict[str, float]:
        """The updated policy of ``step`` on the held-out split: ``eval/*`` metrics, rollouts in eval/step-NNNNNN.jsonl."""
        plan = EvalPlan.from_config(self.config.trainer)
        evaluating = evaluate_policy(self.session, policy, plan, step=step, require_held_out=True)
        with span("evaluation", step=step):
            evaluation = await self.unless_lost(evaluating, step, f"evaluation (policy v{policy.version})")
        save_evaluation(run.path / EVAL_DIR / f"step-{step:06d}.jsonl", evaluation, {"step": step})
        return evaluation.metrics()

    async def save_due(self, step: int, due: Save | None) -> CheckpointRecord | None:
        """What the cadence asks ``step`` to save (nothing: None)."""
        return await self.save(step, rolling=due is Save.ROLLING) if due else None

    async def save(self, step: int, rolling: bool = False) -> CheckpointRecord:
        """Save weights + optimizer (to resume) and sampler weights (to sample from); recorded by the caller.

        ``rolling``: the state only, in one of two slots taken in turn, so periodic saves
        replace the older one instead of piling up.
        """
        if rolling:
            self.rolling_saves += 1
            name = f"{ROLLING_PREFIX}{self.rolling_saves % ROLLING_KEPT}"
        else:
            name = step_checkpoint_name(step)
        return await save_checkpoint(self.session.training_client, step, name, self.session.backoff, with_sampler=not rolling)

    async def delete(self, outdated: list[CheckpointRecord]) -> None:
        """Delete from the service the periodic saves that newer ones outdated (a run's before its resume); a
        failure is logged, naming those left: training goes on, and they stay until deleted by hand."""
        left = [checkpoint.state_path for checkpoint in outdated]
        if not left:
            return
        try:
            rest = self.session.door.rest_client()
            while left:
                await asyncio.to_thread(lambda path=left[0]: rest.delete_checkpoint_from_tinker_path(path).result())
                left.pop(0)
        except Exception as exc:  # noqa: BLE001 - the service's error, reported; training goes on
            log.warning("could not delete periodic saves that newer ones outdated", paths=left, error=f"{type(exc).__name__}: {exc}")

    async def sampled(self, ahead: BatchesAhead[Any], step: int, policy: Policy) -> Any:
        """``step``'s batch; a ServiceCallError when the service is lost while its rollouts sample."""
        return await self.unless_lost(ahead.take(step, policy), step, f"sampling (policy v{policy.version})")

    async def unless_lost(self, work: Awaitable[T], step: int, what: str) -> T:
        """``await work`` (many requests of ``step``: its rollouts); a ServiceCallError naming ``what`` when the service is lost."""
        try:
            return await guarded(work, self.session.backoff)
        except ServiceLost as exc:
            raise ServiceCallError(f"step {step}", what, exc, 1) from None

    # ------------------------------------------------------------ the steps

    async def one_step(
        self, step: int, ahead: BatchesAhead[Any], cadence: Cadence, stop: Any, run: RunDirectory, policy: Policy
    ) -> tuple[dict[str, Any], Policy, CheckpointRecord | None, bool]:
        """The stages of ``step``, each timed (``time/*``, ``phase/*``) and traced: its metrics line, the updated
        policy, the checkpoint it saved (None: none) and whether a stop was asked for before it saved."""
        timer = StepTimer(self.self_times)
        with timer.stage("wait_for_batch"):
            batch = await self.sampled(ahead, step, policy)
        with timer.stage("score"):
            await self.score(batch, policy)
        with timer.stage("advantages"):
            processed = self.process(batch)
        with timer.stage("train"):
            train_metrics = await self.train(processed.datums, step, run)
            with span("sampler_snapshot"):
                policy = await self.session.policy(policy.version + 1, step)
        with timer.stage("record"):
            record = await self.record(batch, processed, train_metrics, policy, run, cadence.evaluates(step))
        stopping = stop.requested
        with timer.stage("save"):
            checkpoint = await self.save_due(step, cadence.save(step, stopping))
        record.update({"time/sample": batch.seconds, "tokens/trained": sum(d.model_input.length for d in processed.datums), **timer.metrics()})
        return record, policy, checkpoint, stopping

    async def run(self, run: RunDirectory, sinks: SinkSet, start: int) -> dict[str, Any]:
        """Steps ``start`` .. ``trainer.steps - 1``; the run's summary. A first SIGINT/SIGTERM stops after a saved step."""
        cadence = Cadence.from_config(self.config.trainer)
        ahead = BatchesAhead(self.collect, start, cadence.steps, self.config.trainer.max_steps_off_policy)
        policy = await self.session.policy(start)
        rewards: list[float] = []
        began = time.perf_counter()
        with self.session.door.stop_on_signal(f"minds run --resume {run.shown}") as stop, ahead:
            for step in range(start, cadence.steps):
                with span("step", step=step):
                    record, policy, checkpoint, stopping = await self.one_step(step, ahead, cadence, stop, run, policy)
                    startup = getattr(self.session.executor, "startup_seconds", None)  # optional (RolloutExecutor)
                    if step == start and startup is not None:  # this process's first line
                        record["executor/startup_seconds"] = round(startup, 3)
                    with span("write_metrics"):
                        sinks.write(record)
                    if checkpoint is not None:  # after the metrics line: a resume never skips a step's metrics
                        with span("delete_checkpoints"):
                            await self.delete(run.record_checkpoint(checkpoint))
                    count_throughput(record)
                if "reward/mean" in record:
                    rewards.append(record["reward/mean"])
                if stopping and not cadence.is_last(step):
                    raise stop.interrupted(step, cadence.steps)
        return {
            "steps": cadence.steps - start,
            "reward/first": rewards[0] if rewards else None,
            "reward/last": rewards[-1] if rewards else None,
            "seconds": time.perf_counter() - began,
            "run_dir": str(run.path),
            **self.outcome.summary(),
        }


def count_throughput(record: dict[str, Any]) -> None:
    """The step's counters in the trace: tokens sampled and trained per second of its wall time, and memory."""
    tracer = active()
    if tracer is None or not record.get("time/step"):
        return
    seconds = record["time/step"]
    tracer.count("tokens_per_second", sampled=record.get("tokens/sampled", 0) / seconds, trained=record["tokens/trained"] / seconds)
    tracer.count("memory_bytes", **memory_bytes())


async def train_rl(config: RunConfig, resume_dir: Path | None, plugins: Plugins | None, start_over: bool = False) -> dict[str, Any]:
    """Start (or resume, from ``resume_dir``'s last checkpoint; ``start_over``: from step 0, its checkpoint list being
    gone) an RL run and train it to its last step; its summary.

    The run folder stays locked to this process from the resume's first read (a new run: from its creation)
    until the session has closed its sinks.
    """
    with contextlib.ExitStack() as claims:
        if resume_dir is not None:
            claims.enter_context(RunLock(resume_dir))
        return await _train_rl(config, resume_dir, plugins, claims, start_over)


async def _train_rl(
    config: RunConfig, resume_dir: Path | None, plugins: Plugins | None, claims: contextlib.ExitStack, start_over: bool = False
) -> dict[str, Any]:
    changed = sorted(check_resume_changes(resume_dir, config, start_over)) if resume_dir is not None else []
    async with await Session.open(config, plugins, resume_dir) as session:
        config = session.config
        if config.trainer.eval_every:
            check_splits(session.envs, EvalPlan.from_config(config.trainer), require_held_out=True)
        start = start_point(config, resume_dir, start_over)
        if resume_dir is not None:
            checkpoint = start.state_path if start.resumed else None
            log.info("resuming", run=str(resume_dir), step=start.step, checkpoint=checkpoint, changed=changed)
        await session.start_training(start.state_path, with_optimizer=start.resumed)
        loop = await RLLoop.start(session)
        run = claims.enter_context(RunDirectory.create(config)) if resume_dir is None else RunDirectory.resume(resume_dir, config, start.step)
        try:
            sinks = session.open_sinks(run)  # after the claim: sinks write into the folder
            envs = [h.name for h in session.envs]
            log.info("training", run=str(run.path), backend=session.backend, envs=envs, steps=config.trainer.steps, start=start.step)
            with run_tracer(config.metrics, run.path, f"minds run {run.path.name}") as loop.self_times:
                session.summary = await loop.run(run, sinks, start.step)
        except ServiceCallError as exc:  # keep what the run trained, say how to continue it
            saved = await save_after_failure(session.training_client, run, exc.intact_after, session.backoff)
            raise exc.resumable(run.shown, saved) from exc.error
        except OSError as exc:  # the checkpoint store, train.log or a sink's file: disk full, read-only
            raise file_error(exc, "write", run.shown) from None
    return session.summary
