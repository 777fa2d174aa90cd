"""The environment protocol: tasks, episodes, step results and the context episodes receive."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

#: A chat message: {"role": "system" | "user" | "assistant" | "tool", "content": str, ...}.
Message = dict[str, Any]


@attrs.frozen
class Task:
    """One item of an environment's dataset; the answer travels with the task."""

    prompt: str | list[Message]
    answer: Any = None
    info: dict[str, Any] = attrs.field(factory=dict)
    id: str = ""


@attrs.define
class StepResult:
    """What an episode returns for one action.

    ``reward`` is added to the rollout's return (None = no reward this step);
    ``messages`` are the environment's reply, shown to the model next turn when
    ``done`` is false; ``metrics`` are averaged per environment in metrics.jsonl.
    """

    reward: float | None = None
    done: bool = True
    messages: list[Message] = attrs.field(factory=list)
    metrics: dict[str, float] = attrs.field(factory=dict)


def as_step_result(value: Any) -> StepResult:
    """Accept a StepResult, a mapping with 'reward', or any object with a reward attribute."""
    if isinstance(value, StepResult):
        return value
    if isinstance(value, dict):
        if "reward" not in value:
            raise TypeError(f"step() returned a mapping without 'reward' (keys: {', '.join(value) or 'none'})")
        return StepResult(
            reward=value["reward"],
            done=value.get("done", True),
            messages=list(value.get("messages", [])),
            metrics=dict(value.get("metrics", {})),
        )
    if hasattr(value, "reward"):
        return StepResult(
            reward=value.reward,
            done=getattr(value, "done", True),
            messages=list(getattr(value, "messages", []) or []),
            metrics=dict(getattr(value, "metrics", {}) or {}),
        )
    raise TypeError(f"step() must return a StepResult or an object/mapping with a numeric 'reward', got {type(value).__name__}")


@attrs.define
class Context:
    """What the trainer hands to every episode: the CURRENT policy and the service.

    ``sampler`` samples from and scores with the policy that produced this
    rollout (``compute_logprobs``); ``service`` creates shadow training clients;
    ``policy_checkpoint`` is a ``tinker://`` state of that same policy, present
    when the environment sets ``needs_policy_checkpoint = True``.
    """

    sampler: Any
    tokenizer: Any
    service: Any
    renderer: Any
    base_model: str
    lora_rank: int = 8
    step: int = 0
    policy_checkpoint: str | None = None


@runtime_checkable
class Episode(Protocol):
    """One rollout. Methods may be sync or async.

    ``initial_observation()`` returns the prompt (a string or chat messages);
    ``step(action)`` receives the decoded text of the model's turn and returns a
    StepResult. An episode may set ``tools`` (JSON-schema tool specs) to have
    them rendered by the chat template. Raising fails the rollout (counted).
    """

    def initial_observation(self) -> Any: ...

    def step(self, action: str) -> Any: ...


@runtime_checkable
class Environment(Protocol):
    """A source of tasks and the episodes that score them.

    ``tasks(split)`` returns the dataset for a split; ``episode(task, ctx)``
    starts one rollout. Optional attributes: ``rubric`` (a Rubric a config may
    re-weight), ``needs_policy_checkpoint`` (bool), ``close()`` (sync or async).
    """

    def tasks(self, split: str) -> Sequence[Task]: ...

    def episode(self, task: Task, ctx: Context) -> Episode: ...
