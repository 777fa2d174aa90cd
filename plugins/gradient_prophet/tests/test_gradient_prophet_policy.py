"""gradient_prophet's ground truth on the local backend: the CURRENT policy, every probe, failures reported."""

import math

import attrs
import numpy as np
import pytest
from structlog.testing import capture_logs
from tinker import types

from minds_core import Task
from minds_gradient_prophet.lessons import QA, LessonSet
from minds_gradient_prophet.policy_scores import MeasurementError, next_token_topk
from minds_gradient_prophet.prophet import (
    IN_CONTEXT,
    SURPRISE,
    lesson_context,
    lesson_info,
    load_gradient_prophet,
    measure_delta,
    measure_surprise,
)
from minds_gradient_prophet.scoring import closeness, surprise_score
from minds_gradient_prophet.shadow import scoring_datum

LESSONS = LessonSet(
    "test-sky",
    QA("What color is the sky on a clear day?", "green"),
    (
        QA("What color is the sea?", "blue"),
        QA("What color is a lime?", "green"),
        QA("What color is a cloudless sky in June?", "blue"),
        QA("What is 2 plus 5?", "7"),
    ),
)
#: A probe the local sampler refuses to sample after: longer than minds-tiny's 8192-token context.
TOO_LONG = QA("Why? " * 2000, "because")


def _task(lessons: LessonSet, kind: str) -> Task:
    return Task(prompt="(prompt)", info={**lesson_info(lessons, kind), "topk": 20}, id=f"{lessons.id}/{kind}")


async def _deltas(ctx, lessons: LessonSet) -> list[float]:
    return [await measure_delta(ctx, lessons.lesson, p) for p in lessons.probes]


async def test_delta_is_the_log_prob_shift_the_training_client_sees(policy):
    probe = LESSONS.probes[0]
    tok = policy.ctx.tokenizer
    target = tok.encode(probe.target, add_special_tokens=False)

    async def trainer_logprob(context: str) -> float:
        datum = scoring_datum(tok.encode(context), target)
        out = await policy.training.forward([datum], "cross_entropy")
        return float(out.loss_fn_outputs[0]["logprobs"].to_numpy()[-len(target) :].sum())

    expected = await trainer_logprob(lesson_context(LESSONS.lesson, probe)) - await trainer_logprob(probe.context)
    assert await measure_delta(policy.ctx, LESSONS.lesson, probe) == pytest.approx(expected, abs=1e-4)


@pytest.mark.slow
async def test_every_probe_is_measured_with_the_current_policy(policy):
    env = load_gradient_prophet()
    before_ctx = policy.ctx
    before = await _deltas(before_ctx, LESSONS)
    assert len(set(before)) == len(LESSONS.probes)  # four probes, four distinct measurements

    # Exact predictions score 1; the reward uses every probe (a wrong last value costs).
    exact = "[" + ", ".join(repr(d) for d in before) + "]"
    result = await env.episode(_task(LESSONS, IN_CONTEXT), before_ctx).step(exact)
    assert result.reward == pytest.approx(1.0, abs=1e-5)
    assert result.metrics["gradient_prophet/probes_measured"] == 4
    off_last = "[" + ", ".join(repr(d) for d in [*before[:3], before[3] + 1.0]) + "]"
    result = await env.episode(_task(LESSONS, IN_CONTEXT), before_ctx).step(off_last)
    assert result.reward == pytest.approx((3 + closeness(0.0, 1.0)) / 4, abs=1e-5)

    # Train the policy on the lesson: a new sampler of the updated weights measures new deltas,
    # while the old sampler (a snapshot) still measures the old ones.
    await policy.train_on([(lesson_context(LESSONS.lesson, p), p.target) for p in LESSONS.probes], 5e-2, steps=3)
    after_ctx = await policy.snapshot()
    after = await _deltas(after_ctx, LESSONS)
    assert all(abs(a - b) > 1e-3 for a, b in zip(after, before))
    assert await _deltas(before_ctx, LESSONS) == pytest.approx(before, abs=1e-6)
    result = await env.episode(_task(LESSONS, IN_CONTEXT), after_ctx).step(exact)
    expected = sum(closeness(a, b) for a, b in zip(after, before)) / 4
    assert result.reward == pytest.approx(expected, abs=1e-5)


async def test_topk_row_is_the_next_token_distribution_and_kl_is_a_lower_bound(policy):
    ctx = policy.ctx
    probe = LESSONS.probes[0]
    tok = ctx.tokenizer
    context = tok.encode(probe.context)
    follower = tok.encode(probe.target, add_special_tokens=False)[0]
    # With k = the whole vocabulary the top-k rows ARE the next-token distributions.
    vocab = len(tok)
    post = await next_token_topk(ctx.sampler, tok.encode(lesson_context(LESSONS.lesson, probe)), follower, vocab)
    prior = await next_token_topk(ctx.sampler, context, follower, vocab)
    logprobs = await ctx.sampler.compute_logprobs(types.ModelInput.from_ints([*context, follower]))
    assert prior[follower] == pytest.approx(logprobs[-1], abs=1e-4)  # the row after the context
    assert math.fsum(math.exp(v) for v in post.values()) == pytest.approx(1.0, abs=1e-4)
    p = np.array([post[t] for t in sorted(post)])
    q = np.array([prior[t] for t in sorted(post)])
    exact = float((np.exp(p) * (p - q)).sum())
    assert exact > 0
    assert await measure_surprise(ctx, LESSONS.lesson, probe, vocab) == pytest.approx(exact, abs=1e-4)
    estimate = await measure_surprise(ctx, LESSONS.lesson, probe, 20)
    assert 0 < estimate <= exact + 1e-6


