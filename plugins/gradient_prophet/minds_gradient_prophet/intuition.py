"""gradient_intuition: solve an inner task and predict what one training step on your answer does."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from minds_core import (
    ConfigError,
    Context,
    Message,
    OpenEnvironment,
    Rubric,
    Rule,
    StepResult,
    Task,
    above,
    arg,
    as_reward,
    at_least,
    env_args,
    maybe_await,
    prompt_messages,
    report_metric,
    score_completion,
)
from minds_gradient_prophet.lessons import QA
from minds_gradient_prophet.parsing import header_number, header_text
from minds_gradient_prophet.policy_scores import encode_context, encode_continuation
from minds_gradient_prophet.scoring import linear_closeness
from minds_gradient_prophet.shadow import ShadowTrainer, scoring_datum
from minds_gradient_prophet.trivia import TRIVIA

PREDICTION_REWARD = "gradient_intuition.prediction"
_PENDING = "gradient_intuition.pending"


def instructions(probe: QA, learning_rate: float) -> str:
    """The meta-task appended to the inner task's prompt."""
    return (
        "\n\nA second, smaller task: predict your own learning. Suppose you were trained with one "
        f"supervised step (Adam, learning rate {learning_rate:g}) on exactly the answer you give "
        "above. By how much would that step change the natural-log probability you assign to the "
        "answer of this unrelated question?\n"
        f"Question: {probe.question}\nAnswer: {probe.answer}\n\n"
        "Reply in exactly this format, the prediction line first:\n"
        "PREDICTION: <a signed number, e.g. 0.03 or -0.4>\n"
        "ANSWER: <your answer to the task above>"
    )


def with_instructions(messages: Sequence[Message], text: str) -> list[Message]:
    """``messages`` with ``text`` appended to the last user message (or as a new one)."""
    out = [dict(m) for m in messages]
    for message in reversed(out):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            message["content"] += text
            return out
    return [*out, {"role": "user", "content": text.lstrip()}]


@attrs.define
class PendingMeasurement:
    """What the prediction reward measures: the inner prompt, the reply's answer and the probe."""

    shadow: ShadowTrainer
    prompt: list[Message]
    answer: str
    probe: QA

    async def delta(self, ctx: Context) -> float:
        """Δ_true: the change of logP(probe answer | probe) after one step on the answer."""
        example = scoring_datum(ctx.renderer.prompt_tokens(self.prompt), ctx.renderer.encode(self.answer))
        probe = scoring_datum(
            encode_context(ctx.tokenizer, self.probe.context), encode_continuation(ctx.tokenizer, self.probe.target)
        )
        return await self.shadow.one_step_delta(ctx, example, probe)


async def prediction_reward(completion: str, state: dict[str, Any], ctx: Context) -> float:
    """max(0, 1 - |PREDICTION - Δ_true|); 0 when the reply has no prediction."""
    pending = state.get(_PENDING)
    if not isinstance(pending, PendingMeasurement):
        raise ValueError(
            f"{PREDICTION_REWARD} scores replies of the gradient_intuition environment only "
            "(it measures a training step on the answer that environment parsed); "
            "remove it from this environment's rewards"
        )
    prediction = header_number(completion, "PREDICTION")
    report_metric(state, "gradient_intuition/no_prediction", float(prediction is None))
    if prediction is None:
        return 0.0
    delta = await pending.delta(ctx)
    report_metric(state, "gradient_intuition/true_delta", delta)
    report_metric(state, "gradient_intuition/abs_error", abs(prediction - delta))
    return linear_closeness(delta, prediction)


def _inner_outcome(result: Any) -> tuple[float | None, dict[str, Any]]:
    """The reward and metrics of the inner episode's one step (a StepResult or a mapping); it must finish."""

    def field(name: str, default: Any) -> Any:
        return result.get(name, default) if isinstance(result, Mapping) else getattr(result, name, default)

    if not field("done", True):
        raise ValueError("gradient_intuition wraps single-turn environments; the inner episode did not finish")
    return as_reward(field("reward", None)), dict(field("metrics", None) or {})


