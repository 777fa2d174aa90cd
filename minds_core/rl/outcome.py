"""Whether training learned anything: why a step had no datum, and a run's verdict when no step trained."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from minds_core.base.logs import get_logger
from minds_core.episodes.groups import Dropped, Group
from minds_core.rl.advantages import is_constant

log = get_logger("rl")

#: Characters of a rollout error quoted in a reason.
_ERROR_CHARS = 160


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def no_datum_reason(groups: Sequence[Group]) -> str:
    """Why a batch of groups produced no datum to train on, in words a user can act on."""
    rollouts = [r for g in groups for r in g.rollouts]
    ok = [r for r in rollouts if r.ok]
    if not rollouts:
        return "the batch had no rollouts"
    if not ok:
        first = next((r.error for r in rollouts if r.error), "unknown error")
        return f"all {_count(len(rollouts), 'rollout')} failed (first error: {first[:_ERROR_CHARS]})"
    kept = [g for g in groups if not g.dropped]
    if not kept:
        failures = sum(g.dropped is Dropped.FAILURES for g in groups)
        constant = sum(g.dropped is Dropped.CONSTANT for g in groups)
        parts = []
        if failures:
            parts.append(f"{failures} with more failed rollouts than max_failing_rollouts")
        if constant:
            parts.append(f"{constant} with equal rewards (rollout.drop_constant_reward_groups)")
        return f"every group was dropped: {', '.join(parts)}"
    kept_ok = [r for g in kept for r in g.ok_rollouts]
    if all(not r.advantage for r in kept_ok):
        if all(len(g.ok_rollouts) <= 1 for g in kept):
            return (
                "group size 1: each task had one scored rollout, so there is nothing to compare it with and every "
                "advantage is 0; set trainer.group_size (or the environment's group_size) to 2 or more"
            )
        if all(is_constant([r.reward for r in g.ok_rollouts]) for g in kept):
            seen = sorted({r.reward for r in kept_ok})
            shown = ", ".join(f"{v:g}" for v in seen[:4]) + (", ..." if len(seen) > 4 else "")
            return (
                f"all rewards within each group were equal (rewards seen: {shown}), so every advantage is 0: "
                "the reward does not tell the rollouts of a task apart"
            )
        return "the advantage estimator (trainer.advantage) returned 0 for every rollout"
    return "no rollout had a sampled token with a nonzero advantage (completions shorter than 2 tokens?)"


@attrs.define
class TrainingOutcome:
    """Counts the steps that trained; remembers why the others did not."""

    trained: int = 0
    skipped: Counter[str] = attrs.field(factory=Counter)

    def record(self, step: int, datums: int, groups: Sequence[Group]) -> None:
        """Note one step; a step without datums logs one warning with the reason."""
        if datums:
            self.trained += 1
            return
        reason = no_datum_reason(groups)
        self.skipped[reason] += 1
        log.warning("step trained on nothing", step=step, reason=reason)

    def summary(self) -> dict[str, Any]:
        """``trained_steps``, and ``not_trained`` (why) when steps ran but none of them trained."""
        out: dict[str, Any] = {"trained_steps": self.trained}
        if self.trained == 0 and self.skipped:
            out["not_trained"] = "; ".join(f"{reason} ({_count(n, 'step')})" for reason, n in self.skipped.most_common())
        return out
