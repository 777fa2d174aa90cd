"""Tinker's built-in losses as per-token functions on tensors.

Each function maps the policy's target log-probs ``logp`` and the datum's loss
inputs to a per-token loss (the negated objective); the request's loss is the
SUM over tokens and datums. ``weights``, when given, multiply every loss (1
otherwise). Notation: ``q`` = sampler log-probs (input ``logprobs``), ``A`` =
``advantages``, ``r = exp(logp - q)``.

| loss | per-token objective | loss_fn_config (default) |
|---|---|---|
| cross_entropy | ``w * logp`` | - |
| importance_sampling | ``w * r * A`` | - |
| ppo | ``w * min(r*A, clip(r, lo, hi)*A)`` | clip_low_threshold (0.8), clip_high_threshold (1.2) |
| cispo | ``w * stopgrad(clip(r, lo, hi)) * logp * A`` | clip_low_threshold (0.0), clip_high_threshold (4.0) |
| dro | ``w * (logp*A - 0.5*beta*m*(logp - q)^2)`` | beta (0.05) |
| gspo | ``w * min(s_t*A, clip(s_t, lo, hi)*A)`` | clip_low_threshold (0.9997), clip_high_threshold (1.0004) |
| stable_reinforce | ``w * m * (stopgrad(r)*A*logp - kl_coeff*(r - 1 - log r))`` | kl_coeff (0.0) |

The functions are elementwise over tokens, so they take the tokens of many datums
concatenated; the one loss that reduces over a datum (GSPO's sequence ratio) reduces
within each datum named by ``inputs[DATUM_INDEX]`` (all tokens one datum when absent).

DRO's penalty mask ``m`` keeps it to sampled positions: ``weights != 0`` when
weights are given, else ``advantages != 0``.

GSPO (Zheng et al. 2025, the token-level variant Tinker implements) needs the
input ``sequence_ratio_mask``: over the tokens ``M`` it marks, the sequence
ratio is ``s = exp(mean_{t in M}(logp_t - q_t))``; every token carries
``s_t = stopgrad(s) * exp(logp_t - stopgrad(logp_t))``, the value of ``s`` with
the gradient of its own log-probability. Defaults are the paper's
epsilon_low = 3e-4, epsilon_high = 4e-4.

StableReinforce is the SDK's REINFORCE for off-policy data (the cookbook's default
async and math_rl loss). The hosted service publishes its inputs, not its formula:
every datum names the sampled sequences behind its targets (``Datum.with_provenance``)
and the service looks up what it recorded when sampling (``record_stability_info``).
Locally the sampler's numbers are the datum's ``logprobs``, and ``m`` (input
``provenance_sampled``, made from the datum's ``loss_fn_input_spans``) marks the
targets that are sampled tokens; prompt and tool tokens carry no loss. The objective
is REINFORCE with the sampler ratio as a fixed weight (the gradient of ``r*A``), minus
``kl_coeff`` times the k3 estimate of KL(sampler || policy); its numbers may differ
from the hosted service's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from ..model.errors import LocalBadRequestError

__all__ = ["DATUM_INDEX", "LOSSES", "LOSS_INPUTS", "PROVENANCE_SAMPLED", "LossSpec", "get_loss", "resolve_config", "token_losses"]

LossInputs = Mapping[str, torch.Tensor]

DATUM_INDEX = "datum_index"
"""The loss input naming each token's datum (int64 ``[N]``) where several datums' tokens are concatenated."""

TokenLossFn = Callable[[torch.Tensor, LossInputs, Mapping[str, float]], torch.Tensor]


@dataclass(frozen=True)
class LossSpec:
    """A built-in loss: its per-token function, the inputs it needs and its config defaults."""

    fn: TokenLossFn
    required_inputs: tuple[str, ...]
    config_defaults: Mapping[str, float]


def _weights(logp: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    weights = inputs.get("weights")
    return torch.ones_like(logp) if weights is None else weights


def _ratio(logp: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    return torch.exp(logp - inputs["logprobs"])


def cross_entropy(logp: torch.Tensor, inputs: LossInputs, config: Mapping[str, float]) -> torch.Tensor:
    """Supervised negative log-likelihood."""
    return -_weights(logp, inputs) * logp


def importance_sampling(logp: torch.Tensor, inputs: LossInputs, config: Mapping[str, float]) -> torch.Tensor:
    """REINFORCE corrected by the policy/sampler ratio."""
    return -_weights(logp, inputs) * _ratio(logp, inputs) * inputs["advantages"]


def ppo(logp: torch.Tensor, inputs: LossInputs, config: Mapping[str, float]) -> torch.Tensor:
    """PPO's clipped surrogate."""
    ratio, advantages = _ratio(logp, inputs), inputs["advantages"]
    clipped = ratio.clamp(config["clip_low_threshold"], config["clip_high_threshold"])
    return -_weights(logp, inputs) * torch.minimum(ratio * advantages, clipped * advantages)


def cispo(logp: torch.Tensor, inputs: LossInputs, config: Mapping[str, float]) -> torch.Tensor:
    """Policy gradient weighted by the clipped, detached ratio."""
    ratio = _ratio(logp, inputs).clamp(config["clip_low_threshold"], config["clip_high_threshold"])
    return -_weights(logp, inputs) * ratio.detach() * logp * inputs["advantages"]


