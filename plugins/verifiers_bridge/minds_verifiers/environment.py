"""Classic verifiers environments as minds Environments.

Dataset rows are the tasks. Each rollout runs the environment's own
``rollout`` with a ConversationClient over the minds Conversation, so the
environment decides the turns (SingleTurnEnv, MultiTurnEnv, ToolEnv) and its
rubric gives the reward; the trainer trains on the conversation's tokens.
A reward function that fails (verifiers scores it 0) fails the rollout
(see ``minds_verifiers.scoring``).
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Sequence
from typing import Any

import verifiers as vf

from minds_core import (
    ConfigError,
    Context,
    EpisodeConversation,
    PolicySampler,
    StepResult,
    Task,
    UsageError,
)
from minds_verifiers.client import ConversationClient
from minds_verifiers.scoring import SCORING, RolloutScoring, instrument

SPLITS = ("train", "eval")


class VerifiersRolloutError(Exception):
    """The verifiers rollout ended with an error; the minds rollout fails (and is counted)."""


def load_verifiers_environment(env_id: str, args: dict[str, Any]) -> VerifiersEnvironment:
    """Build ``vf.load_environment(env_id, **args)`` on the main thread and check it can be trained on."""
    if threading.current_thread() is not threading.main_thread():
        raise UsageError(f"verifiers environment {env_id!r}: classic environments install signal handlers; load them on the main thread")
    try:
        env = vf.load_environment(env_id, **args)
    except ValueError as exc:
        if not isinstance(exc.__cause__, ImportError):
            raise
        raise ConfigError(
            f"verifiers environment {env_id!r}: cannot import it ({exc.__cause__}); install the environment's "
            "package, or give the name of an importable module that defines load_environment"
        ) from None
    if not isinstance(env, vf.Environment):
        raise ConfigError(
            f"verifiers environment {env_id!r}: load_environment returned a {type(env).__name__}; "
            "the bridge trains classic verifiers environments (vf.Environment: SingleTurnEnv, MultiTurnEnv, ToolEnv, ...)"
        )
    return as_minds_environment(env_id, env)


def as_minds_environment(env_id: str, env: vf.Environment) -> VerifiersEnvironment:
    """A built classic verifiers environment, checked and instrumented, as a minds Environment."""
    if env.requires_group_rollouts:
        raise ConfigError(
            f"verifiers environment {env_id!r}: its rubric has group-level reward functions, which the bridge "
            "does not support (each rollout is scored on its own)"
        )
    instrument(env.rubric)
    return VerifiersEnvironment(env_id, env)


def adapt(obj: Any, env_id: str) -> VerifiersEnvironment | None:
    """The environment adapter: a ``vf.Environment`` returned by a loose ``load_environment()`` trains here."""
    return as_minds_environment(env_id, obj) if isinstance(obj, vf.Environment) else None


class VerifiersEnvironment:
    """A classic verifiers environment: tasks from its datasets, episodes driven by its rollout loop."""

    def __init__(self, env_id: str, vf_env: vf.Environment) -> None:
        self.env_id = env_id
        self.vf_env = vf_env
        self._inputs: dict[str, dict[str, Any]] = {}

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in SPLITS:  # a KeyError, as the core expects of a split an environment lacks
            raise KeyError(f"verifiers environment {self.env_id!r} has the splits {', '.join(SPLITS)}, not {split!r}")
        dataset = self.vf_env.get_dataset() if split == "train" else self.vf_env.get_eval_dataset()
        tasks = []
        for row in dataset:
            info = row.get("info") or {}
            task = Task(
                prompt=row["prompt"],
                answer=row.get("answer"),
                info=json.loads(info) if isinstance(info, str) else dict(info),
                id=f"{split}-{row['example_id']}",
            )
            self._inputs[task.id] = row
            tasks.append(task)
        return tasks

    def episode(self, task: Task, ctx: Context) -> VerifiersEpisode:
        return VerifiersEpisode(self.vf_env, self._inputs[task.id], ctx)


class VerifiersEpisode:
    """One verifiers rollout over a minds Conversation, scored by the environment's rubric."""

    def __init__(self, vf_env: vf.Environment, row: dict[str, Any], ctx: Context) -> None:
        self.vf_env, self.row, self.ctx = vf_env, row, ctx
        self.state: vf.State | None = None

    async def run(self, conversation: EpisodeConversation) -> StepResult:
        client = ConversationClient(conversation)
        row, scoring = dict(self.row), RolloutScoring(PolicySampler(self.ctx.sampler), self.ctx.tokenizer)
        if isinstance(row.get("task"), str) and not _json_object(row["task"]):
            scoring.task = row.pop("task")  # a plain-string task label (older verifiers datasets)
        token = SCORING.set(scoring)
        try:
            self.state = state = await self.vf_env.rollout(row, client, self.ctx.base_model, self.sampling_args(conversation))
            try:
                if state.get("error") is not None:
                    raise VerifiersRolloutError(_describe(state["error"]))
                await self.vf_env.rubric.score_rollout(state)
            finally:
                await self.vf_env.rubric.cleanup(state)
        finally:
            SCORING.reset(token)
        if scoring.errors:
            raise VerifiersRolloutError(f"{'; '.join(scoring.errors)} (verifiers scored it 0; minds fails the rollout instead)")
        metrics = {f"vf/{name}": float(value) for name, value in (state.get("metrics") or {}).items()}
        return StepResult(reward=state["reward"], done=True, metrics=metrics)

    def sampling_args(self, conversation: EpisodeConversation) -> vf.SamplingArgs:
        """The environment's ``sampling_args`` updated with the run's, as verifiers' ``generate`` passes them."""
        params = conversation.params
        run = {"max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p}
        return {**copy.deepcopy(self.vf_env.sampling_args), **{k: v for k, v in run.items() if v is not None}}


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def _describe(error: BaseException) -> str:
    cause = error.__cause__
    text = f"{type(error).__name__}: {error}"
    return f"{text} (caused by {type(cause).__name__}: {cause})" if cause else text
