"""Top-k logit distillation: a KL between the teacher's and the student's distributions at every completion position.

The teacher's distribution is known on its top-k tokens (the sampler's top-k prompt log-probs,
``distill_teacher``); the rest of the vocabulary is one more bin, the tail, whose mass is what
the top-k leaves (``1 - sum exp``). The student's log-probs on the same k tokens come from the
training pass (the datum's ``target_tokens`` is ``[N, 1 + K]``: the sampled token, then the
teacher's top-k ids), and its tail is what they leave. The KL is over these k + 1 bins:

    forward  KL(p || q) = sum_i p_i (log p_i - log q_i) + P (log P - log Q)
    reverse  KL(q || p) = sum_i q_i (log q_i - log p_i) + Q (log Q - log P)

with ``p, q`` the teacher's and student's top-k probabilities and ``P, Q`` their tails; ``mixed``
weighs forward by ``distill.mix`` and reverse by the rest. With k = the vocabulary the tails are 0
and this is the full KL; for any k it is a lower bound of it (the tail merges tokens).

The datum carries everything the loss reads, so the loss is a plain function of its datums (as
``forward_backward_custom`` runs it, on the client): per position, the teacher's top-k log-probs
(``teacher_logprobs``, ``[N, K]``) and the weights of the forward and reverse KL
(``distill_weights``, ``[N, 2]``: 0 on positions that are not sampled); the env's reward enters
as an importance-sampling term on ``advantages`` (already scaled by ``distill.reward_weight``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from minds_core.contract.parts import CustomLoss
from minds_core.training.columns import datum_column, tensor_of

if TYPE_CHECKING:
    import tinker

    from minds_core.episodes.groups import Rollout

#: The datum inputs the top-k loss reads beyond the base ones; a loss that declares them gets the teacher's top-k.
TEACHER_INPUTS = ("teacher_logprobs", "distill_weights")

#: Divergence name -> the weight of (forward, reverse) KL; ``mixed`` reads ``distill.mix``.
DIVERGENCES = ("forward", "reverse", "mixed")

#: Tail masses are floored here before their log: the float32 round-off of a top-k sum that covers
#: (nearly) everything, where a tail of 0 against one of 1e-9 would make an infinite reverse term.
TAIL_FLOOR = 1e-12

#: A teacher log-prob at or below this is padding (the SDK's ``MASK_LOGPROB`` is -99999): no token.
PADDING_LOGPROB = -1e4


def divergence_weights(divergence: str, mix: float) -> tuple[float, float]:
    """The (forward, reverse) weights of a divergence name: forward (1, 0), reverse (0, 1), mixed (mix, 1 - mix)."""
    return {"forward": (1.0, 0.0), "reverse": (0.0, 1.0), "mixed": (mix, 1.0 - mix)}[divergence]


def _log_tail(logprobs: Any, valid: Any) -> tuple[Any, Any]:
    """The tail mass left by the valid entries of ``logprobs`` ``[T, K]`` (clamped at 0) and its floored log."""
    import torch

    covered = torch.where(valid, logprobs.exp(), torch.zeros_like(logprobs)).sum(-1)
    tail = (1.0 - covered).clamp(min=0.0)
    return tail, tail.clamp(min=TAIL_FLOOR).log()


def kl_parts(teacher: Any, student: Any, valid: Any | None = None) -> dict[str, Any]:
    """Per position ``[T]``: the top-k and tail parts of the forward and the reverse KL.

    ``teacher`` and ``student`` are ``[T, K]`` log-probs of the teacher's top-k tokens under each
    model (the student's differentiable); ``valid`` marks the real entries (default: all).
    """
    import torch

    if valid is None:
        valid = torch.ones_like(teacher, dtype=torch.bool)
    zero = torch.zeros_like(student)
    a = torch.where(valid, teacher.to(student.dtype), zero)
    b = torch.where(valid, student, zero)
    p = torch.where(valid, a.exp(), zero)
    q = torch.where(valid, b.exp(), zero)
    p_tail, log_p_tail = _log_tail(a, valid)
    q_tail, log_q_tail = _log_tail(b, valid)
    return {
        "forward_topk": (p * (a - b)).sum(-1),
        "forward_tail": p_tail * (log_p_tail - log_q_tail),
        "reverse_topk": (q * (b - a)).sum(-1),
        "reverse_tail": q_tail * (log_q_tail - log_p_tail),
        "teacher_mass": 1.0 - p_tail,
        "student_mass": 1.0 - q_tail,
    }


def topk_distill(data: list[tinker.Datum], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
    """The weighted top-k KL of every datum's positions, plus the reward's importance-sampling term; summed.

    ``logprobs[i]`` is ``[N, 1 + K]``: the student's log-prob of the sampled token, then of the teacher's top-k.
    """
    import torch

    total = logprobs[0].new_zeros((), dtype=torch.float64)
    for datum, lp in zip(data, logprobs, strict=True):
        lp = lp.to(torch.float64)
        teacher = datum_column(datum, "teacher_logprobs").to(torch.float64)
        weights = datum_column(datum, "distill_weights").to(torch.float64)
        parts = kl_parts(teacher, lp[:, 1:], teacher > PADDING_LOGPROB)
        forward = parts["forward_topk"] + parts["forward_tail"]
        reverse = parts["reverse_topk"] + parts["reverse_tail"]
        total = total + (weights[:, 0] * forward + weights[:, 1] * reverse).sum()
        advantages = datum_column(datum, "advantages").to(torch.float64)
        sampler = datum_column(datum, "logprobs").to(torch.float64)
        trained = advantages != 0
        ratio = torch.where(trained, (lp[:, 0] - sampler).exp(), torch.zeros_like(sampler))
        total = total - (advantages * ratio).sum()
    return total, {}


TOPK_DISTILL = CustomLoss(topk_distill, inputs=TEACHER_INPUTS)


@attrs.frozen
class DistillSettings:
    """What a top-k distillation datum holds: k, and how the loss weighs each sampled position."""

    #: ``distill.topk``: the teacher's tokens per position
    k: int
    #: the forward and the reverse KL's weights (``divergence_weights``)
    forward: float
    reverse: float
    #: ``distill.reward_weight``: the environment's reward term's weight (``data_processing`` multiplies the
    #: advantages by it before the KL penalty is taken off; the datums hold the weighed advantages)
    reward: float

    @classmethod
    def from_config(cls, config: Any) -> DistillSettings:
        """The settings of a run's ``[distill]``."""
        cfg = config.distill
        forward, reverse = divergence_weights(cfg.divergence, cfg.mix)
        return cls(cfg.topk, forward, reverse, cfg.reward_weight)


def rollout_distill_datums(
    rollout: Rollout, advantages: Sequence[float], scale: float, settings: DistillSettings
) -> list[tinker.Datum]:
    """The top-k datums of ``rollout``: one per sequence of its conversation with a sampled token.

    ``advantages`` are per token, weighed by ``distill.reward_weight`` and less the KL penalty (``data_processing``),
    before ``scale`` (the loss aggregation's); the rollout must have been scored.
    """
    conv = rollout.conversation
    if rollout.teacher_topk is None:
        raise ValueError("the rollout has no teacher top-k: score it with distill_teacher.TeacherScorer first")
    datums = []
    for begin, end in conv.spans():
        if end - begin < 2 or not any(conv.sampled[begin + 1 : end]):
            continue
        datums.append(
            distill_datum(
                conv.tokens[begin:end], conv.sampled[begin:end], conv.logprobs[begin:end], advantages[begin:end],
                rollout.teacher_topk[begin:end], scale, settings,
            )
        )  # fmt: skip
    return datums


def distill_datum(
    tokens: Sequence[int],
    sampled: Sequence[bool],
    logprobs: Sequence[float],
    advantages: Sequence[float],
    teacher: Sequence[Any],
    scale: float,
    settings: DistillSettings,
) -> tinker.Datum:
    """One top-k distillation datum for a sequence (aligned as ``datums.rl_datum``: target i is token i + 1).

    ``teacher[i]`` is the teacher's ``(ids, logprobs)`` top-k at token i (None where it has none, as
    at prompt tokens); ``scale`` is the loss aggregation's per-token scale of this sequence.
    """
    import tinker  # where it builds one: loading the plugins imports this module, which must stay light

    n, k = len(tokens), settings.k
    ids, values, distill, rl_logprobs, rl_advantages = [], [], [], [], []
    for i in range(1, n):
        top = teacher[i] if sampled[i] else None
        top_ids, top_lps = (list(top[0])[:k], list(top[1])[:k]) if top is not None else ([], [])
        pad = k - len(top_ids)
        ids.append([int(tokens[i]), *map(int, top_ids), *([0] * pad)])
        values.extend([*map(float, top_lps), *([-99999.0] * pad)])
        distill.extend([scale * settings.forward, scale * settings.reverse] if top is not None else [0.0, 0.0])
        rl_logprobs.append(float(logprobs[i]) if sampled[i] else 0.0)
        rl_advantages.append(float(advantages[i]) * scale if sampled[i] else 0.0)
    inputs = {
        "target_tokens": tinker.TensorData(data=[t for row in ids for t in row], dtype="int64", shape=[n - 1, k + 1]),
        "logprobs": tinker.TensorData(data=rl_logprobs, dtype="float32", shape=[n - 1]),
        "advantages": tinker.TensorData(data=rl_advantages, dtype="float32", shape=[n - 1]),
        "teacher_logprobs": tinker.TensorData(data=values, dtype="float32", shape=[n - 1, k]),
        "distill_weights": tinker.TensorData(data=distill, dtype="float32", shape=[n - 1, 2]),
    }
    return tinker.Datum(model_input=tinker.types.ModelInput.from_ints(list(tokens[:-1])), loss_fn_inputs=inputs)


def distill_metrics(datums: Sequence[tinker.Datum], outputs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """``distill/*`` of a trained batch, per distilled position, from the student's log-probs of the training pass.

    ``kl_topk`` and ``kl_tail``: the trained divergence's two parts (a ``mixed`` one weighed as trained);
    ``agreement``: the share of sampled tokens that are the teacher's top-1; ``teacher_mass`` and
    ``student_mass``: how much of each model's probability the teacher's top-k holds.
    """
    import torch

    rows: dict[str, list[Any]] = {"kl_topk": [], "kl_tail": [], "agreement": [], "teacher_mass": [], "student_mass": []}
    for datum, output in zip(datums, outputs):
        if "teacher_logprobs" not in datum.loss_fn_inputs or "logprobs" not in output:
            continue
        weights = datum_column(datum, "distill_weights").to(torch.float64)
        kept = weights.sum(-1) > 0
        if not bool(kept.any()):
            continue
        student = tensor_of(output["logprobs"]).to(torch.float64)
        teacher = datum_column(datum, "teacher_logprobs").to(torch.float64)
        parts = kl_parts(teacher, student[:, 1:], teacher > PADDING_LOGPROB)
        share = weights / weights.sum(-1, keepdim=True).clamp(min=1e-300)
        targets = datum_column(datum, "target_tokens")
        for name in ("topk", "tail"):
            rows[f"kl_{name}"].append((share[:, 0] * parts[f"forward_{name}"] + share[:, 1] * parts[f"reverse_{name}"])[kept])
        top1 = targets[:, 1:].gather(1, teacher.argmax(-1, keepdim=True))[:, 0]  # whatever order the top-k came in
        rows["agreement"].append((targets[:, 0] == top1).to(torch.float64)[kept])
        rows["teacher_mass"].append(parts["teacher_mass"][kept])
        rows["student_mass"].append(parts["student_mass"][kept])
    if not rows["kl_topk"]:
        return {}
    means = {name: float(torch.cat(values).mean()) for name, values in rows.items()}
    means["kl"] = means["kl_topk"] + means["kl_tail"]
    return {f"distill/{name}": value for name, value in sorted(means.items()) if math.isfinite(value)}
