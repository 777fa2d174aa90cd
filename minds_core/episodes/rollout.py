"""Rollouts: one episode per rollout, G rollouts per task, with timeouts, retries and failure policy."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

from minds_core.base.blocking import plugin_call, within_timeout
from minds_core.base.logs import get_logger
from minds_core.base.tracing import Span, active, span
from minds_core.config import RolloutConfig
from minds_core.contract.environment import (
    Context,
    Environment,
    Episode,
    SelfDrivingEpisode,
    Task,
    as_step_result,
    environment_group_rewards,
)
from minds_core.contract.plugin_errors import contained, error_text, raised_by_plugin
from minds_core.contract.rubric import (
    INVALID_PARTS_METRIC,
    MAX_REWARD,
    as_reward,
)
from minds_core.envs.turns import take_turns
from minds_core.episodes.coalesce import GroupSampler
from minds_core.episodes.conversation import Conversation
from minds_core.episodes.group_rewards import group_rubric, score_group, score_group_with_environment
from minds_core.episodes.groups import Dropped, EpisodeSettings, Group, Rollout

log = get_logger("rollout")


async def play_episode(episode: Episode | SelfDrivingEpisode, conversation: Conversation) -> tuple[list[Any], dict[str, float]]:
    """Drive an episode to its end; returns the raw step rewards and summed step metrics.

    A SelfDrivingEpisode drives the conversation itself and returns one final
    StepResult; a stepwise Episode is played by ``take_turns``. The
    conversation enforces max_total_tokens and max_turns for both kinds.
    """
    if isinstance(episode, SelfDrivingEpisode):
        results = [as_step_result(await plugin_call(f"episode {type(episode).__qualname__}.run", episode.run, conversation))]
    else:
        results = await take_turns(episode, conversation)
    rewards = [result.reward for result in results if result.reward is not None]
    if not rewards and results and results[-1].done:  # it ended with no reward: an invalid reward, as the docs say
        rewards = [None]  # (one cut short by the token or turn budget before any reward fails instead)
    metrics: dict[str, float] = {}
    for result in results:
        for key, value in result.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + _metric_value(key, value)
    return rewards, metrics


def _metric_value(key: str, value: Any) -> float:
    """A step metric as a float; a TypeError naming the key when it is not a number (the rollout fails, counted)."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        shown = repr(value)[:80]
        raise TypeError(f"StepResult.metrics[{key!r}] is {type(value).__name__} {shown}: a step metric must be a number") from None


def _total_reward(raw: list[Any]) -> float | None:
    """Sum of the step rewards; None when any is not a finite number."""
    values = [as_reward(r) for r in raw]
    if any(v is None for v in values):
        return None
    return math.fsum(v for v in values if v is not None)


async def run_rollout(
    env: Environment, task: Task, ctx: Context, settings: EpisodeSettings, seed: int | None, sampler: Any = None, first_attempt: int = 1
) -> Rollout:
    """One rollout with the configured timeout, retries and invalid-reward policy.

    ``sampler`` (default ``ctx.sampler``) is what the conversation samples from; ``first_attempt``
    > 1 continues a rollout whose earlier attempts were spent elsewhere (a worker that died).
    """
    cfg = settings.rollout
    attempts = cfg.retries + 1
    last: Rollout | None = None
    for attempt in range(first_attempt, attempts + 1):
        params = settings.params.model_copy(update={"seed": None if seed is None else seed + 7919 * (attempt - 1)})
        conversation = Conversation(settings.renderer, sampler or ctx.sampler, params, cfg.max_total_tokens, cfg.max_turns)
        episode = None
        try:
            episode = await plugin_call(f"environment {type(env).__qualname__}.episode", env.episode, task, ctx)
            raw, metrics = await within_timeout(contained(play_episode(episode, conversation)), cfg.timeout)
        except TimeoutError as exc:
            last = Rollout(conversation, error=str(exc) or f"timed out after {cfg.timeout:g} s", timed_out=True, attempts=attempt)
            continue
        except BaseException as exc:  # an environment's failure (sys.exit included) fails only its rollout
            if not raised_by_plugin(exc):
                raise
            last = Rollout(conversation, error=error_text(exc), attempts=attempt)
            continue
        finally:
            await close_quietly(episode, "episode", cfg.timeout)
        return _scored(conversation, raw, metrics, cfg, attempt)
    assert last is not None
    return last


