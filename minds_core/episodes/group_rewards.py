"""Group-level rewards: rubric functions that score all rollouts of a task together.

A reward function that names any of ``completions``, ``prompts``, ``tasks``,
``answers`` or ``infos`` (verifiers' plural names) is a GROUP reward function.
The core calls it once per group, after every rollout of the group finished,
with one list entry per successful rollout (``completions[i]`` is the last
reply of rollout ``i``; ``ctx`` is also available), and it returns one reward
per member: pairwise and tournament rewards become possible. Its weighted value
is added to each rollout's reward and recorded as ``reward/<name>``.

Failures are counted, never scored 0 silently: a group function that raises,
times out (``rollout.timeout``) or returns the wrong number of rewards fails
every rollout of the group (``rollouts/failed``; the group is then dropped
under ``rollout.max_failing_rollouts``); a member's value that is not a finite
number is an invalid reward part, handled by ``rollout.invalid_reward``.

An environment may also score its groups itself (``GroupRewards``: tinker-cookbook's
``compute_group_rewards``); ``score_group_with_environment`` adds what it returns, with the same
failure rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from minds_core.base.blocking import within_timeout
from minds_core.base.logs import get_logger
from minds_core.contract.environment import Context, GroupRewards, Task, environment_rubric
from minds_core.contract.plugin_errors import contained, error_text, raised_by_plugin
from minds_core.contract.rubric import INVALID_PARTS_METRIC, Rubric

if TYPE_CHECKING:
    from minds_core.config import RolloutConfig
    from minds_core.episodes.groups import Rollout

log = get_logger("rollout")


def group_rubric(env: Any) -> Rubric | None:
    """The environment's rubric when it has group reward functions, else None."""
    rubric = environment_rubric(env)
    return rubric if rubric is not None and rubric.has_group_rewards else None


async def score_group(rubric: Rubric, task: Task, rollouts: Sequence[Rollout], ctx: Context, cfg: RolloutConfig) -> None:
    """Add the group reward functions' rewards to the successful ``rollouts`` of ``task`` (in place)."""
    ok = [r for r in rollouts if r.ok]
    if not ok:
        return
    n = len(ok)
    available = {
        "completions": [r.conversation.replies[-1] if r.conversation.replies else "" for r in ok],
        "prompts": [task.prompt] * n,
        "tasks": [task] * n,
        "answers": [task.answer] * n,
        "infos": [task.info] * n,
        "ctx": ctx,
    }
    scores = await _guarded(rubric.score_group(available, n), task, ok, cfg)
    if scores is None:
        return
    for rollout, score in zip(ok, scores):
        rollout.reward += score.total
        rollout.metrics.update({f"reward/{name}": value for name, value in score.parts.items()})
        if score.invalid:
            rollout.metrics[INVALID_PARTS_METRIC] = rollout.metrics.get(INVALID_PARTS_METRIC, 0.0) + len(score.invalid)
            rollout.invalid_reward = True
            if cfg.invalid_reward == "fail":
                rollout.error = f"invalid group reward from {', '.join(score.invalid)}"


async def _guarded(scoring: Any, task: Task, ok: Sequence[Rollout], cfg: RolloutConfig) -> Any:
    """What ``scoring`` returns within ``rollout.timeout``; None when it failed, having failed every rollout of ``ok``."""
    try:
        return await within_timeout(contained(scoring), cfg.timeout)  # charged to the group's rollouts
    except BaseException as exc:  # a reward function's failure (sys.exit included) fails its group's rollouts
        if not raised_by_plugin(exc):
            raise
        error = f"group reward failed: {str(exc) or 'timed out' if isinstance(exc, TimeoutError) else error_text(exc)}"
        log.warning("group reward failed", task=task.id, error=error[:300])
        for rollout in ok:
            rollout.error = error
        return None


async def score_group_with_environment(env: GroupRewards, task: Task, rollouts: Sequence[Rollout], cfg: RolloutConfig) -> None:
    """Add the environment's group rewards (``GroupRewards``) to the successful ``rollouts`` of ``task`` (in place).

    Each reward is added to its rollout's and recorded as ``reward/group``; its metrics are merged in.
    """
    ok = [r for r in rollouts if r.ok]
    if not ok:
        return

    async def scoring() -> list[tuple[float, dict[str, float]]]:
        answered = list(await env.group_rewards(task, [r.conversation for r in ok]))
        if len(answered) != len(ok):
            raise ValueError(f"group_rewards returned {len(answered)} entries for {len(ok)} rollouts")
        return [(float(reward), {str(k): float(v) for k, v in dict(metrics).items()}) for reward, metrics in answered]

    scores = await _guarded(scoring(), task, ok, cfg)
    for rollout, (reward, metrics) in zip(ok, scores or []):
        rollout.reward += reward
        rollout.metrics.update(metrics)
        rollout.metrics["reward/group"] = reward