async def test_surprise_reward_is_spearman_against_measured_kls(policy):
    env = load_gradient_prophet()
    kls = [await measure_surprise(policy.ctx, LESSONS.lesson, p, 20) for p in LESSONS.probes]
    truth = sorted(range(1, 5), key=lambda i: -kls[i - 1])
    result = await env.episode(_task(LESSONS, SURPRISE), policy.ctx).step(f"Most moved first: {truth}")
    assert result.reward == pytest.approx(1.0)
    assert result.metrics["reward/gradient_prophet.in_context"] == 0.0
    reverse = await env.episode(_task(LESSONS, SURPRISE), policy.ctx).step(str(truth[::-1]))
    assert reverse.reward == pytest.approx(-1.0)
    unparsed = await env.episode(_task(LESSONS, SURPRISE), policy.ctx).step("no idea")
    assert unparsed.reward == 0.0 and unparsed.metrics["gradient_prophet/unparsed"] == 1.0


class FakeFailingHostedSampler:
    """The real local sampler, except that requests whose text contains ``word`` fail.

    Stands in for a hosted-service failure (a 5xx left after the SDK's retries),
    which the in-process backend cannot produce.
    """

    def __init__(self, sampler, tokenizer, word: str) -> None:
        self.sampler, self.tokenizer, self.word = sampler, tokenizer, word

    def _check(self, prompt: types.ModelInput) -> None:
        if self.word in self.tokenizer.decode(prompt.to_ints()):
            raise RuntimeError("simulated: 503 Service Unavailable from the hosted sampler")

    def compute_logprobs(self, prompt: types.ModelInput):
        self._check(prompt)
        return self.sampler.compute_logprobs(prompt)

    def sample(self, prompt: types.ModelInput, *args, **kwargs):
        self._check(prompt)
        return self.sampler.sample(prompt, *args, **kwargs)


async def test_a_failed_probe_is_reported_and_the_others_keep_their_index(policy):
    env = load_gradient_prophet()
    deltas = await _deltas(policy.ctx, LESSONS)
    flaky = attrs.evolve(policy.ctx, sampler=FakeFailingHostedSampler(policy.ctx.sampler, policy.ctx.tokenizer, "lime"))
    # Probe 2 (the lime) cannot be measured; the predictions for probes 1, 3, 4 stay paired with them.
    reply = f"[{deltas[0]!r}, 123.0, {deltas[2]!r}, {deltas[3]!r}]"
    with capture_logs() as logs:
        result = await env.episode(_task(LESSONS, IN_CONTEXT), flaky).step(reply)
    assert result.reward == pytest.approx(1.0, abs=1e-5)
    assert result.metrics["gradient_prophet/probes_failed"] == 1
    assert result.metrics["gradient_prophet/probes_measured"] == 3
    (warning,) = [e for e in logs if e["event"] == "probe measurement failed"]
    assert warning["log_level"] == "warning" and warning["probe"] == 2 and warning["set"] == LESSONS.id
    assert "503" in warning["error"]


async def test_a_probe_the_model_cannot_score_is_left_out_of_the_ranking(policy):
    # A real failure of the local backend: the probe does not fit minds-tiny's context.
    broken = attrs.evolve(LESSONS, id="test-broken", probes=(LESSONS.probes[0], TOO_LONG, *LESSONS.probes[2:]))
    kls = [await measure_surprise(policy.ctx, LESSONS.lesson, p, 20) for p in LESSONS.probes]
    order = [4, 2, 1, 3]
    with capture_logs() as logs:
        result = await load_gradient_prophet().episode(_task(broken, SURPRISE), policy.ctx).step(str(order))
    assert result.reward == pytest.approx(surprise_score(order, [kls[0], None, kls[2], kls[3]]))
    assert result.metrics["gradient_prophet/probes_failed"] == 1
    assert [e["probe"] for e in logs if e["event"] == "probe measurement failed"] == [2]


async def test_a_set_with_no_measurable_probe_fails_the_rollout(policy):
    hopeless = attrs.evolve(LESSONS, id="test-hopeless", probes=(TOO_LONG, TOO_LONG))
    with capture_logs(), pytest.raises(MeasurementError, match="no probe of set 'test-hopeless'"):
        await load_gradient_prophet().episode(_task(hopeless, SURPRISE), policy.ctx).step("[1, 2]")
