"""The teacher of top-k distillation (``trainer.loss_fn = "topk_distill"``): its top-k at every token of each rollout.

The teacher is ``distill.teacher``: a base model name or ``tinker://`` sampler weights, the run's base
model (empty), or ``policy``, the policy that is training (self-distillation). With
``distill.privileged_context`` it reads each task's privileged context first (``environment.privileged_context``):
its sequence is the context's text, then the rollout's tokens unchanged, so any environment's prompts,
single- or multi-turn, work. Its top-k comes from one sampling request per sequence, with
``topk_prompt_logprobs = distill.topk`` (``max_tokens = 1``: the sampled token is not read), which the local
backend and ``minds serve`` compute in the prompt's one forward pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import tinker

from minds_core.backends.retry import REJECTIONS, Backoff, call_service
from minds_core.base.errors import UsageError
from minds_core.config import RunConfig
from minds_core.contract.environment import privileged_context
from minds_core.episodes.groups import Group
from minds_core.rl.data_processing import kept_rollouts

#: ``distill.teacher`` naming the training policy itself.
POLICY_TEACHER = "policy"

#: How the privileged context precedes the rollout's tokens in the teacher's sequence.
CONTEXT_TEMPLATE = "{context}\n\n"


class TeacherScorer:
    """The teacher's top-k log-probs at every token of the kept rollouts, through a sampling client."""

    def __init__(self, sampler: Any | None, k: int, with_context: bool, backoff: Backoff) -> None:
        self.sampler = sampler  #: the teacher's sampling client; None: the policy's, given to ``score``
        self.k = k
        self.with_context = with_context
        self.backoff = backoff

    @classmethod
    async def start(cls, service: Any, config: RunConfig, backoff: Backoff) -> TeacherScorer:
        """The teacher of ``config.distill``; a UsageError when its sampler cannot be had."""
        cfg = config.distill
        if cfg.teacher == POLICY_TEACHER:
            if not cfg.privileged_context:
                raise UsageError(
                    "distill.teacher = 'policy' without distill.privileged_context is the student itself: nothing to "
                    "learn; set distill.privileged_context = true (trainer.preset = 'self_distill' does) or name a teacher"
                )
            return cls(None, cfg.topk, cfg.privileged_context, backoff)
        teacher = cfg.teacher or config.model.base_model
        where = {"model_path": teacher} if "://" in teacher else {"base_model": teacher}
        try:
            sampler = await service.create_sampling_client(**where)
        except REJECTIONS as exc:
            raise UsageError(f"the teacher {teacher!r} (distill.teacher) cannot be sampled from: {exc}") from None
        return cls(sampler, cfg.topk, cfg.privileged_context, backoff)

    async def score(self, groups: Sequence[Group], policy_sampler: Any, where: str) -> None:
        """Store ``Rollout.teacher_topk`` on each kept rollout of ``groups``: per token, ``(ids, logprobs)`` or None."""
        sampler = self.sampler or policy_sampler
        params = tinker.types.SamplingParams(max_tokens=1)

        async def topk(prefix: list[int], tokens: list[int]) -> list[Any]:
            prompt = tinker.types.ModelInput.from_ints(prefix + tokens)
            send = lambda: sampler.sample(prompt, 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=self.k)
            response = (await call_service(where, "sample (teacher top-k)", send, self.backoff))[0]
            top = response.topk_prompt_logprobs_np
            rows = [(top.token_ids[i], top.logprobs[i]) for i in range(len(prefix), len(prefix) + len(tokens))]
            return [None, *rows[1:]] if not prefix else rows

        work, owners = [], []
        for group in groups:
            if group.dropped:
                continue
            context = privileged_context(group.task) if self.with_context else None
            for rollout in group.ok_rollouts:
                conv = rollout.conversation
                prefix = conv.renderer.encode(CONTEXT_TEMPLATE.format(context=context)) if context else []
                for begin, end in conv.spans():
                    work.append(topk(prefix, conv.tokens[begin:end]))
                    owners.append(rollout)
        scored = await asyncio.gather(*work)
        for rollout in kept_rollouts(groups):
            rollout.teacher_topk = []
        for rollout, rows in zip(owners, scored):  # each sequence scored on its own, in order
            rollout.teacher_topk.extend(rows)
