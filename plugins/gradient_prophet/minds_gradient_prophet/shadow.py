"""Shadow training clients: copies of the policy that take one measured step.

The policy itself is never touched: a shadow is a separate training client
restored to the policy's saved state (``ctx.policy_checkpoint``) before each
measurement. A run creates at most ``max_shadows`` of them and reuses them:
on the hosted service each one is a training run, and a server has finitely
many adapter slots.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from minds_core import Context
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


class ShadowPool:
    """At most ``size`` shadow training clients, created on first need and reused.

    ``restored(service, checkpoint)`` lends one shadow, at ``checkpoint``'s weights
    with a fresh optimizer: a new shadow is created from the state
    (``create_training_client_from_state``) while fewer than ``size`` exist; an
    idle one is restored with ``load_state(checkpoint)`` (weights only, the
    optimizer starts afresh). Borrowers beyond ``size`` wait for a shadow to come back.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.created = 0
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Any] = []

    @asynccontextmanager
    async def restored(self, service: Any, checkpoint: str) -> AsyncIterator[Any]:
        async with self._slots:
            if self._idle:
                shadow = self._idle.pop()
                try:
                    await shadow.load_state(checkpoint)
                except BaseException:
                    self._idle.append(shadow)  # still a shadow: the next borrower restores it again
                    raise
            else:
                shadow = await service.create_training_client_from_state(checkpoint)
                self.created += 1
            try:
                yield shadow
            finally:
                self._idle.append(shadow)  # whatever it did, it is restored before its next measurement

    def close(self) -> None:
        """Drop the idle shadows (the service ends them with its session)."""
        self._idle.clear()


class ShadowTrainer:
    """Shadows of the policy that each take one measured step, at most ``max_shadows`` in all.

    Every measurement borrows a shadow from the pool restored to its
    ``ctx.policy_checkpoint`` (the CURRENT policy's weights, a fresh optimizer),
    so Δ always follows the policy and no step carries over to the next
    measurement. The probe's score before the step does not depend on the
    answer: it is measured once per (checkpoint, probe) and shared.
    """

    def __init__(self, learning_rate: float, max_shadows: int = 2) -> None:
        self.learning_rate = learning_rate
        self.max_shadows = max_shadows
        self.pool = ShadowPool(max_shadows)
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
        async with self.pool.restored(ctx.service, checkpoint) as shadow:
            before = await self._before.get(checkpoint, datum_key(probe), lambda: probe_score(shadow, probe))
            step = shadow.forward_backward([example], "cross_entropy")
            update = shadow.optim_step(types.AdamParams(learning_rate=self.learning_rate))
            await step
            await update  # the step has finished before the probe is scored again
            return await probe_score(shadow, probe) - before

    def close(self) -> None:
        self.pool.close()