def dro(logp: torch.Tensor, inputs: LossInputs, config: Mapping[str, float]) -> torch.Tensor:
    """Policy gradient with a quadratic penalty on sampled positions."""
    advantages = inputs["advantages"]
    sampled = inputs["weights"] != 0 if "weights" in inputs else advantages != 0
    penalty = 0.5 * config["beta"] * sampled * (logp - inputs["logprobs"]) ** 2
    return -_weights(logp, inputs) * (logp * advantages - penalty)


def gspo(logp: torch.Tensor, inputs: LossInputs, config: Mapping[str, float]) -> torch.Tensor:
    """PPO's clipped surrogate on the sequence-level ratio (GSPO-token)."""
    in_ratio = (inputs["sequence_ratio_mask"] != 0).to(logp.dtype)
    log_ratio = (logp.detach() - inputs["logprobs"]) * in_ratio
    datum = inputs.get(DATUM_INDEX)
    datum = torch.zeros(logp.shape[0], dtype=torch.int64, device=logp.device) if datum is None else datum
    datum = datum.reshape(-1, *[1] * (logp.ndim - 1)).expand_as(logp).reshape(-1)
    sums = logp.new_zeros(logp.numel()).index_add_(0, datum, log_ratio.reshape(-1))
    counts = logp.new_zeros(logp.numel()).index_add_(0, datum, in_ratio.reshape(-1))
    sequence = (sums / counts.clamp(min=1))[datum].reshape(logp.shape)  # each datum's mean (0 where none counts)
    ratio = torch.exp(sequence + logp - logp.detach())
    advantages = inputs["advantages"]
    clipped = ratio.clamp(config["clip_low_threshold"], config["clip_high_threshold"])
    return -_weights(logp, inputs) * torch.minimum(ratio * advantages, clipped * advantages)


def stable_reinforce(logp: torch.Tensor, inputs: LossInputs, config: Mapping[str, float]) -> torch.Tensor:
    """REINFORCE weighted by the detached sampler ratio on sampled tokens, with a k3 KL penalty."""
    ratio = _ratio(logp, inputs)
    objective = ratio.detach() * inputs["advantages"] * logp - config["kl_coeff"] * (ratio - 1 - (logp - inputs["logprobs"]))
    return -_weights(logp, inputs) * inputs[PROVENANCE_SAMPLED] * objective


#: The loss input made from a datum's provenance: 1 where the target is a sampled token, else 0.
PROVENANCE_SAMPLED = "provenance_sampled"
_RL_INPUTS = ("target_tokens", "logprobs", "advantages")
_CLIP = ("clip_low_threshold", "clip_high_threshold")

LOSSES: Mapping[str, LossSpec] = {
    "cross_entropy": LossSpec(cross_entropy, ("target_tokens",), {}),
    "importance_sampling": LossSpec(importance_sampling, _RL_INPUTS, {}),
    "ppo": LossSpec(ppo, _RL_INPUTS, dict(zip(_CLIP, (0.8, 1.2), strict=True))),
    "cispo": LossSpec(cispo, _RL_INPUTS, dict(zip(_CLIP, (0.0, 4.0), strict=True))),
    "dro": LossSpec(dro, _RL_INPUTS, {"beta": 0.05}),
    "gspo": LossSpec(gspo, (*_RL_INPUTS, "sequence_ratio_mask"), dict(zip(_CLIP, (1 - 3e-4, 1 + 4e-4), strict=True))),
    "stable_reinforce": LossSpec(stable_reinforce, (*_RL_INPUTS, PROVENANCE_SAMPLED), {"kl_coeff": 0.0}),
}
"""The built-in losses by Tinker name."""

LOSS_INPUTS = frozenset({"weights", *(key for spec in LOSSES.values() for key in spec.required_inputs)})
"""Every loss input some built-in loss reads."""


def get_loss(name: str) -> LossSpec:
    """The loss named ``name``, or an error listing the supported ones."""
    try:
        return LOSSES[name]
    except (KeyError, TypeError):
        raise LocalBadRequestError(
            f"Unknown loss_fn {name!r}; the local backend supports: {', '.join(LOSSES)} "
            "(and forward_backward_custom for anything else)"
        ) from None


def resolve_config(name: str, config: Mapping[str, float | str] | None) -> dict[str, float]:
    """``loss_fn_config`` over the loss's defaults; unknown keys and non-numbers are errors."""
    defaults = get_loss(name).config_defaults
    given = dict(config or {})
    if unknown := sorted(set(given) - set(defaults)):
        accepted = ", ".join(defaults) or "no keys"
        raise LocalBadRequestError(f"loss_fn_config for {name!r} takes {accepted}; got unknown {unknown}")
    try:
        return {key: float(given.get(key, default)) for key, default in defaults.items()}
    except (TypeError, ValueError) as exc:
        raise LocalBadRequestError(f"loss_fn_config for {name!r} must hold numbers: {exc}") from None


def token_losses(
    name: str,
    logp: torch.Tensor,
    inputs: LossInputs,
    config: Mapping[str, float | str] | None = None,
) -> torch.Tensor:
    """Per-token loss of the built-in ``name`` (sum it for the request's loss)."""
    return get_loss(name).fn(logp, inputs, resolve_config(name, config))
