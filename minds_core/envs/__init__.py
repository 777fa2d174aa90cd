"""Environments: the protocol plugin authors implement, and helpers to implement it quickly."""

from minds_core.envs.calling import lenient
from minds_core.envs.rubric import Rubric, RubricScore, as_reward, call_with_available, maybe_await
from minds_core.envs.sampler import PolicySampler
from minds_core.envs.single_turn import (
    SingleTurnEnvironment,
    prompt_messages,
    report_metric,
    reward_inputs,
    score_completion,
)
from minds_core.envs.types import Context, Environment, Episode, Message, StepResult, Task

__all__ = [
    "Context",
    "Environment",
    "Episode",
    "Message",
    "PolicySampler",
    "Rubric",
    "RubricScore",
    "SingleTurnEnvironment",
    "StepResult",
    "Task",
    "as_reward",
    "call_with_available",
    "lenient",
    "maybe_await",
    "prompt_messages",
    "report_metric",
    "reward_inputs",
    "score_completion",
]
