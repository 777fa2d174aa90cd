"""The core's turn loop: a stepwise episode played over a conversation."""

from __future__ import annotations

from typing import Any

from minds_core.base.blocking import plugin_call
from minds_core.contract.environment import (
    Episode,
    EpisodeConversation,
    Message,
    StepResult,
    TokenBudgetExhausted,
    as_step_result,
    episode_tools,
)
from minds_core.envs.single_turn import prompt_messages


def _observation_messages(observation: Any) -> list[Message]:
    if isinstance(observation, (str, list)):
        return prompt_messages(observation)
    raise TypeError(f"initial_observation() must return a string or a list of messages, got {type(observation).__name__}")


async def take_turns(episode: Episode, conversation: EpisodeConversation) -> list[StepResult]:
    """Play ``episode`` over the empty ``conversation`` until it is done or out of budget; its StepResults in order.

    The episode's ``tools`` (read after ``initial_observation``) are rendered with it; each sampled
    turn goes to ``step``, whose messages open the next turn while it is not done.
    This is how the trainer plays every stepwise episode; a self-driving episode
    may call it from its ``run`` to play itself the same way.
    """
    results: list[StepResult] = []
    name = type(episode).__qualname__
    observation = _observation_messages(await plugin_call(f"episode {name}.initial_observation", episode.initial_observation))
    conversation.tools = episode_tools(episode)  # after the observation: opening a session may tell the tools
    conversation.start(observation)
    while True:
        try:
            action = await conversation.sample_turn()
        except TokenBudgetExhausted:
            return results
        result = as_step_result(await plugin_call(f"episode {name}.step", episode.step, action))
        results.append(result)
        if result.done:
            return results
        try:
            conversation.observe(result.messages)
        except TokenBudgetExhausted:  # a reply too long for the budget ends the episode, as a full budget does
            return results
