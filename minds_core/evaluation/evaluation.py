"""Evaluating a policy: the first N tasks of a (held-out) split, K samples each, scored by the environment.

Used by ``minds eval`` on a checkpoint and by ``trainer.eval_every`` during a
run. Every rollout is kept (``eval/<name>.jsonl``, one line per task in ``rollout_records``' shape); the summary has the mean
reward with a task-clustered 95% interval, pass@k when rewards are binary,
and the mean of each rubric component. Failed rollouts are counted and left
out of the means, never scored 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from minds_core.backends.retry import ServiceCallError, ServiceLost, guarded
from minds_core.base.errors import ConfigError
from minds_core.base.logs import get_logger
from minds_core.config import RunConfig, TrainerConfig
from minds_core.contract.parts import GroupOrder
from minds_core.episodes.groups import Group
from minds_core.episodes.rollout_records import components, group_record
from minds_core.evaluation.estimators import mean_interval, pass_at_ks
from minds_core.session.session import EnvHandle, Policy, Session

if TYPE_CHECKING:
    from minds_core.contract.plugins import Plugins

log = get_logger("evaluation")

#: Split names taken as held out, in order of preference, when no split is configured.
HELD_OUT_SPLITS = ("test", "eval", "validation")

#: Folder of a run that holds its evaluations.
EVAL_DIR = "eval"

@attrs.frozen
class EvalPlan:
    """What to evaluate: ``split`` ("" = the held-out one), the first ``tasks`` tasks, ``samples`` each."""

    split: str = ""
    tasks: int = 32
    samples: int = 4

    @classmethod
    def from_config(cls, trainer: TrainerConfig) -> EvalPlan:
        return cls(trainer.eval_split, trainer.eval_tasks, trainer.eval_samples)


def _has_split(handle: EnvHandle, split: str) -> bool:
    """Whether the environment has tasks in ``split``; an environment may also say it has no such split by raising."""
    try:
        return len(handle.env.tasks(split)) > 0
    except (KeyError, ValueError, ConfigError):
        return False


def pick_split(handle: EnvHandle, requested: str, require_held_out: bool) -> str:
    """The split to evaluate ``handle`` on; a ConfigError naming the choices when there is none.

    ``requested`` wins when set. Otherwise the first of HELD_OUT_SPLITS the
    environment has; failing that, its training split (with a warning), unless
    ``require_held_out`` (evaluation during training must not score the training data).
    """
    if requested:
        if not _has_split(handle, requested):
            raise ConfigError(f"environment {handle.name!r} has no tasks in split {requested!r} (trainer.eval_split / --split)")
        return requested
    for split in HELD_OUT_SPLITS:
        if _has_split(handle, split):
            return split
    if require_held_out:
        raise ConfigError(
            f"trainer.eval_every needs a held-out split, and environment {handle.name!r} has none of "
            f"{', '.join(HELD_OUT_SPLITS)}: set trainer.eval_split to one of its splits"
        )
    log.warning("no held-out split: evaluating on the training split", env=handle.name, split=handle.cfg.split)
    return handle.cfg.split


@attrs.define
class Evaluation:
    """The outcome of one evaluation.

    ``splits`` maps each environment to the split it was evaluated on;
    ``groups`` holds one group of ``samples`` rollouts per task, in order;
    ``seconds`` is the wall time it took.
    """

    splits: dict[str, str]
    groups: list[Group]
    samples: int
    seconds: float

    def summary(self) -> dict[str, Any]:
        """Flat statistics: ``reward/{mean,sem,ci95_low,ci95_high,std}``, ``pass@k``, ``component/<name>``, counts."""
        out: dict[str, Any] = _eval_metrics(self.groups)
        envs = list(self.splits)
        if len(envs) > 1:
            for name in envs:
                mine = [g for g in self.groups if g.env_name == name]
                out.update({f"env/{name}/{key}": value for key, value in _eval_metrics(mine).items()})
        out["samples"] = self.samples
        out["time/eval"] = self.seconds
        return out

    def metrics(self) -> dict[str, float]:
        """The summary's numbers as ``eval/*`` metrics (unknown values left out)."""
        return {f"eval/{key}": value for key, value in self.summary().items() if isinstance(value, (int, float))}

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready line per task: its split and every sample (``rollout_records``' shape, as in ``rollouts.jsonl``)."""
        return [group_record(group, split=self.splits[group.env_name]) for group in self.groups]


def _eval_metrics(groups: Sequence[Group]) -> dict[str, Any]:
    per_task = [[r.reward for r in g.ok_rollouts] for g in groups]
    rewards = [v for values in per_task for v in values]
    rollouts = [r for g in groups for r in g.rollouts]
    interval = mean_interval(per_task)
    out: dict[str, Any] = {f"reward/{key}": value for key, value in interval.items()}
    out["reward/std"] = statistics.pstdev(rewards) if rewards else None
    out["tasks"] = len(groups)
    out["tasks/without_reward"] = sum(not values for values in per_task)
    out["rollouts/total"] = len(rollouts)
    out["rollouts/failed"] = sum(not r.ok for r in rollouts)
    out["rollouts/timed_out"] = sum(r.timed_out for r in rollouts)
    finished = [r.conversation for r in rollouts if r.ok]
    out["rollouts/truncated"] = sum(c.truncated for c in finished)
    out["rollouts/hit_max_tokens"] = sum(c.turns > 0 and not c.last_stopped for c in finished)
    out.update({f"pass@{k}": value for k, value in pass_at_ks(per_task).items()})
    parts: dict[str, list[float]] = {}
    for rollout in rollouts:
        if rollout.ok:
            for name, value in components(rollout.metrics).items():
                parts.setdefault(name, []).append(value)
    out.update({f"component/{name}": statistics.fmean(values) for name, values in sorted(parts.items())})
    return out


async def evaluate_policy(session: Session, policy: Policy, plan: EvalPlan, *, step: int, require_held_out: bool) -> Evaluation:
    """Roll out the first ``plan.tasks`` tasks of each environment's split, ``plan.samples`` times each.

    Sampling seeds depend on the run's seed, the environment and the task only,
    so evaluations at different steps see the same tasks drawn the same way.
    """
    began = time.perf_counter()
    splits: dict[str, str] = {}
    orders = []
    for index, handle in enumerate(session.envs):
        split = pick_split(handle, plan.split, require_held_out)
        splits[handle.name] = split
        for task_index, task in enumerate(list(handle.env.tasks(split))[: plan.tasks]):
            seed = random.Random(f"{session.config.seed}:eval:{handle.name}:{task_index}").randrange(2**30)
            # an evaluation keeps every group (max_failing = samples); failures are counted instead
            orders.append(GroupOrder(index, handle.cfg, handle.name, task, plan.samples, seed, plan.samples, step))
    groups = await session.executor.run_groups(orders, policy)
    return Evaluation(splits, groups, plan.samples, time.perf_counter() - began)


def check_splits(envs: Sequence[EnvHandle], plan: EvalPlan, require_held_out: bool) -> None:
    """Fail fast (before a run starts) when an environment has no split to evaluate on."""
    for handle in envs:
        pick_split(handle, plan.split, require_held_out)


def save_evaluation(path: Path, evaluation: Evaluation, extra: dict[str, Any] | None = None) -> Path:
    """Write every rollout to ``path`` (jsonl) and the summary beside it (``.summary.json``), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {**(extra or {}), "splits": evaluation.splits, **evaluation.summary()}
    for target, text in (
        (path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in evaluation.records())),
        (summary_path(path), json.dumps(summary, indent=2, sort_keys=True) + "\n"),
    ):
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    return path


def summary_path(path: Path) -> Path:
    """``eval/<name>.jsonl`` -> ``eval/<name>.summary.json``."""
    return path.with_name(path.name.removesuffix(".jsonl") + ".summary.json")


def evaluate(
    config: RunConfig,
    plan: EvalPlan,
    model_path: str | None = None,
    state_path: str | None = None,
    plugins: Plugins | None = None,
) -> Evaluation:
    """Evaluate the weights at ``model_path`` (else the base model) without training; ``state_path`` is their saved state."""
    return asyncio.run(_evaluate(config, plan, model_path, state_path, plugins))


async def _evaluate(
    config: RunConfig, plan: EvalPlan, model_path: str | None, state_path: str | None, plugins: Plugins | None
) -> Evaluation:
    async with await Session.open(config, plugins) as session:

        async def sampled() -> Evaluation:
            policy = await session.start_sampling(model_path, state_path)
            return await evaluate_policy(session, policy, plan, step=0, require_held_out=False)

        try:  # a service that stops answering ends the evaluation within tinker.unreachable_timeout, not the SDK's minutes
            return await guarded(sampled(), session.backoff)
        except ServiceLost as exc:
            raise ServiceCallError("evaluation", f"sampling {model_path or config.model.base_model}", exc, 1) from None
