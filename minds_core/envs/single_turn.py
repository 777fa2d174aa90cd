"""The single-turn helper: (tasks, rubric) -> an Environment."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from minds_core.contract.environment import Context, Message, StepResult, Task
from minds_core.contract.rubric import INVALID_PARTS_METRIC, Rubric

#: Key of ``state`` under which reward functions report metrics (see report_metric).
METRICS_KEY = "metrics"

TaskSource = Mapping[str, Sequence[Task]] | Callable[[str], Sequence[Task]]


def prompt_messages(prompt: str | list[Message], system_prompt: str | None = None) -> list[Message]:
    """A task prompt as chat messages, with an optional system prompt first."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if system_prompt and not (messages and messages[0].get("role") == "system"):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def report_metric(state: dict[str, Any], name: str, value: float) -> None:
    """Let a reward function add to its step's metrics (summed per rollout, averaged per env)."""
    metrics = state.setdefault(METRICS_KEY, {})
    metrics[name] = metrics.get(name, 0.0) + float(value)


def reward_inputs(
    task: Task, completion: str, state: dict[str, Any], ctx: Context, prompt: list[Message]
) -> dict[str, Any]:
    """Everything a reward function may ask for by name."""
    return {
        "completion": completion,
        "prompt": task.prompt,
        "task": task,
        "answer": task.answer,
        "info": task.info,
        "state": state,
        "ctx": ctx,
        "messages": [*prompt, {"role": "assistant", "content": completion}],
    }


async def score_completion(
    rubric: Rubric, task: Task, completion: str, state: dict[str, Any], ctx: Context, prompt: list[Message]
) -> StepResult:
    """A final StepResult from a rubric: the total, each part and reported metrics as metrics."""
    score = await rubric.score(reward_inputs(task, completion, state, ctx, prompt))
    metrics = {f"reward/{name}": value for name, value in score.parts.items()}
    metrics.update(state.get(METRICS_KEY, {}))
    if score.invalid:
        metrics[INVALID_PARTS_METRIC] = float(len(score.invalid))
    return StepResult(reward=score.total, done=True, metrics=metrics)


class SingleTurnEpisode:
    """Show the task's prompt, score the one reply with the rubric, done."""

    def __init__(self, env: SingleTurnEnvironment, task: Task, ctx: Context) -> None:
        self.env, self.task, self.ctx = env, task, ctx
        self.state: dict[str, Any] = {}

    def initial_observation(self) -> list[Message]:
        return prompt_messages(self.task.prompt, self.env.system_prompt)

    async def step(self, action: str) -> StepResult:
        return await score_completion(self.env.rubric, self.task, action, self.state, self.ctx, self.initial_observation())


class SingleTurnEnvironment:
    """An environment from a task source and a rubric; one reply per episode."""

    def __init__(
        self,
        tasks: TaskSource,
        rubric: Rubric,
        system_prompt: str | None = None,
        needs_policy_checkpoint: bool = False,
    ) -> None:
        self._tasks = tasks
        self.rubric = rubric
        self.system_prompt = system_prompt
        self.needs_policy_checkpoint = needs_policy_checkpoint

    def tasks(self, split: str) -> Sequence[Task]:
        if callable(self._tasks):
            return self._tasks(split)
        if split not in self._tasks:
            raise KeyError(f"no split {split!r}; splits: {', '.join(self._tasks)}")
        return self._tasks[split]

    def episode(self, task: Task, ctx: Context) -> SingleTurnEpisode:
        return SingleTurnEpisode(self, task, ctx)
