"""gradient_prophet: predict how a lesson in the context moves your own log-probabilities."""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from minds_core import (
    Context,
    Rubric,
    SingleTurnEnvironment,
    Task,
    arg,
    at_least,
    env_args,
    get_logger,
    non_empty_subset_of,
    report_metric,
    within,
)
from minds_gradient_prophet.lessons import LESSON_SETS, QA, LessonSet
from minds_gradient_prophet.memo import MEMO
from minds_gradient_prophet.parsing import parse_number_array
from minds_gradient_prophet.policy_scores import (
    MeasurementError,
    continuation_logprob,
    encode_context,
    encode_continuation,
    next_token_logprobs,
    next_token_topk,
)
from minds_gradient_prophet.scoring import in_context_score, kl_from_topk, surprise_score

IN_CONTEXT = "in_context"
SURPRISE = "surprise"
KINDS = (IN_CONTEXT, SURPRISE)

SYSTEM_PROMPT = (
    "You are taking part in an experiment about your own learning. Each question shows a "
    "lesson (a question with an unexpected answer) and some probe questions. Think as much as "
    "you like, then end your reply with one JSON array."
)

DEFAULT_TOPK = 20

log = get_logger("gradient_prophet")


def _lesson_text(lesson: QA) -> str:
    return f"Lesson: {lesson.question}\nLesson Answer: {lesson.answer}\n\n"


def lesson_context(lesson: QA, probe: QA) -> str:
    """The probe after the lesson."""
    return _lesson_text(lesson) + probe.context


def _setting(lessons: LessonSet, probes_title: str) -> str:
    probes = "\n".join(f"{i}. {p.question} -> {p.answer}" for i, p in enumerate(lessons.probes, 1))
    return (
        "Suppose this lesson were written just before each probe question:\n\n"
        f"{_lesson_text(lessons.lesson)}{probes_title}:\n{probes}\n\n"
    )


def in_context_prompt(lessons: LessonSet) -> str:
    """Ask for the change in log-probability of every probe's answer."""
    return (
        _setting(lessons, "Probes (question -> the answer whose likelihood is measured)")
        + "For every probe, estimate how much the lesson changes the natural-log probability you "
        "give that answer, summed over its tokens: log P(answer | lesson, question) minus "
        "log P(answer | question). Positive means the lesson makes the answer more likely. "
        f"Finish with a JSON array of {len(lessons.probes)} numbers in probe order."
    )


def surprise_prompt(lessons: LessonSet) -> str:
    """Ask for the probes ranked by how much the lesson reshapes the first answer token."""
    return (
        _setting(lessons, "Probes")
        + "Rank the probes by how strongly the lesson reshapes your expectation of the first "
        "token of the answer (the KL divergence between your next-token distributions with and "
        "without the lesson). Finish with a JSON array of the probe numbers "
        f"1 to {len(lessons.probes)}, the most reshaped first."
    )


def lesson_info(lessons: LessonSet, kind: str) -> dict[str, Any]:
    """A task's info: its kind and the whole set, so the answer travels with the task."""
    return {
        "kind": kind,
        "set_id": lessons.id,
        "lesson": [lessons.lesson.question, lessons.lesson.answer],
        "probes": [[p.question, p.answer] for p in lessons.probes],
    }


