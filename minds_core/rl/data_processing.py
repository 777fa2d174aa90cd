"""A batch of rollout groups -> training data, without any service call.

The steps, in order: each rollout's reward plus its overlong penalty
(``overlong``), the estimator's advantage per group (stored on the rollout as
``Rollout.advantage``), overlong filtering, the KL penalty per token (from the
reference log-probs the scoring stage stored on the rollout), the loss
aggregation's scale per sequence (``loss_aggregation``), and one datum per rollout's
sequence with any nonzero advantage on a sampled token (``datums``). Every function
reads plain data and returns plain data; ``assign_advantages`` is the one that
writes, onto the rollouts it is given.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import attrs
import tinker

from minds_core.config import RunConfig
from minds_core.contract.parts import CustomLoss
from minds_core.episodes.groups import Group, Rollout
from minds_core.rl.advantages import kl_penalized, kl_terms
from minds_core.rl.losses import loss_inputs
from minds_core.rl.overlong import is_truncated, overlong_penalty, window_tokens
from minds_core.rl.topk_distill import TEACHER_INPUTS, DistillSettings, rollout_distill_datums
from minds_core.training.datums import rl_datum
from minds_core.training.loss_aggregation import token_scales

#: A group's rewards -> one advantage per rollout (a registered ``advantage_estimators`` entry).
Estimator = Callable[[Sequence[float]], Sequence[float]]


@attrs.frozen
class ProcessingSettings:
    """How a batch becomes datums; ``from_config`` reads them from a run's settings."""

    #: ``trainer.advantage``: a group's rewards -> one advantage per rollout.
    estimator: Estimator
    #: ``trainer.loss_aggregation``: how per-token terms combine (see ``loss_aggregation``).
    aggregation: str = "sum"
    #: ``sampling.max_tokens``: the length the overlong penalty and ``fixed_length`` measure against.
    max_tokens: int = 48
    #: ``trainer.overlong_filter``: truncated rollouts get no datum (they still count in their group's baseline).
    overlong_filter: bool = False
    #: The soft overlong penalty's window in tokens (``trainer.overlong_penalty_window`` of ``max_tokens``); 0 = off.
    overlong_window: int = 0
    #: ``trainer.kl_penalty``: the coefficient of the per-token KL to the reference model.
    kl_penalty: float = 0.0
    #: The metric the mean sampled-token KL is reported under.
    kl_metric: str = "kl/sampler_base"
    #: The datum inputs the loss reads beyond the base ones (``losses.loss_inputs``), e.g. gspo's ``sequence_ratio_mask``.
    extra_inputs: tuple[str, ...] = ()
    #: ``[distill]`` when the loss reads the teacher's top-k (``topk_distill.TEACHER_INPUTS``): every trained
    #: rollout's sequences become top-k datums; None: RL datums
    distill: DistillSettings | None = None

    @classmethod
    def from_config(cls, config: RunConfig, estimator: Estimator, loss: str | CustomLoss) -> ProcessingSettings:
        """The settings of ``config``; ``estimator`` and ``loss`` are the registry's objects for its names."""
        trainer, max_tokens = config.trainer, config.sampling.max_tokens
        inputs = loss_inputs(loss)
        return cls(
            estimator=estimator,
            aggregation=trainer.loss_aggregation,
            max_tokens=max_tokens,
            overlong_filter=trainer.overlong_filter,
            overlong_window=window_tokens(trainer.overlong_penalty_window, max_tokens),
            kl_penalty=trainer.kl_penalty,
            kl_metric="kl/sampler_reference" if trainer.kl_reference else "kl/sampler_base",
            extra_inputs=tuple(name for name in inputs if name not in TEACHER_INPUTS),
            distill=DistillSettings.from_config(config) if reads_teacher(inputs) else None,
        )


@attrs.frozen
class ProcessedBatch:
    """What one batch trains on."""

    #: One datum per trained rollout's sequence with a nonzero advantage on a sampled token, in group order.
    datums: list[tinker.Datum]
    #: ``length/overlong_filtered``, ``length/overlong_penalty`` and the KL metric, when they apply.
    metrics: dict[str, float]


def reads_teacher(inputs: Sequence[str]) -> bool:
    """Whether a loss reading these datum inputs trains on the distillation teacher's top-k."""
    return any(name in TEACHER_INPUTS for name in inputs)


