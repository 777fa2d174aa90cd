"""A verifiers MultiTurnEnv over an in-memory dataset: every answer is followed by "Why?"."""

import verifiers as vf
from datasets import Dataset


class Interview(vf.MultiTurnEnv):
    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        return [vf.UserMessage(content=f"Why? ({len(state['trajectory'])} answers so far)")]


def answered_every_turn(completion: vf.Messages) -> float:
    replies = [m for m in completion if m["role"] == "assistant"]
    return sum(bool(m["content"]) for m in replies) / len(replies)


def load_environment(turns: int = 2) -> Interview:
    topics = ["tea", "rain", "maps", "bells"]
    return Interview(
        dataset=Dataset.from_list([{"question": f"Do you like {t}?", "answer": ""} for t in topics]),
        rubric=vf.Rubric(funcs=[answered_every_turn]),
        max_turns=turns,
    )