def lessons_from_info(info: dict[str, Any]) -> LessonSet:
    """The set a task's info carries."""
    try:
        return LessonSet(info["set_id"], QA(*info["lesson"]), tuple(QA(*p) for p in info["probes"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"task info is not a gradient_prophet task ({exc!r}); info keys: {sorted(info)}") from None


async def measure_delta(ctx: Context, lesson: QA, probe: QA) -> float:
    """log P(answer | lesson + probe) - log P(answer | probe) under the current policy."""
    target = encode_continuation(ctx.tokenizer, probe.target)
    after, before = await asyncio.gather(
        continuation_logprob(ctx.sampler, encode_context(ctx.tokenizer, lesson_context(lesson, probe)), target),
        continuation_logprob(ctx.sampler, encode_context(ctx.tokenizer, probe.context), target),
    )
    return after - before


async def measure_surprise(ctx: Context, lesson: QA, probe: QA, topk: int) -> float:
    """KL(next token after lesson + probe || next token after probe), nats, from top-k log-probs."""
    follower = encode_continuation(ctx.tokenizer, probe.target)[0]
    post_context = encode_context(ctx.tokenizer, lesson_context(lesson, probe))
    prior = encode_context(ctx.tokenizer, probe.context)
    post, prior_top = await asyncio.gather(
        next_token_topk(ctx.sampler, post_context, follower, topk),
        next_token_topk(ctx.sampler, prior, follower, topk),
    )
    filled = await next_token_logprobs(ctx.sampler, prior, (t for t in post if t not in prior_top))
    return kl_from_topk(post, {**prior_top, **filled})


Measure = Callable[[Context, QA, QA], Awaitable[float]]


async def measure_probes(
    ctx: Context, state: dict[str, Any], lessons: LessonSet, measure: Measure, key: str
) -> list[float | None]:
    """One measurement per probe, in probe order; a failed probe is None, counted and logged.

    Raises MeasurementError when no probe could be measured.
    """

    async def one(probe: QA) -> float:
        return await MEMO.get(ctx.sampler, (key, lessons.lesson, probe), lambda: measure(ctx, lessons.lesson, probe))

    results = await asyncio.gather(*(one(p) for p in lessons.probes), return_exceptions=True)
    values: list[float | None] = []
    errors = []
    for index, result in enumerate(results, 1):
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
        if isinstance(result, Exception):
            errors.append(f"probe {index}: {type(result).__name__}: {result}")
            log.warning("probe measurement failed", set=lessons.id, probe=index, measure=key, error=str(result))
            values.append(None)
        else:
            values.append(result)
    report_metric(state, "gradient_prophet/probes_measured", len(values) - len(errors))
    report_metric(state, "gradient_prophet/probes_failed", len(errors))
    if len(errors) == len(values):
        raise MeasurementError(f"no probe of set {lessons.id!r} could be measured: {'; '.join(errors)}")
    return values


async def in_context_reward(completion: str, info: dict[str, Any], ctx: Context, state: dict[str, Any]) -> float:
    """Mean over measured probes of 1 / (1 + (Δ_true - Δ_pred)^2); 0 on surprise tasks.

    A prediction that is missing or not a number counts as Δ_pred = 0.
    """
    if info.get("kind") != IN_CONTEXT:
        return 0.0
    lessons = lessons_from_info(info)
    predicted = parse_number_array(completion, length=len(lessons.probes))
    report_metric(state, "gradient_prophet/unparsed", float(predicted is None))
    truths = await measure_probes(ctx, state, lessons, measure_delta, "delta")
    return in_context_score(truths, predicted)


async def surprise_reward(completion: str, info: dict[str, Any], ctx: Context, state: dict[str, Any]) -> float:
    """Spearman correlation of the predicted ranking with the true KL ranking; 0 on in_context tasks."""
    if info.get("kind") != SURPRISE:
        return 0.0
    lessons = lessons_from_info(info)
    order = parse_number_array(completion, length=len(lessons.probes))
    report_metric(state, "gradient_prophet/unparsed", float(order is None))
    if order is None:
        return 0.0
    topk = int(info.get("topk", DEFAULT_TOPK))
    measure = functools.partial(measure_surprise, topk=topk)
    return surprise_score(order, await measure_probes(ctx, state, lessons, measure, f"kl@{topk}"))


def split_sets(sets: Sequence[LessonSet], eval_sets: int, seed: int) -> dict[str, list[LessonSet]]:
    """A seeded shuffle of the sets: the first ``eval_sets`` are the eval split, the rest train."""
    order = list(sets)
    random.Random(seed).shuffle(order)
    return {"train": order[eval_sets:], "eval": order[:eval_sets]}


@attrs.frozen
class GradientProphetArgs:
    """The ``[env.args]`` of gradient_prophet."""

    kinds: list[str] = arg(list(KINDS), non_empty_subset_of(KINDS), doc="the task kinds made for every lesson set")
    eval_sets: int = arg(4, within(0, len(LESSON_SETS) - 1), doc="lesson sets held out for the eval split")
    seed: int = arg(0, doc="seed of the shuffle that picks the eval sets")
    topk: int = arg(DEFAULT_TOPK, at_least(2), doc="top-k tokens over which the surprise (KL) is measured")


def load_gradient_prophet(**args: Any) -> SingleTurnEnvironment:
    """The gradient_prophet environment: one task per lesson set and kind (arguments: GradientProphetArgs)."""
    chosen = env_args(GradientProphetArgs, args, env="gradient_prophet")
    kinds, topk = chosen.kinds, chosen.topk
    splits = split_sets(LESSON_SETS, chosen.eval_sets, chosen.seed)
    builders = {IN_CONTEXT: in_context_prompt, SURPRISE: surprise_prompt}
    tasks = {
        split: [
            Task(prompt=builders[kind](s), info={**lesson_info(s, kind), "topk": topk}, id=f"{s.id}/{kind}")
            for s in sets
            for kind in kinds
        ]
        for split, sets in splits.items()
    }
    rubric = Rubric(
        [in_context_reward, surprise_reward], [1.0, 1.0], ["gradient_prophet.in_context", "gradient_prophet.surprise"]
    )
    return SingleTurnEnvironment(tasks, rubric, system_prompt=SYSTEM_PROMPT)
