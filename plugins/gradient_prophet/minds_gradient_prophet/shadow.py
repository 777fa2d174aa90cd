"""Shadow training clients: copies of the policy that take one measured step.

The policy itself is never touched: a shadow is a separate training client
created from the policy's saved state (``ctx.policy_checkpoint``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from minds_core.envs import Context

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


def weighted_logprob(output: types.ForwardBackwardOutput, datum: types.Datum) -> float:
    """The sum of the target log-probs of a one-datum pass, each times its weight."""
    logprobs = output.loss_fn_outputs[0]["logprobs"].tolist()
    weights = datum.loss_fn_inputs["weights"].tolist()
    return float(sum(lp * w for lp, w in zip(logprobs, weights, strict=True)))


class ShadowTrainer:
    """Shadows of the policy that each take one measured step, at most ``max_shadows`` of them.

    The shadows are created once (from the first measurement's checkpoint) and
    reused: every measurement first loads its own ``ctx.policy_checkpoint`` into
    its shadow (``load_state``: the CURRENT policy's weights, a fresh optimizer),
    so Δ always follows the policy. A shadow serves one measurement at a time;
    further measurements wait for a free one.
    """

    def __init__(self, learning_rate: float, max_shadows: int = 2) -> None:
        self.learning_rate = learning_rate
        self._slots = asyncio.Semaphore(max_shadows)
        self._idle: list[Any] = []

    async def one_step_delta(self, ctx: Context, example: types.Datum, probe: types.Datum) -> float:
        """logP(probe) after one cross_entropy step on ``example`` minus before, on a shadow of the policy."""
        checkpoint = ctx.policy_checkpoint
        if not checkpoint:
            raise MeasurementError(
                "ctx.policy_checkpoint is not set: the shadow needs the policy's current weights; "
                "the environment sets needs_policy_checkpoint = True, so the trainer should provide it"
            )
        async with self._slots:
            shadow = self._idle.pop() if self._idle else await ctx.service.create_training_client_from_state(checkpoint)
            try:
                await shadow.load_state(checkpoint)
                return await self._measure(shadow, example, probe)
            finally:
                self._idle.append(shadow)

    async def _measure(self, shadow: Any, example: types.Datum, probe: types.Datum) -> float:
        from tinker import types

        before = weighted_logprob(await shadow.forward([probe], "cross_entropy"), probe)
        step = shadow.forward_backward([example], "cross_entropy")
        update = shadow.optim_step(types.AdamParams(learning_rate=self.learning_rate))
        await step
        await update  # the step has finished before the probe is scored again
        after = weighted_logprob(await shadow.forward([probe], "cross_entropy"), probe)
        return after - before
