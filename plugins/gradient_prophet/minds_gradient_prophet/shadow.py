"""Shadow training clients: copies of the policy that take one measured step.

The policy itself is never touched: a shadow is a separate training client
created from the policy's saved state (``ctx.policy_checkpoint``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
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
    """Shadows of the policy that each take one measured step, at most ``max_shadows`` at once.

    A shadow is created from ``ctx.policy_checkpoint`` (the policy's current
    weights, never the base model) and used by one measurement at a time. When
    the service can reload weights into a client (``load_state``, which also
    resets the optimizer), the shadow is reloaded after the measurement and kept
    for the next one; otherwise it is dropped and the next measurement creates a
    fresh one from the checkpoint. Shadows of all but the ``keep`` newest
    checkpoints are dropped.
    """

    def __init__(self, learning_rate: float, max_shadows: int = 2, keep: int = 2) -> None:
        self.learning_rate = learning_rate
        self._slots = asyncio.Semaphore(max_shadows)
        self._keep = keep
        self._idle: OrderedDict[str, list[Any]] = OrderedDict()

    async def one_step_delta(self, ctx: Context, example: types.Datum, probe: types.Datum) -> float:
        """logP(probe) after one cross_entropy step on ``example`` minus before, on a shadow of the policy."""
        checkpoint = ctx.policy_checkpoint
        if not checkpoint:
            raise MeasurementError(
                "ctx.policy_checkpoint is not set: the shadow needs the policy's current weights; "
                "the environment sets needs_policy_checkpoint = True, so the trainer should provide it"
            )
        async with self._slots:
            idle = self._idle.get(checkpoint)
            shadow = idle.pop() if idle else await ctx.service.create_training_client_from_state(checkpoint)
            delta = await self._measure(shadow, example, probe)
            if hasattr(shadow, "load_state"):
                await shadow.load_state(checkpoint)  # back to the policy's weights, optimizer reset
                self._release(checkpoint, shadow)
        return delta

    async def _measure(self, shadow: Any, example: types.Datum, probe: types.Datum) -> float:
        from tinker import types

        before = weighted_logprob(await shadow.forward([probe], "cross_entropy"), probe)
        step = shadow.forward_backward([example], "cross_entropy")
        update = shadow.optim_step(types.AdamParams(learning_rate=self.learning_rate))
        await step
        await update  # the step has finished before the probe is scored again
        after = weighted_logprob(await shadow.forward([probe], "cross_entropy"), probe)
        return after - before

    def _release(self, checkpoint: str, shadow: Any) -> None:
        self._idle.setdefault(checkpoint, []).append(shadow)
        self._idle.move_to_end(checkpoint)
        while len(self._idle) > self._keep:
            self._idle.popitem(last=False)
