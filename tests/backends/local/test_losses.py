"""The built-in losses against an independent float64 reference of their formulas."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from tinker import types

from minds_core.backends.local import LocalBadRequestError, TrainingClient
from minds_core.backends.local.training.losses import LOSSES, token_losses

CONFIGS = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "dro": {"beta": 0.05},
    "gspo": {"clip_low_threshold": 1 - 3e-4, "clip_high_threshold": 1 + 4e-4},
    "stable_reinforce": {"kl_coeff": 0.3},
}


def reference(name: str, logp, q, adv, w, cfg: dict[str, float], weighted: bool, sampled=None):
    """(loss per token, d loss / d logp) in float64, written out from the formulas by hand."""
    r = torch.exp(logp - q)
    if name == "stable_reinforce":  # on sampled tokens: fixed-weight r*A*logp, minus kl_coeff * (r - 1 - log r)
        k = cfg["kl_coeff"]
        return -w * sampled * (r * adv * logp - k * (r - 1 - (logp - q))), -w * sampled * (r * adv - k * (r - 1))
    lo, hi = cfg.get("clip_low_threshold"), cfg.get("clip_high_threshold")
    if name == "cross_entropy":
        return -w * logp, -w
    if name == "importance_sampling":
        return -w * r * adv, -w * adv * r
    if name == "ppo":
        clipped = r.clamp(lo, hi)
        unclipped_wins = (r * adv < clipped * adv) | ((r >= lo) & (r <= hi))
        return -w * torch.minimum(r * adv, clipped * adv), torch.where(unclipped_wins, -w * adv * r, 0.0)
    if name == "cispo":
        return -w * r.clamp(lo, hi) * logp * adv, -w * adv * r.clamp(lo, hi)
    if name == "gspo":  # every token carries s = exp(mean over sampled tokens of log r), with its own gradient
        s = torch.exp(torch.log(r)[adv != 0].mean())
        clipped = s.clamp(lo, hi)
        unclipped_wins = (s * adv < clipped * adv) | ((s >= lo) & (s <= hi))
        return -w * torch.minimum(s * adv, clipped * adv), torch.where(unclipped_wins, -w * adv * s, 0.0)
    mask = (w != 0) if weighted else (adv != 0)
    beta = cfg["beta"]
    loss = -w * (logp * adv - 0.5 * beta * mask * (logp - q) ** 2)
    return loss, -w * (adv - beta * mask * (logp - q))


def random_inputs(n: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(n, generator=gen, dtype=torch.float64) * 4
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    adv[: n // 4] = 0.0  # non-sampled positions
    weights = (torch.rand(n, generator=gen, dtype=torch.float64) > 0.3).double() * 1.5
    return {
        "logp": logp,
        "logprobs": logp + (torch.rand(n, generator=gen, dtype=torch.float64) - 0.5),  # ratios 0.6 .. 1.65
        "advantages": adv,
        "weights": weights,
        "sequence_ratio_mask": (adv != 0).double(),  # gspo's sequence ratio averages over the sampled positions
        "provenance_sampled": (torch.arange(n) >= n // 8).double(),  # stable_reinforce: targets that were sampled
    }


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weighted", [True, False], ids=["weights", "no-weights"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_token_loss_and_gradient_match_float64_reference(name: str, weighted: bool, device: str) -> None:
    data = random_inputs()
    inputs = {k: v.float().to(device) for k, v in data.items() if k != "logp" and (weighted or k != "weights")}
    logp = data["logp"].float().to(device).requires_grad_(True)
    loss = token_losses(name, logp, inputs, CONFIGS[name]).cpu()
    loss.sum().backward()

    w = data["weights"] if weighted else torch.ones_like(data["logp"])
    ref_loss, ref_grad = reference(
        name, data["logp"], data["logprobs"], data["advantages"], w, CONFIGS[name], weighted, data["provenance_sampled"]
    )
    torch.testing.assert_close(loss.double(), ref_loss, rtol=0, atol=1e-5)
    torch.testing.assert_close(logp.grad.cpu().double(), ref_grad, rtol=0, atol=1e-5)


def test_importance_sampling_is_reinforce_when_sampler_and_policy_agree() -> None:
    data = random_inputs()
    logp = data["logp"].clone().requires_grad_(True)
    inputs = {"logprobs": data["logp"], "advantages": data["advantages"]}
    token_losses("importance_sampling", logp, inputs).sum().backward()
    reinforce = data["logp"].clone().requires_grad_(True)
    (-(reinforce * data["advantages"])).sum().backward()
    torch.testing.assert_close(logp.grad, reinforce.grad, rtol=0, atol=1e-12)


def grad_at_ratio(name: str, ratio: float, advantage: float) -> float:
    logp = torch.tensor([-1.0], dtype=torch.float64, requires_grad=True)
    inputs = {
        "logprobs": torch.tensor([-1.0 - math.log(ratio)], dtype=torch.float64),
        "advantages": torch.tensor([advantage], dtype=torch.float64),
    }
    token_losses(name, logp, inputs).sum().backward()
    return float(logp.grad)


@pytest.mark.parametrize(
    ("ratio", "advantage", "flows"),
    [
        (1.2 + 1e-6, 1.0, False),  # above the upper clip with A > 0: clipped, no gradient
        (1.2 - 1e-6, 1.0, True),
        (0.8 - 1e-6, 1.0, True),  # below the lower clip with A > 0: min picks the unclipped term
        (0.8 - 1e-6, -1.0, False),  # below the lower clip with A < 0: clipped
        (0.8 + 1e-6, -1.0, True),
        (1.2 + 1e-6, -1.0, True),  # above the upper clip with A < 0: min picks the unclipped term
    ],
)
def test_ppo_clipping_at_the_boundaries(ratio: float, advantage: float, flows: bool) -> None:
    grad = grad_at_ratio("ppo", ratio, advantage)
    if flows:
        assert grad == pytest.approx(-advantage * ratio, rel=1e-9)
    else:
        assert grad == 0.0


@pytest.mark.parametrize(("ratio", "coefficient"), [(4.0 + 1e-6, 4.0), (4.0 - 1e-3, 4.0 - 1e-3), (1e-3, 1e-3)])
def test_cispo_clips_the_coefficient_but_never_zeroes_the_gradient(ratio: float, coefficient: float) -> None:
    assert grad_at_ratio("cispo", ratio, 2.0) == pytest.approx(-2.0 * coefficient, rel=1e-6)


def test_dro_penalty_only_on_sampled_positions() -> None:
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-3.0, -3.0]), "advantages": torch.tensor([0.0, 1.0])}
    loss = token_losses("dro", logp, inputs, {"beta": 1.0})
    assert loss.tolist() == pytest.approx([0.0, 2.0 + 0.5])


def test_unknown_loss_and_config_keys_are_rejected() -> None:
    logp = torch.zeros(2)
    with pytest.raises(LocalBadRequestError, match="supports: cross_entropy, importance_sampling, ppo, cispo, dro, gspo, stable_reinforce"):
        token_losses("sft", logp, {})
    with pytest.raises(LocalBadRequestError, match="clip_high"):
        token_losses("ppo", logp, {}, {"clip_hi": 2.0})


@pytest.mark.parametrize("name", ["ppo", "cispo", "dro", "importance_sampling"])
@pytest.mark.slow  # a CPU-second or more of float64 numerics or bombs: the whole suite runs it
def test_forward_backward_gradients_match_a_float64_custom_loss(
    name: str,
    new_trainer: Callable[..., TrainingClient],
    sft_datum: Callable[..., types.Datum],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
    off_policy: Callable[[TrainingClient, list[types.Datum]], list[types.Datum]],
) -> None:
    builtin, custom = new_trainer(seed=3), new_trainer(seed=3)
    data = off_policy(builtin, [sft_datum(text) for text in ("The cat sat on the mat.", "1+1=2")])

    def float64_reference(batch: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        total = torch.zeros((), dtype=torch.float64)
        for datum, lp in zip(batch, logprobs, strict=True):
            q = datum.loss_fn_inputs["logprobs"].to_torch().double()
            adv = datum.loss_fn_inputs["advantages"].to_torch().double()
            lp64 = lp.double()
            loss, _ = reference(name, lp64, q, adv, torch.ones_like(lp64), CONFIGS[name], weighted=False)
            if name == "cispo":  # the reference's closed form has no stop-gradient; apply it here
                loss = -(torch.exp(lp64 - q).clamp(0.0, 4.0).detach() * lp64 * adv)
            total = total + loss.sum()
        return total, {}

    out = builtin.forward_backward(data, name).result()
    ref = custom.forward_backward_custom(data, float64_reference).result()
    assert out.metrics["loss:sum"] == pytest.approx(ref.metrics["loss:sum"], rel=1e-5)
    got, want = grads_of(builtin), grads_of(custom)
    assert got.keys() == want.keys() and got
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-5)


def test_importance_sampling_on_fresh_samples_equals_weighted_cross_entropy(
    new_trainer: Callable[..., TrainingClient],
    sft_datum: Callable[..., types.Datum],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
) -> None:
    rl, sft = new_trainer(seed=5), new_trainer(seed=5)
    advantages = [0.0] * 5 + [1.5] * 10 + [-0.5] * 7
    text = "The cat sat on the mat."
    logp = rl.forward([sft_datum(text)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"]
    rl_datum = sft_datum(text, logprobs=logp.tolist(), advantages=advantages)
    rl.forward_backward([rl_datum], "importance_sampling").result()
    sft.forward_backward([sft_datum(text, weights=advantages)], "cross_entropy").result()
    for key, want in grads_of(sft).items():
        torch.testing.assert_close(grads_of(rl)[key], want, rtol=1e-5, atol=1e-7)
