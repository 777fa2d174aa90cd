"""Per-step metrics of a batch of rollout groups (what ``rollouts.jsonl`` holds is ``rollout_records``)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from minds_core.episodes.conversation import Conversation, StopReason
from minds_core.episodes.groups import Dropped, Group
from minds_core.episodes.rollout_records import COMPONENT_PREFIX


def finite_mean(values: Sequence[float]) -> float:
    """The mean of ``values``; finite whenever they all are, even where their sum is not (1e308 + 1e308)."""
    try:
        return statistics.fmean(values)
    except OverflowError:
        return math.fsum(v / len(values) for v in values)


def distribution_metrics(prefix: str, values: Sequence[float]) -> dict[str, float]:
    """mean/std/min/max of ``values`` under ``prefix/``; empty when there are none."""
    if not values:
        return {}
    return {
        f"{prefix}/mean": finite_mean(values),
        f"{prefix}/std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        f"{prefix}/min": min(values),
        f"{prefix}/max": max(values),
    }


def _mean_metrics(metric_dicts: Iterable[dict[str, float]], prefix: str) -> dict[str, float]:
    """Each rollout metric's mean under ``prefix/``; reward components also get ``/min`` and ``/max``."""
    sums: dict[str, list[float]] = {}
    for metrics in metric_dicts:
        for key, value in metrics.items():
            sums.setdefault(key, []).append(value)
    record = {}
    for key, values in sums.items():
        record[f"{prefix}/{key}"] = finite_mean(values)
        if key.startswith(COMPONENT_PREFIX):
            record[f"{prefix}/{key}/min"] = min(values)
            record[f"{prefix}/{key}/max"] = max(values)
    return record


def health_metrics(groups: Sequence[Group], conversations: Sequence[Conversation]) -> dict[str, float]:
    """Signs a run can learn: reward variance within groups, reply lengths, truncation, sampler confidence."""
    record: dict[str, float] = {}
    scored = [[r.reward for r in g.ok_rollouts] for g in groups if len(g.ok_rollouts) >= 2]
    if scored:
        record["groups/zero_variance_frac"] = sum(max(rs) - min(rs) < 1e-8 for rs in scored) / len(scored)
    record.update(distribution_metrics("tokens/completion", [c.sampled_tokens for c in conversations]))
    stops = Counter({reason: 0 for reason in StopReason})
    stops.update(reason for c in conversations for reason in c.stop_reasons)
    record.update({f"stop/{reason}": float(count) for reason, count in stops.items()})
    if stops.total():
        record["stop/length_frac"] = stops[StopReason.LENGTH] / sum(stops.values())
    surprisal = [-lp for c in conversations for lp, s in zip(c.logprobs, c.sampled) if s]
    if surprisal:
        record["sampler/neg_logprob"] = statistics.fmean(surprisal)
    return record


