"""One rollout of a tinker-cookbook ``Env``, played token-exactly over minds' conversation.

As the cookbook's own rollout loop does: the env's observation is the model input, each turn is
sampled after it with the env's stop condition, the sampled tokens (and the stop reason, as
``extra``) go to ``step``, and ``next_observation`` with ``next_stop_condition`` opens the next turn
until ``episode_done``. An observation that extends the sequence so far adds only its new tokens;
one that does not starts a new sequence (a datum of its own, as the cookbook's
``trajectory_to_data`` does). The run's ``max_total_tokens`` and ``max_turns`` end an episode
early (truncated), keeping the rewards it earned. The cookbook ``Trajectory`` of the rollout is kept
for the group's ``compute_group_rewards``.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import attrs

from minds_core.base.blocking import plugin_call
from minds_core.contract.environment import Context, EpisodeConversation, StepResult, Task, TokenBudgetExhausted
from minds_core.envs.sampler import PolicySampler

#: The cookbook runner's metric of turns cut at their max_tokens that the env continued from (its final transition's).
TRUNCATION_METRIC = "num_truncations_max_turn_tokens"


@attrs.define
class Played:
    """The ``Env`` a finished rollout played, for its group's ``compute_group_rewards`` (its trajectory is the
    conversation's ``record``)."""

    env: Any  #: the ``Env`` it played
    conversation: EpisodeConversation  #: held so that its id is not reused while this record lives


def observation_tokens(observation: Any, what: str) -> list[int]:
    """The token ids of a ``tinker.ModelInput``; a TypeError naming ``what`` for one holding images."""
    try:
        return list(observation.to_ints())
    except (AttributeError, ValueError, TypeError) as exc:
        raise TypeError(
            f"{what} is a {type(observation).__name__} minds cannot train on as tokens ({exc}); minds runs cookbook Envs "
            "whose observations are text tokens (tinker.ModelInput of EncodedTextChunks), not images"
        ) from None


def _takes_extra(step: Any) -> bool:
    try:
        parameters = inspect.signature(step).parameters
    except (TypeError, ValueError):
        return False
    return "extra" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


class EnvSource(Protocol):
    """Where an episode takes its cookbook env and leaves what it played (``CookbookEnvironment``)."""

    async def take_env(self, task: Task, sampler: PolicySampler) -> Any:
        """An env of ``task`` that no rollout played yet."""

    def keep(self, task: Task, played: Played) -> None:
        """Remember a finished rollout of ``task`` for its group's rewards."""


class CookbookEpisode:
    """A ``SelfDrivingEpisode`` playing one cookbook ``Env`` of its task (see the module docstring)."""

    def __init__(self, environment: EnvSource, task: Task, ctx: Context) -> None:
        self.environment, self.task, self.ctx = environment, task, ctx
        self.sampler = PolicySampler(ctx.sampler)

    async def run(self, conversation: EpisodeConversation) -> StepResult:
        from tinker_cookbook.completers import TokensWithLogprobs
        from tinker_cookbook.rl.types import InitialObservationOverflow, Trajectory, Transition

        env = await self.environment.take_env(self.task, self.sampler)
        transitions: list[Any] = []
        metrics: dict[str, float] = {}
        initial = await plugin_call(f"{type(env).__qualname__}.initial_observation", env.initial_observation)
        if isinstance(initial, InitialObservationOverflow):  # no sampling: its reward stands, no tokens train
            empty = _empty_input()
            transitions.append(Transition(ob=empty, ac=TokensWithLogprobs([], []), reward=initial.reward, episode_done=True, metrics=dict(initial.metrics)))
            self._keep(Trajectory(transitions, empty, stop_reason="max_tokens"), env, conversation)
            return StepResult(reward=initial.reward, done=True, metrics=dict(initial.metrics))
        observation, stop = initial
        conversation.start_tokens(observation_tokens(observation, "initial_observation()'s observation"))
        takes_extra = _takes_extra(env.step)
        final, done, stop_reason = observation, False, None
        while not done:
            try:
                turn = await conversation.sample_tokens(list(stop))
            except TokenBudgetExhausted:
                stop_reason = "max_tokens"
                break
            extra = {"extra": {"stop_reason": turn.stop_reason}} if takes_extra else {}
            result = await plugin_call(f"{type(env).__qualname__}.step", env.step, list(turn.tokens), **extra)
            action = TokensWithLogprobs(list(turn.tokens), list(turn.logprobs), stop_reason=turn.stop_reason)
            step_metrics = dict(result.metrics or {})
            transitions.append(
                Transition(observation, action, result.reward, result.episode_done, step_metrics, dict(result.logs or {}))
            )
            for key, value in step_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + value
            observation, stop, done = result.next_observation, result.next_stop_condition, bool(result.episode_done)
            final = observation
            if done:
                stop_reason = next((k.removeprefix("stop/") for k in step_metrics if k.startswith("stop/")), None)
                break
            try:
                conversation.observe_tokens(observation_tokens(observation, "step()'s next_observation"))
            except TokenBudgetExhausted:
                stop_reason = "max_tokens"
                break
        continued = sum(t.ac.stop_reason == "length" and not t.episode_done for t in transitions)
        if continued:  # as the cookbook's runner counts turns cut at max_tokens that the env played on from
            transitions[-1].metrics[TRUNCATION_METRIC] = float(continued)
            metrics[TRUNCATION_METRIC] = float(continued)
        self._keep(Trajectory(transitions, final, stop_reason=stop_reason), env, conversation)
        if not transitions:  # cut short before any step: no reward, which fails the rollout (counted)
            return StepResult(reward=None, done=False)
        return StepResult(reward=sum(t.reward for t in transitions), done=True, metrics=metrics)

    def _keep(self, trajectory: Any, env: Any, conversation: EpisodeConversation) -> None:
        conversation.record = trajectory  # travels with the rollout, also from a cluster worker
        self.environment.keep(self.task, Played(env, conversation))


def _empty_input() -> Any:
    import tinker

    return tinker.ModelInput.empty()
