"""The shadow step on the local backend: the right Δ, from the policy's weights, never touching the policy."""

import asyncio
from typing import Any

import attrs
import pytest
from attrs import evolve
from tinker import types

from minds_gradient_prophet.policy_scores import MeasurementError
from minds_gradient_prophet.shadow import ShadowTrainer, scoring_datum

LR = 1e-2
PROBE = ("What is the capital of France?\nAnswer:", " Paris")
EXAMPLE = ("Name a city in France.", "Paris is one.")


def _data(ctx) -> tuple[types.Datum, types.Datum]:
    tok = ctx.tokenizer
    example = scoring_datum(
        ctx.renderer.prompt_tokens([{"role": "user", "content": EXAMPLE[0]}]), ctx.renderer.encode(EXAMPLE[1])
    )
    probe = scoring_datum(tok.encode(PROBE[0]), tok.encode(PROBE[1], add_special_tokens=False))
    return example, probe


def test_the_training_datum_weights_only_the_answer():
    datum = scoring_datum([10, 11, 12], [20, 21])
    assert datum.model_input.to_ints() == [10, 11, 12, 20]
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [11, 12, 20, 21]
    assert datum.loss_fn_inputs["weights"].tolist() == [0.0, 0.0, 1.0, 1.0]
    with pytest.raises(MeasurementError, match="non-empty"):
        scoring_datum([], [1])


@attrs.define
class CountingService:
    """The policy's service, counting the shadow clients created through it."""

    service: Any
    created: int = 0

    def create_training_client_from_state(self, path: str) -> Any:
        self.created += 1
        return self.service.create_training_client_from_state(path)


def counting(ctx) -> tuple[Any, CountingService]:
    service = CountingService(ctx.service)
    return evolve(ctx, service=service), service


async def test_delta_is_one_step_from_the_policy_weights(policy):
    # Move the policy away from its initialisation first, so "from the policy" differs from "from the base".
    await policy.train_on([("Say something.", " Rome is far away.")], 5e-2, steps=2)
    ctx, service = counting(await policy.snapshot())
    example, probe = _data(ctx)
    expected = await policy.manual_one_step_delta(ctx.policy_checkpoint, example, probe, LR)
    shadow = ShadowTrainer(LR)
    delta = await shadow.one_step_delta(ctx, example, probe)
    assert delta == pytest.approx(expected, abs=1e-5)
    assert abs(delta) > 1e-4  # the step really moved the probe
    # Measured again on the same checkpoint, by the same shadow reloaded: the same Δ.
    assert await shadow.one_step_delta(ctx, example, probe) == delta
    assert service.created == 1


async def test_a_reused_shadow_measures_exactly_as_a_fresh_one(policy):
    ctx, service = counting(await policy.snapshot())
    example, probe = _data(ctx)
    other = scoring_datum(ctx.tokenizer.encode("Name a river."), ctx.renderer.encode(" The Nile, surely."))
    fresh = await ShadowTrainer(LR).one_step_delta(ctx, example, probe)
    shadow = ShadowTrainer(LR, max_shadows=1)
    await shadow.one_step_delta(ctx, other, probe)  # leaves a stepped adapter and Adam moments behind
    assert await shadow.one_step_delta(ctx, example, probe) == fresh
    # Concurrent measurements wait for the one shadow and each gets its own exact Δ.
    other_delta = await ShadowTrainer(LR).one_step_delta(ctx, other, probe)
    jobs = [shadow.one_step_delta(ctx, datum, probe) for datum in (example, other, example, other)]
    assert await asyncio.gather(*jobs) == [fresh, other_delta, fresh, other_delta]
    assert service.created == 3  # one per ShadowTrainer


async def test_delta_follows_the_policy_checkpoint_after_the_policy_trains(policy):
    ctx, service = counting(policy.ctx)
    example, probe = _data(ctx)
    shadow = ShadowTrainer(LR)
    delta = await shadow.one_step_delta(ctx, example, probe)
    await policy.train_on([("Name a city in France.", " Lyon, or Paris.")], 5e-2, steps=3)
    updated = evolve(await policy.snapshot(), service=service)
    after = await shadow.one_step_delta(updated, example, probe)
    assert after == pytest.approx(
        await policy.manual_one_step_delta(updated.policy_checkpoint, example, probe, LR), abs=1e-5
    )
    assert after == await ShadowTrainer(LR).one_step_delta(updated, example, probe)  # as a fresh shadow, exactly
    assert abs(after - delta) > 1e-4
    assert service.created == 2  # the first shadow, loaded with the new checkpoint, and the fresh one


async def test_the_shadow_leaves_the_policy_bit_identical(policy):
    await policy.train_on([("Say something.", " Rome is far away.")], 5e-2)
    ctx = await policy.snapshot()
    example, probe = _data(ctx)
    datums = [example, probe]

    async def policy_logprobs() -> list[list[float]]:
        out = await policy.training.forward(datums, "cross_entropy")
        return [o["logprobs"].tolist() for o in out.loss_fn_outputs]

    async def sampler_logprobs() -> list[float | None]:
        sampler = await policy.training.save_weights_and_get_sampling_client()
        return await sampler.compute_logprobs(example.model_input)

    before, sampled_before = await policy_logprobs(), await sampler_logprobs()
    shadow = ShadowTrainer(1.0)  # a huge step: any leak into the policy would show
    deltas = [await shadow.one_step_delta(ctx, example, probe) for _ in range(2)]
    assert abs(deltas[0]) > 1e-3
    assert await policy_logprobs() == before  # exactly, not approximately
    assert await sampler_logprobs() == sampled_before
    assert await ctx.sampler.compute_logprobs(example.model_input) == sampled_before


async def test_without_a_policy_checkpoint_the_measurement_is_refused(policy):
    example, probe = _data(policy.ctx)
    with pytest.raises(MeasurementError, match="policy_checkpoint is not set"):
        await ShadowTrainer(LR).one_step_delta(evolve(policy.ctx, policy_checkpoint=None), example, probe)