def kept_rollouts(groups: Sequence[Group]) -> list[Rollout]:
    """The successful rollouts of the groups that were not dropped: those with an advantage."""
    return [r for g in groups if not g.dropped for r in g.ok_rollouts]


def rollout_overlong_penalty(rollout: Rollout, settings: ProcessingSettings) -> float:
    """The soft overlong penalty added to ``rollout``'s reward (0 when the window is off)."""
    return overlong_penalty(rollout.conversation.sampled_tokens, settings.max_tokens, settings.overlong_window)


def assign_advantages(groups: Sequence[Group], settings: ProcessingSettings) -> None:
    """Set ``advantage`` on every kept rollout: the estimator over its group's rewards plus length penalties."""
    for group in groups:
        if group.dropped:
            continue
        ok = group.ok_rollouts
        advantages = settings.estimator([r.reward + rollout_overlong_penalty(r, settings) for r in ok])
        for rollout, advantage in zip(ok, advantages):
            rollout.advantage = float(advantage)


def is_filtered(rollout: Rollout, settings: ProcessingSettings) -> bool:
    """Whether overlong filtering keeps ``rollout`` out of training."""
    return settings.overlong_filter and is_truncated(rollout.conversation)


def token_advantages(rollout: Rollout, kl_penalty: float, reward_weight: float = 1.0) -> tuple[list[float], list[float]]:
    """Per token: the advantage times ``reward_weight``, less ``kl_penalty`` times the KL term when the rollout has
    reference log-probs (the penalty is not weighed by the reward's weight); and the KL terms of its sampled tokens
    ([] without reference log-probs)."""
    conv = rollout.conversation
    advantage = reward_weight * float(rollout.advantage or 0.0)
    if rollout.reference_logprobs is None:
        return [advantage] * len(conv.tokens), []
    terms = kl_terms(conv.logprobs, rollout.reference_logprobs, conv.sampled)
    return kl_penalized(advantage, terms, kl_penalty), [t for t, s in zip(terms, conv.sampled) if s]


def rollout_datums(rollout: Rollout, per_token: Sequence[float], extra_inputs: Sequence[str]) -> list[tinker.Datum]:
    """The datums of ``rollout`` with these per-token advantages: one per sequence of its conversation
    (``Conversation.spans``) that has a sampled token with a nonzero advantage."""
    conv = rollout.conversation
    datums = []
    for begin, end in conv.spans():
        advantages, sampled = per_token[begin:end], conv.sampled[begin:end]
        if end - begin < 2 or not any(a != 0 and s for a, s in zip(advantages, sampled)):
            continue
        datums.append(rl_datum(conv.tokens[begin:end], sampled, conv.logprobs[begin:end], advantages, extra_inputs))
    return datums


def process_batch(groups: Sequence[Group], settings: ProcessingSettings) -> ProcessedBatch:
    """Advantages (stored on the rollouts), then the datums of the rollouts that train, and their metrics."""
    assign_advantages(groups, settings)
    kept = kept_rollouts(groups)
    trained = [r for r in kept if not is_filtered(r, settings)]
    scales = token_scales(settings.aggregation, [r.conversation.sampled_tokens for r in trained], settings.max_tokens)
    datums: list[tinker.Datum] = []
    kl_values: list[float] = []
    for rollout, scale in zip(trained, scales):
        # distillation weighs the environment's reward term by distill.reward_weight; the KL penalty keeps its own
        per_token, kl = token_advantages(rollout, settings.kl_penalty, settings.distill.reward if settings.distill else 1.0)
        kl_values.extend(kl)
        if settings.distill is not None:
            datums.extend(rollout_distill_datums(rollout, per_token, scale, settings.distill))
        else:
            datums.extend(rollout_datums(rollout, [a * scale for a in per_token], settings.extra_inputs))
    metrics: dict[str, float] = {}
    if settings.overlong_filter:
        metrics["length/overlong_filtered"] = float(len(kept) - len(trained))
    if settings.overlong_window and kept:
        metrics["length/overlong_penalty"] = statistics.fmean(rollout_overlong_penalty(r, settings) for r in kept)
    if kl_values:
        metrics[settings.kl_metric] = statistics.fmean(kl_values)
    return ProcessedBatch(datums, metrics)
