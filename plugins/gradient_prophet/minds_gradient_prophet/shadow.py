"""Shadow training clients: copies of the policy that take one measured step.

The policy itself is never touched: a shadow is a separate training client
created from the policy's saved state (``ctx.policy_checkpoint``), one per measurement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from minds_core.envs import Context

from minds_gradient_prophet.memo import Memo
from minds_gradient_prophet.policy_scores import MeasurementError

if TYPE_CHECKING:  # tinker imports torch: imported where used, so `minds plugins` stays light
    from tinker import types


def scoring_datum(context: Sequence[int], target: Sequence[int]) -> types.Datum:
    """A cross_entropy datum over ``context + target`` whose weights are 1 on the target tokens only."""
    if len(context) < 1 or not target:
        raise MeasurementError(f"need a non-empty context and target, got {len(context)} and {len(target)} tokens")
    from tinker import types

    sequence = [*context, *target]
    weights = [0.0] * (len(context) - 1) + [1.0] * len(target)
    return types.Datum(
        model_input=types.ModelInput.from_ints(sequence[:-1]),
        loss_fn_inputs={"target_tokens": sequence[1:], "weights": weights},
    )


def datum_key(datum: types.Datum) -> tuple[tuple[Any, ...], ...]:
    """A hashable key of a datum's input tokens, targets and weights."""
    return (
        tuple(datum.model_input.to_ints()),
        tuple(datum.loss_fn_inputs["target_tokens"].tolist()),
        tuple(datum.loss_fn_inputs["weights"].tolist()),
    )


async def probe_score(client: Any, probe: types.Datum) -> float:
    """The sum of the probe's target log-probs under ``client``, each times its weight (one forward pass)."""
    output = await client.forward([probe], "cross_entropy")
    logprobs = output.loss_fn_outputs[0]["logprobs"].tolist()
    weights = probe.loss_fn_inputs["weights"].tolist()
    return float(sum(lp * w for lp, w in zip(logprobs, weights, strict=True)))


class ShadowTrainer:
    """Shadows of the policy that each take one measured step, at most ``max_shadows`` at once.

    Every measurement gets a fresh shadow from its ``ctx.policy_checkpoint``
    (``create_training_client_from_state``: the CURRENT policy's weights, a fresh
    optimizer), so Δ always follows the policy and no step carries over to the
    next measurement. The probe's score before the step does not depend on the
    answer: it is measured once per (checkpoint, probe) and shared.
    """

    def __init__(self, learning_rate: float, max_shadows: int = 2) -> None:
        self.learning_rate = learning_rate
        self.max_shadows = max_shadows
        self._slots = asyncio.Semaphore(max_shadows)
        self._before = Memo()

    async def one_step_delta(self, ctx: Context, example: types.Datum, probe: types.Datum) -> float:
        """logP(probe) after one cross_entropy step on ``example`` minus before, on a shadow of the policy."""
        from tinker import types

        checkpoint = ctx.policy_checkpoint
        if not checkpoint:
            raise MeasurementError(
                "ctx.policy_checkpoint is not set: the shadow needs the policy's current weights; "
                "the environment sets needs_policy_checkpoint = True, so the trainer should provide it"
            )
        async with self._slots:
            shadow = await ctx.service.create_training_client_from_state(checkpoint)
            before = await self._before.get(checkpoint, datum_key(probe), lambda: probe_score(shadow, probe))
            step = shadow.forward_backward([example], "cross_entropy")
            update = shadow.optim_step(types.AdamParams(learning_rate=self.learning_rate))
            await step
            await update  # the step has finished before the probe is scored again
            return await probe_score(shadow, probe) - before
