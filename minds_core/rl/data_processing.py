"""A batch of rollout groups -> training data, without any service call.

The steps, in order: each rollout's reward plus its overlong penalty
(``overlong``), the estimator's advantage per group (stored on the rollout as
``Rollout.advantage``), overlong filtering, the KL penalty per token (from the
reference log-probs the scoring stage stored on the rollout), the loss
aggregation's scale per sequence (``loss_aggregation``), and one datum per rollout
with any nonzero advantage on a sampled token (``datums``); a rollout captured from an agent
program's calls may hold earlier sequences too (``Conversation.earlier``), each a datum with
the rollout's advantage. Every function
reads plain data and returns plain data; ``assign_advantages`` is the one that
writes, onto the rollouts it is given.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import attrs
import tinker

from minds_core.config import RunConfig
from minds_core.rl.advantages import kl_penalized, kl_terms
from minds_core.rl.datums import rl_datum
from minds_core.rl.loss_aggregation import token_scales
from minds_core.rl.losses import CustomLoss, loss_inputs
from minds_core.rl.overlong import is_truncated, overlong_penalty, window_tokens
from minds_core.rl.rollout import Group, Rollout

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

    @classmethod
    def from_config(cls, config: RunConfig, estimator: Estimator, loss: str | CustomLoss) -> ProcessingSettings:
        """The settings of ``config``; ``estimator`` and ``loss`` are the registry's objects for its names."""
        trainer, max_tokens = config.trainer, config.sampling.max_tokens
        return cls(
            estimator=estimator,
            aggregation=trainer.loss_aggregation,
            max_tokens=max_tokens,
            overlong_filter=trainer.overlong_filter,
            overlong_window=window_tokens(trainer.overlong_penalty_window, max_tokens),
            kl_penalty=trainer.kl_penalty,
            kl_metric="kl/sampler_reference" if trainer.kl_reference else "kl/sampler_base",
            extra_inputs=loss_inputs(loss),
        )


@attrs.frozen
class ProcessedBatch:
    """What one batch trains on."""

    #: One datum per trained rollout with a nonzero advantage on a sampled token, in group order.
    datums: list[tinker.Datum]
    #: ``length/overlong_filtered``, ``length/overlong_penalty`` and the KL metric, when they apply.
    metrics: dict[str, float]


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


def token_advantages(rollout: Rollout, kl_penalty: float) -> tuple[list[float], list[float]]:
    """Per token: the advantage, less ``kl_penalty`` times the KL term when the rollout has reference log-probs;
    and the KL terms of its sampled tokens ([] without reference log-probs)."""
    conv = rollout.conversation
    advantage = float(rollout.advantage or 0.0)
    if rollout.reference_logprobs is None:
        return [advantage] * len(conv.tokens), []
    terms = kl_terms(conv.logprobs, rollout.reference_logprobs, conv.sampled)
    return kl_penalized(advantage, terms, kl_penalty), [t for t, s in zip(terms, conv.sampled) if s]


def rollout_datum(rollout: Rollout, per_token: Sequence[float], extra_inputs: Sequence[str]) -> tinker.Datum | None:
    """The datum of ``rollout``'s own tokens with these per-token advantages; None when no sampled token has a nonzero one."""
    conv = rollout.conversation
    return sequence_datum(conv.tokens, conv.sampled, conv.logprobs, per_token, extra_inputs)


def sequence_datum(
    tokens: Sequence[int],
    sampled: Sequence[bool],
    logprobs: Sequence[float],
    per_token: Sequence[float],
    extra_inputs: Sequence[str],
) -> tinker.Datum | None:
    """The datum of one sequence; None when it is shorter than 2 tokens or no sampled token has a nonzero advantage."""
    if len(tokens) < 2 or not any(a != 0 and s for a, s in zip(per_token, sampled)):
        return None
    return rl_datum(tokens, sampled, logprobs, per_token, extra_inputs)


def earlier_datums(rollout: Rollout, scale: float, extra_inputs: Sequence[str]) -> list[tinker.Datum]:
    """The datums of a captured rollout's ``earlier`` sequences, each with the rollout's advantage (no KL term:
    reference log-probs are scored for the rollout's own tokens only)."""
    advantage = float(rollout.advantage or 0.0) * scale
    datums = []
    for seq in rollout.conversation.earlier:
        datum = sequence_datum(seq.tokens, seq.sampled, seq.logprobs, [advantage] * len(seq.tokens), extra_inputs)
        if datum is not None:
            datums.append(datum)
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
        per_token, kl = token_advantages(rollout, settings.kl_penalty)
        kl_values.extend(kl)
        datums.extend(earlier_datums(rollout, scale, settings.extra_inputs))
        datum = rollout_datum(rollout, [a * scale for a in per_token], settings.extra_inputs)
        if datum is not None:
            datums.append(datum)
    metrics: dict[str, float] = {}
    if settings.overlong_filter:
        metrics["length/overlong_filtered"] = float(len(kept) - len(trained))
    if settings.overlong_window and kept:
        metrics["length/overlong_penalty"] = statistics.fmean(rollout_overlong_penalty(r, settings) for r in kept)
    if kl_values:
        metrics[settings.kl_metric] = statistics.fmean(kl_values)
    return ProcessedBatch(datums, metrics)
