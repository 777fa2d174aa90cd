"""Shared-prefix training and token-bounded micro-batches equal running every datum alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from tinker import types

from minds_core.backends.local import TrainingClient
from minds_core.backends.local.training import passes
from minds_core.backends.local.training.datums import submitted_datum
from minds_core.backends.local.training.losses import LOSSES
from minds_core.testing import with_sampled_provenance

PROMPT = "<|im_start|>user\nWhat is 12+34? Answer with a number.<|im_end|>\n<|im_start|>assistant\n"
COMPLETIONS = ("46<|im_end|>", "It is 46.<|im_end|>", "4.", "Forty-six, I think.<|im_end|>")


def rl_datum(tokens: list[int], prompt_length: int, seed: int, topk: int = 0) -> types.Datum:
    """An RL datum over ``tokens``: advantages and weights on the completion only, as the trainer builds them."""
    gen = torch.Generator().manual_seed(seed)
    n = len(tokens) - 1
    shape = (n, topk) if topk else (n,)
    sampled = (torch.arange(n) >= prompt_length - 1).float()
    if topk:
        sampled = sampled[:, None].expand(shape)
        targets = torch.randint(0, 256, shape, generator=gen)
        targets[:, 0] = torch.tensor(tokens[1:])
    else:
        targets = torch.tensor(tokens[1:])
    inputs = {
        "target_tokens": targets.tolist(),
        "logprobs": (-torch.rand(shape, generator=gen) * 3).tolist(),
        "advantages": (torch.randn(()).item() * sampled + torch.randn(shape, generator=gen) * 0.1).tolist(),
        "weights": sampled.tolist(),
        "sequence_ratio_mask": sampled.tolist(),  # read by gspo only
    }
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)
    if topk:
        return datum
    return with_sampled_provenance(datum, prompt_length, f"seq-{seed}")  # as the cookbook attaches it (stable_reinforce)


@pytest.fixture(autouse=True)
def every_shared_prompt_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request here shares its prompts, whichever plan the measured times would choose: the prompts are
    short (float32 rounding over a long prompt comes near the 1e-5 bound the gradient checks hold)."""
    monkeypatch.setattr(passes.PlanTimes, "choose", lambda self: True)


@pytest.fixture
def group_data(encode: Callable[[str], list[int]]) -> list[types.Datum]:
    """Two groups of rollouts (shared prompts) interleaved with two datums that share nothing."""
    prompt, other = encode(PROMPT), encode(PROMPT.replace("12+34", "99-9"))
    data = [rl_datum(prompt + encode(c), len(prompt), i) for i, c in enumerate(COMPLETIONS)]
    data.insert(2, rl_datum(encode("Hello, world! A datum of its own."), 1, 10))
    data += [rl_datum(other + encode(c), len(other), 20 + i) for i, c in enumerate(COMPLETIONS[:3])]
    data.append(rl_datum(encode("short"), 1, 30))
    return data


def alone_and_together(
    new_trainer: Callable[..., TrainingClient],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
    data: list[types.Datum],
    loss: str,
) -> tuple[list[types.ForwardBackwardOutput], types.ForwardBackwardOutput, dict, dict]:
    alone, together = new_trainer(seed=3), new_trainer(seed=3)
    for client in (alone, together):  # one step first, so that lora_B is not zero and every factor gets gradients
        client.forward_backward(data[:1], "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    one_by_one = [alone.forward_backward([datum], loss).result() for datum in data]
    batched = together.forward_backward(data, loss).result()
    return one_by_one, batched, grads_of(alone), grads_of(together)


def assert_same(one_by_one, batched, reference_grads, grads) -> None:
    assert reference_grads.keys() == grads.keys() and grads
    assert all(float(g.abs().max()) > 0 for g in grads.values())
    for name in grads:
        # float32 sums in another order, relative to the largest entry: 1e-5 failed once in CI (cispo, under load,
        # where torch's thread count can change the order); a packing or masking error is off by orders more
        scale = float(reference_grads[name].abs().max())
        torch.testing.assert_close(grads[name], reference_grads[name], rtol=0, atol=3e-5 * scale, msg=name)
    for single, output in zip(one_by_one, batched.loss_fn_outputs, strict=True):
        torch.testing.assert_close(
            output["logprobs"].to_torch(), single.loss_fn_outputs[0]["logprobs"].to_torch(), rtol=0, atol=1e-5
        )
    total = sum(single.metrics["loss:sum"] for single in one_by_one)
    assert batched.metrics["loss:sum"] == pytest.approx(total, abs=1e-4)


def test_groups_are_found_by_their_shared_prompt(
    group_data: list[types.Datum], encode: Callable[[str], list[int]]
) -> None:
    items = [submitted_datum(datum, i) for i, datum in enumerate(group_data)]
    groups = passes.shared_prefix_groups(items)
    lengths = len(encode(PROMPT)), len(encode(PROMPT.replace("12+34", "99-9")))
    shared = sorted((group.members, group.prefix) for group in groups if group.prefix)
    assert shared == [([0, 1, 3, 4], lengths[0]), ([5, 6, 7], lengths[1])]
    assert [group.members for group in groups if not group.prefix] == [[2, 8]]
    # Prefixes shorter than asked for (the completions part within a few tokens) run whole.
    fewer = passes.shared_prefix_groups(items, min_prefix=max(lengths) + 8)
    assert [(group.members, group.prefix) for group in fewer] == [(list(range(len(items))), 0)]


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.slow  # a CPU-second or more of float64 numerics or bombs: the whole suite runs it
def test_shared_prefix_gradients_equal_each_datum_alone(
    new_trainer: Callable[..., TrainingClient],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
    group_data: list[types.Datum],
    loss: str,
) -> None:
    assert_same(*alone_and_together(new_trainer, grads_of, group_data, loss))


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_suffixes_split_over_micro_batches_still_match(
    new_trainer: Callable[..., TrainingClient],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
    group_data: list[types.Datum],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = passes.LossPasses.__init__

    def small_micro_batches(self: passes.LossPasses, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)
        self.tokens_per_micro_batch = 24  # one or two suffixes per pass, two prefixes in separate prefix passes

    monkeypatch.setattr(passes.LossPasses, "__init__", small_micro_batches)
    assert_same(*alone_and_together(new_trainer, grads_of, group_data, "ppo"))


def test_topk_targets_share_a_prefix_too(
    new_trainer: Callable[..., TrainingClient],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
    encode: Callable[[str], list[int]],
) -> None:
    prompt = encode(PROMPT)
    data = [rl_datum(prompt + encode(c), len(prompt), i, topk=3) for i, c in enumerate(COMPLETIONS)]
    assert_same(*alone_and_together(new_trainer, grads_of, data, "importance_sampling"))


def test_forward_without_backward_matches_and_leaves_no_gradient(
    new_trainer: Callable[..., TrainingClient],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
    group_data: list[types.Datum],
) -> None:
    client = new_trainer(seed=3)
    singles = [client.forward([datum], "cispo").result() for datum in group_data]
    together = client.forward(group_data, "cispo").result()
    for single, output in zip(singles, together.loss_fn_outputs, strict=True):
        torch.testing.assert_close(
            output["logprobs"].to_torch(), single.loss_fn_outputs[0]["logprobs"].to_torch(), rtol=0, atol=1e-5
        )
    assert grads_of(client) == {}