class GradientIntuitionEpisode:
    """Show the inner task plus the meta-task; score the inner answer and the prediction."""

    def __init__(self, env: GradientIntuitionEnvironment, task: Task, ctx: Context) -> None:
        self.env, self.task, self.ctx = env, task, ctx
        self.probe = QA(*task.info["probe"])
        self.inner = env.inner.episode(task.info["inner_task"], ctx)
        self.inner_prompt: list[Message] = []
        self.state: dict[str, Any] = {}

    async def initial_observation(self) -> list[Message]:
        self.inner_prompt = prompt_messages(await maybe_await(self.inner.initial_observation()))
        return with_instructions(self.inner_prompt, instructions(self.probe, self.env.shadow.learning_rate))

    async def step(self, action: str) -> StepResult:
        answer = header_text(action, "ANSWER", to_end=True)
        if answer is None:
            return StepResult(reward=0.0, done=True, metrics={"gradient_intuition/no_answer": 1.0})
        inner_reward, inner_metrics = _inner_outcome(await maybe_await(self.inner.step(answer)))
        if inner_reward is None:
            return StepResult(reward=None, done=True, metrics={"gradient_intuition/inner_reward_invalid": 1.0})
        self.state[_PENDING] = PendingMeasurement(self.env.shadow, self.inner_prompt, answer, self.probe)
        scored = await score_completion(self.env.rubric, self.task, action, self.state, self.ctx, self.inner_prompt)
        metrics = {
            "gradient_intuition/no_answer": 0.0,
            "gradient_intuition/inner_reward": inner_reward,
            **{f"inner/{k}": float(v) for k, v in inner_metrics.items()},
            **scored.metrics,
        }
        return StepResult(reward=inner_reward + scored.reward, done=True, metrics=metrics)


class GradientIntuitionEnvironment:
    """Wraps a single-turn environment; each task gets a trivia probe drawn with the seed."""

    needs_policy_checkpoint = True

    def __init__(self, inner: Any, alpha: float, learning_rate: float, seed: int, max_shadows: int = 2) -> None:
        self.inner = inner
        self.rubric = Rubric([prediction_reward], [alpha], [PREDICTION_REWARD])
        self.shadow = ShadowTrainer(learning_rate, max_shadows)
        self.seed = seed
        self._tasks: dict[str, list[Task]] = {}

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            rng = random.Random(f"{self.seed}:{split}")
            self._tasks[split] = [
                Task(
                    prompt=task.prompt,
                    answer=task.answer,
                    info={"inner_task": task, "probe": list(attrs.astuple(rng.choice(TRIVIA)))},
                    id=task.id or f"{split}-{i}",
                )
                for i, task in enumerate(self.inner.tasks(split))
            ]
        return self._tasks[split]

    def episode(self, task: Task, ctx: Context) -> GradientIntuitionEpisode:
        return GradientIntuitionEpisode(self, task, ctx)

    async def close(self) -> None:
        self.shadow.close()
        closer = getattr(self.inner, "close", None)
        if closer is not None:
            await maybe_await(closer())


@attrs.frozen
class GradientIntuitionArgs:
    """The ``[env.args]`` of gradient_intuition."""

    inner: str = arg(
        "ghost_trace",
        Rule("another environment (gradient_intuition cannot wrap itself)", lambda v: v != "gradient_intuition"),
        doc="the single-turn environment wrapped: a registered name or a path",
    )
    inner_args: dict[str, Any] | None = arg(None, doc="the inner environment's own [env.args]")
    alpha: float = arg(0.35, at_least(0), doc="weight of the prediction reward beside the inner environment's rubric")
    learning_rate: float = arg(1e-4, above(0), doc="learning rate of the shadow step whose effect is predicted")
    seed: int = arg(0, doc="seed of the probes drawn")
    max_shadows: int = arg(2, at_least(1), doc="shadow copies of the policy kept at once")


def load_gradient_intuition(open_environment: OpenEnvironment, **args: Any) -> GradientIntuitionEnvironment:
    """gradient_intuition around the single-turn environment ``inner`` (arguments: GradientIntuitionArgs).

    ``open_environment`` (given by minds) builds ``inner`` as ``[env] id`` would.
    """
    chosen = env_args(GradientIntuitionArgs, args, env="gradient_intuition")
    try:
        wrapped = open_environment(chosen.inner, dict(chosen.inner_args or {}))
    except ConfigError as exc:
        raise ConfigError(f"env.args.inner = {chosen.inner!r}: {str(exc).removeprefix('env.id: ')}") from None
    return GradientIntuitionEnvironment(wrapped, chosen.alpha, chosen.learning_rate, chosen.seed, chosen.max_shadows)
