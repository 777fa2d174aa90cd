"""The KL reference of ``trainer.kl_penalty``: a model that scores every trained rollout's tokens.

The reference is ``trainer.kl_reference`` (a base model name, or ``tinker://``
sampler weights such as a teacher's: on-policy distillation), else the run's
base model. Each step, before its datums are built, the reference's
log-probability of every token of every kept rollout is stored on the rollout
(``Rollout.reference_logprobs``); ``data_processing`` turns them into the
per-token penalty.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import tinker

from minds_core.backends.retry import REJECTIONS, Backoff, call_service
from minds_core.base.errors import UsageError
from minds_core.config import RunConfig
from minds_core.episodes.groups import Group
from minds_core.rl.data_processing import kept_rollouts


class ReferenceScorer:
    """Log-probabilities of the KL reference model, through one sampling client."""

    def __init__(self, sampler: Any, backoff: Backoff) -> None:
        self.sampler = sampler
        self.backoff = backoff

    @classmethod
    async def start(cls, service: Any, config: RunConfig, backoff: Backoff) -> ReferenceScorer | None:
        """The reference's sampling client when ``trainer.kl_penalty > 0``, else None; a UsageError when it cannot be had."""
        if config.trainer.kl_penalty <= 0:
            return None
        reference = config.trainer.kl_reference or config.model.base_model
        where = {"model_path": reference} if "://" in reference else {"base_model": reference}
        try:
            sampler = await service.create_sampling_client(**where)
        except REJECTIONS as exc:
            raise UsageError(f"the KL reference {reference!r} (trainer.kl_reference) cannot be sampled from: {exc}") from None
        return cls(sampler, backoff)

    async def score(self, groups: Sequence[Group], where: str) -> None:
        """Store the reference's log-probability of every token on each kept rollout of ``groups``."""
        rollouts = kept_rollouts(groups)

        async def logprobs(tokens: list[int]) -> list[float | None]:
            send = lambda: self.sampler.compute_logprobs(tinker.types.ModelInput.from_ints(tokens))
            return (await call_service(where, "compute_logprobs (base model)", send, self.backoff))[0]

        spans = [(r, begin, end) for r in rollouts for begin, end in r.conversation.spans()]
        scored = await asyncio.gather(*(logprobs(r.conversation.tokens[begin:end]) for r, begin, end in spans))
        for rollout in rollouts:
            rollout.reference_logprobs = []
        for (rollout, _, _), values in zip(spans, scored):  # each sequence scored on its own, in order
            rollout.reference_logprobs.extend(values)
