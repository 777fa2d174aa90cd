"""The shadow step on the local backend: the right Δ, from the policy's weights, never touching the policy."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest
from attrs import evolve
from tinker import types

from minds_gradient_prophet.policy_scores import MeasurementError
from minds_gradient_prophet.shadow import ShadowTrainer, datum_key, scoring_datum

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
    """The policy's service; counts the shadows created, their restores, measurements at once, and the
    probe scores taken before a step."""

    service: Any
    created: int = 0
    restored: int = 0
    live: int = 0
    peak: int = 0
    befores: list[tuple[str, Any]] = attrs.field(factory=list)

    def begin(self) -> None:
        self.live += 1
        self.peak = max(self.peak, self.live)

    async def create_training_client_from_state(self, path: str) -> ShadowClient:
        self.created += 1
        self.begin()
        return ShadowClient(await self.service.create_training_client_from_state(path), self, path)


@attrs.define
class ShadowClient:
    """A shadow's training client offering only the calls a shadow may make."""

    client: Any
    service: CountingService
    checkpoint: str
    stepped: bool = False

    async def load_state(self, path: str) -> Any:
        """A reused shadow, restored (weights; a fresh optimizer) for its next measurement."""
        self.service.restored += 1
        self.service.begin()
        self.checkpoint, self.stepped = path, False
        return await self.client.load_state(path)

    async def forward(self, data: list[types.Datum], loss_fn: str) -> types.ForwardBackwardOutput:
        if not self.stepped:
            self.service.befores.append((self.checkpoint, datum_key(data[0])))
        output = await self.client.forward(data, loss_fn)
        if self.stepped:  # the measurement's last call
            self.service.live -= 1
        return output

    def forward_backward(self, data: list[types.Datum], loss_fn: str) -> Any:
        return self.client.forward_backward(data, loss_fn)

    def optim_step(self, params: types.AdamParams) -> Any:
        self.stepped = True
        return self.client.optim_step(params)


def counting(ctx) -> tuple[Any, CountingService]:
    service = CountingService(ctx.service)
    return evolve(ctx, service=service), service


@pytest.mark.slow
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
    # Measured again on the same checkpoint, by the same shadow restored: the same Δ.
    assert await shadow.one_step_delta(ctx, example, probe) == delta
    assert (service.created, service.restored) == (1, 1)


@pytest.mark.slow
async def test_measurements_do_not_carry_over_and_at_most_max_shadows_run_at_once(policy):
    ctx = await policy.snapshot()
    example, probe = _data(ctx)
    other = scoring_datum(ctx.tokenizer.encode("Name a river."), ctx.renderer.encode(" The Nile, surely."))
    fresh = await ShadowTrainer(LR).one_step_delta(ctx, example, probe)
    other_delta = await ShadowTrainer(LR).one_step_delta(ctx, other, probe)
    shadow = ShadowTrainer(LR, max_shadows=1)
    await shadow.one_step_delta(ctx, other, probe)  # a stepped adapter and Adam moments must not carry over
    assert await shadow.one_step_delta(ctx, example, probe) == fresh
    for limit in (1, 2):
        counted, service = counting(ctx)
        shadow = ShadowTrainer(LR, max_shadows=limit)
        jobs = [shadow.one_step_delta(counted, datum, probe) for datum in (example, other, example, other)]
        assert await asyncio.gather(*jobs) == [fresh, other_delta, fresh, other_delta]
        assert service.created == limit and service.peak == limit  # shadows are reused, never more than the limit
        assert service.restored == 4 - limit


@pytest.mark.slow
async def test_the_before_score_is_measured_once_per_checkpoint_and_probe(policy):
    ctx, service = counting(await policy.snapshot())
    example, probe = _data(ctx)
    other = scoring_datum(ctx.tokenizer.encode("Name a river."), ctx.renderer.encode(" The Nile, surely."))
    tok = ctx.tokenizer
    sum_probe = scoring_datum(tok.encode("What is 2 + 2?\nAnswer:"), tok.encode(" 4", add_special_tokens=False))
    shadow = ShadowTrainer(LR)
    pairs = [(datum, p) for datum in (example, other) for p in (probe, sum_probe)] * 2
    deltas = await asyncio.gather(*(shadow.one_step_delta(ctx, datum, p) for datum, p in pairs))
    for (datum, p), delta in zip(pairs, deltas, strict=True):
        assert delta == pytest.approx(await policy.manual_one_step_delta(ctx.policy_checkpoint, datum, p, LR), abs=1e-5)
    assert service.created == 2 and service.restored == 6  # max_shadows = 2, reused
    first = ctx.policy_checkpoint
    assert sorted(service.befores) == sorted([(first, datum_key(probe)), (first, datum_key(sum_probe))])
    # A new checkpoint scores its probe before the step once more, again once for all its measurements.
    await policy.train_on([("Name a city in France.", " Lyon, or Paris.")], 5e-2, steps=3)
    updated = evolve(await policy.snapshot(), service=service)
    await asyncio.gather(*(shadow.one_step_delta(updated, datum, probe) for datum in (example, other, example)))
    assert service.befores[2:] == [(updated.policy_checkpoint, datum_key(probe))]


@pytest.mark.slow
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
    assert (service.created, service.restored) == (2, 1)  # the first trainer's shadow was restored to the new state


@pytest.mark.slow
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