def sampler_train_kl(datums: Sequence[Any], outputs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """KL(sampler || trained policy) over trained tokens, from forward_backward's logprobs.

    With ``r = log p_train - log q_sampler`` per token, ``exp(r) - 1 - r`` is an
    unbiased, non-negative estimate of KL(q || p) on tokens sampled from q. It is
    0 when the sampler and the trainer hold the same weights and grows with
    staleness (max_steps_off_policy) or numerical mismatch between the two.
    """
    terms = []
    for datum, output in zip(datums, outputs):
        if "logprobs" not in output:
            continue
        sampler = _floats(datum.loss_fn_inputs["logprobs"])
        for trained, q, p in zip(_trained(datum), sampler, _floats(_first_column(output["logprobs"]))):
            if trained:
                r = p - q
                terms.append(math.expm1(r) - r)
    return {"kl/sampler_train": statistics.fmean(terms)} if terms else {}


def _trained(datum: Any) -> list[bool]:
    """Per target, whether the loss trains it: a nonzero advantage, or (top-k distillation) a nonzero KL weight."""
    advantages = _floats(datum.loss_fn_inputs["advantages"])
    if "distill_weights" not in datum.loss_fn_inputs:
        return [a != 0 for a in advantages]
    weights = datum.loss_fn_inputs["distill_weights"].to_torch()
    return [a != 0 or bool(w.any()) for a, w in zip(advantages, weights)]


def _first_column(tensor: Any) -> Any:
    """The log-probs of the targets themselves: a ``[N, 1 + K]`` output's first column (top-k distillation's
    datums target the sampled token, then the teacher's top-k), else the ``[N]`` output as it is."""
    shape = getattr(tensor, "shape", None)
    if shape is None or len(shape) < 2:
        return tensor
    return tensor.to_torch()[:, 0] if hasattr(tensor, "to_torch") else tensor[:, 0]


def _floats(tensor: Any) -> list[float]:
    """A 1-D TensorData (or anything with .tolist()) as floats."""
    data = tensor.data if hasattr(tensor, "data") and isinstance(tensor.data, list) else tensor.tolist()
    return [float(x) for x in data]


def batch_metrics(groups: Sequence[Group], envs: Sequence[Any]) -> dict[str, Any]:
    """Reward, advantage, token, failure and per-environment statistics of one batch (advantages as set on the rollouts)."""
    rollouts = [r for g in groups for r in g.rollouts]
    ok = [r for r in rollouts if r.ok]
    record: dict[str, Any] = {}
    record.update(distribution_metrics("reward", [r.reward for r in ok]))
    record.update(distribution_metrics("advantage", [r.advantage for r in rollouts if r.advantage is not None]))
    conversations = [r.conversation for r in ok]
    record.update(health_metrics(groups, conversations))
    record.update(
        {
            "tokens/sampled": sum(c.sampled_tokens for c in conversations),
            "tokens/total": sum(len(c.tokens) for c in conversations),
            "tokens/turns": sum(c.turns for c in conversations),
            "rollouts/total": len(rollouts),
            "rollouts/failed": sum(not r.ok for r in rollouts),
            "rollouts/timed_out": sum(r.timed_out for r in rollouts),
            "rollouts/invalid_reward": sum(r.invalid_reward for r in rollouts),
            "rollouts/retried": sum(r.attempts > 1 for r in rollouts),
            "rollouts/truncated": sum(c.truncated for c in conversations),
            "groups/total": len(groups),
            "groups/dropped_failures": sum(g.dropped is Dropped.FAILURES for g in groups),
            "groups/dropped_constant": sum(g.dropped is Dropped.CONSTANT for g in groups),
        }
    )
    for handle in envs:
        mine = [g for g in groups if g.env_name == handle.name]
        if not mine:
            continue
        env_ok = [r for g in mine for r in g.ok_rollouts]
        prefix = f"env/{handle.name}"
        record[f"{prefix}/groups"] = len(mine)
        record[f"{prefix}/failed"] = sum(g.failures for g in mine)
        if env_ok:
            record[f"{prefix}/reward_mean"] = finite_mean([r.reward for r in env_ok])
            record[f"{prefix}/reward_min"] = min(r.reward for r in env_ok)
            record[f"{prefix}/reward_max"] = max(r.reward for r in env_ok)
        record.update(_mean_metrics((r.metrics for r in env_ok), prefix))
    record.update(tag_metrics(groups))
    return record


def tag_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """Per tag of the groups' tasks (``Task.tags``): ``tag/<tag>/groups``, its reward mean and its rollouts' metric means."""
    record: dict[str, float] = {}
    for tag in sorted({t for g in groups for t in g.task.tags}):
        mine = [g for g in groups if tag in g.task.tags]
        ok = [r for g in mine for r in g.ok_rollouts]
        record[f"tag/{tag}/groups"] = len(mine)
        if ok:
            record[f"tag/{tag}/reward_mean"] = finite_mean([r.reward for r in ok])
        record.update(_mean_metrics((r.metrics for r in ok), f"tag/{tag}"))
    return record