def _scored(conversation: Conversation, raw: list[Any], metrics: dict[str, float], cfg: RolloutConfig, attempt: int) -> Rollout:
    if not raw:
        return Rollout(conversation, metrics=metrics, error="the episode ended without any reward (token or turn budget?)", attempts=attempt)
    reward = _total_reward(raw)
    invalid = reward is None or metrics.get(INVALID_PARTS_METRIC, 0) > 0
    if invalid and cfg.invalid_reward == "fail":
        error = f"invalid reward {repr(raw)[:200]}: a reward must be a finite number within ±{MAX_REWARD:g}"
        return Rollout(conversation, metrics=metrics, error=error, invalid_reward=True, attempts=attempt)
    if reward is None:
        log.warning("non-numeric reward counted as 0", rewards=repr(raw)[:200], rule=f"a finite number within ±{MAX_REWARD:g}")
        reward = 0.0
    return Rollout(conversation, reward, metrics, invalid_reward=invalid, attempts=attempt)


async def close_quietly(obj: Any, what: str, timeout: float) -> None:
    """Call ``obj.close()`` if it has one (sync or async), given up after ``timeout`` seconds (0: no limit);
    a failure is logged, never raised."""
    close = getattr(obj, "close", None)
    if callable(close):
        try:
            # timed and named as any plugin call (a sync close() that blocks is named at Ctrl-C); contained: in
            # wait_for's task, a sys.exit would end the event loop
            closing = contained(plugin_call(f"{what} {type(obj).__qualname__}.close", close))
            await (asyncio.wait_for(closing, timeout) if timeout > 0 else closing)
        except BaseException as exc:  # sys.exit in close() included: it never sets the run's exit code
            if not raised_by_plugin(exc):
                raise
            error = f"timed out after {timeout:g} s" if isinstance(exc, TimeoutError) else error_text(exc)
            log.warning("close failed", what=what, error=error)


async def run_group(
    env_name: str,
    env: Environment,
    task: Task,
    group_size: int,
    make_ctx: Callable[[], Context],
    settings: EpisodeSettings,
    limiter: asyncio.Semaphore,
    max_failing: int,
    seed: int | None,
) -> Group:
    """``group_size`` rollouts of one task, concurrently under ``limiter``; drop by policy.

    Turns with identical prompts are sampled in one request (see GroupSampler).
    """
    first = make_ctx()
    shared = GroupSampler(first.sampler)

    async def one(index: int) -> Rollout:
        async with limiter:
            ctx = first if index == 0 else make_ctx()
            shared.enter()
            try:
                with traced_episode(env_name, task, index) as episode:
                    rollout = await run_rollout(env, task, ctx, settings, None if seed is None else seed + index, shared)
                    if episode is not None:
                        episode.set(attempts=rollout.attempts, reward=rollout.reward, error=rollout.error)
                    return rollout
            finally:
                shared.leave()

    with span("group", lane=True, environment=env_name, task=task.id, size=group_size):
        rollouts = list(await asyncio.gather(*(one(i) for i in range(group_size))))
        return await finish_group(env_name, env, task, rollouts, first, settings.rollout, max_failing)


@contextlib.contextmanager
def traced_episode(env_name: str, task: Task, index: int) -> Iterator[Span | None]:
    """The span ``episode`` of one rollout (its own track), counted in ``episodes_in_flight`` while it runs."""
    tracer = active()
    if tracer is not None:
        tracer.adjust("episodes_in_flight", 1)
    try:
        with span("episode", lane=True, environment=env_name, task=task.id, index=index) as episode:
            yield episode
    finally:
        if tracer is not None:
            tracer.adjust("episodes_in_flight", -1)


async def finish_group(
    env_name: str, env: Environment, task: Task, rollouts: list[Rollout], ctx: Context, cfg: RolloutConfig, max_failing: int
) -> Group:
    """The group of ``rollouts`` (however they were played): scored by the environment's group rubric
    (with ``ctx``) and its own ``group_rewards`` (``GroupRewards``), dropped by policy (too many failures, constant rewards), failures logged."""
    if (rubric := group_rubric(env)) is not None:
        await score_group(rubric, task, rollouts, ctx, cfg)
    if (scorer := environment_group_rewards(env)) is not None:
        await score_group_with_environment(scorer, task, rollouts, cfg)
    group = Group(env_name, task, rollouts)
    rewards = [r.reward for r in group.ok_rollouts]
    if group.failures > max_failing or not rewards:
        group.dropped = Dropped.FAILURES
    elif cfg.drop_constant_reward_groups and max(rewards) - min(rewards) < 1e-8:
        group.dropped = Dropped.CONSTANT
    for rollout in rollouts:
        if rollout.error:
            log.warning("rollout failed", env=env_name, task=task.id, error=rollout.error[:300], attempts=rollout.attempts)
    return group
