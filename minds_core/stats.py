"""Per-step metrics and the rollout samples written next to them."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from minds_core.rollout import Group


def describe(prefix: str, values: Sequence[float]) -> dict[str, float]:
    """mean/std/min/max of ``values`` under ``prefix/``; empty when there are none."""
    if not values:
        return {}
    return {
        f"{prefix}/mean": statistics.fmean(values),
        f"{prefix}/std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        f"{prefix}/min": min(values),
        f"{prefix}/max": max(values),
    }


def _mean_metrics(metric_dicts: Iterable[dict[str, float]], prefix: str) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for metrics in metric_dicts:
        for key, value in metrics.items():
            sums.setdefault(key, []).append(value)
    return {f"{prefix}/{key}": statistics.fmean(values) for key, values in sums.items()}


def batch_metrics(groups: Sequence[Group], advantages: dict[int, float], envs: Sequence[Any]) -> dict[str, Any]:
    """Reward, advantage, token, failure and per-environment statistics of one batch."""
    rollouts = [r for g in groups for r in g.rollouts]
    ok = [r for r in rollouts if r.ok]
    record: dict[str, Any] = {}
    record.update(describe("reward", [r.reward for r in ok]))
    record.update(describe("advantage", list(advantages.values())))
    conversations = [r.conversation for r in ok if r.conversation is not None]
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
            "groups/dropped_failures": sum(g.dropped == "failures" for g in groups),
            "groups/dropped_constant": sum(g.dropped == "constant" for g in groups),
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
            record[f"{prefix}/reward_mean"] = statistics.fmean(r.reward for r in env_ok)
        record.update(_mean_metrics((r.metrics for r in env_ok), prefix))
    return record


def rollout_records(step: int, groups: Sequence[Group], advantages: dict[int, float], limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` groups of a step, readable: prompt, completions, rewards."""
    records = []
    for group in groups[:limit]:
        first = next((r.conversation for r in group.rollouts if r.conversation and r.conversation.prompt), None)
        records.append(
            {
                "step": step,
                "env": group.env_name,
                "task": group.task.id,
                "dropped": group.dropped,
                "prompt": first.prompt if first else None,
                "rollouts": [
                    {
                        "completion": list(r.conversation.replies) if r.conversation else [],
                        "reward": r.reward if r.ok else None,
                        "advantage": advantages.get(id(r)),
                        "error": r.error,
                    }
                    for r in group.rollouts
                ],
            }
        )
    return records

