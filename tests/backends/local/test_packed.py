"""Packed micro-batches and chunked log-probs: the layout, and numerics equal to running each datum alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from peft import PeftModel
from tinker import types

from minds_core.backends.local import TrainingClient, head_logprobs, passes
from minds_core.backends.local.head_logprobs import OutputHead
from minds_core.backends.local.inputs import submitted_datum
from minds_core.backends.local.losses import LOSSES, token_losses
from minds_core.backends.local.models import target_logprobs
from minds_core.backends.local.packing import Group, plan_waves
from minds_core.backends.local.pass_cost import PassCost
from minds_core.testing import with_sampled_provenance

CONFIGS = {"dro": {"beta": 0.5}}  # a penalty large enough to matter in the gradients


def rows(*lengths: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 250, (n,), generator=gen) for n in lengths]


def rebuilt(tokens: list[torch.Tensor], groups: list[Group], budget: int) -> list[torch.Tensor]:
    """Every datum's tokens as the plan's passes see them, read back through its indices."""
    got = torch.full_like(torch.cat(tokens), -1)
    for wave in plan_waves(tokens, groups, budget):
        prefix_ids = torch.empty(0, dtype=torch.int64)
        if wave.prefix is not None:
            members = wave.prefix.target_index.shape[1]
            prefix_ids = wave.prefix.input_ids.flatten()[wave.prefix.hidden_index].repeat_interleave(members)
        for batch in wave.micro_batches:
            body_ids = batch.input_ids.flatten()[batch.body_index]
            got[batch.flat_index] = torch.cat([prefix_ids, body_ids])[batch.source_index]
    return list(got.split([len(t) for t in tokens]))


def test_packed_rows_hold_every_token_once_in_block_diagonal_causal_attention() -> None:
    tokens = rows(40, 7, 33, 12, 3, 25, 40, 9)
    (wave,) = plan_waves(tokens, [Group(0, list(range(len(tokens))))], tokens_per_pass=80)
    assert wave.prefix is None and len(wave.micro_batches) > 1
    seen, crowded = [], []
    for batch in wave.micro_batches:
        n_rows, width = batch.input_ids.shape
        assert n_rows == 1 or n_rows * width <= 80
        assert width == int(batch.datum_index.bincount().max())  # as wide as its longest datum; shorter ones packed
        crowded.append(n_rows < len(batch.datum_index.unique()))
        # Reading the mask back: each token attends exactly the tokens of its own datum up to itself.
        flat_positions = batch.position_ids.flatten()[batch.body_index]
        starts = (flat_positions == 0).cumsum(0) - 1  # datum number of each body token, in row order
        datum_of = torch.full((n_rows * width,), -1)
        datum_of[batch.body_index] = starts
        seen.append(batch.flat_index)
        if batch.attention_mask is None:  # plain causal attention: each row one datum that fills it
            assert torch.equal(batch.position_ids, torch.arange(width).expand(n_rows, width))
            continue
        mask = batch.attention_mask[:, 0]
        for r in range(n_rows):
            for q in range(width):
                d = int(datum_of[r * width + q])
                if d < 0:
                    continue
                keys = [k for k in range(width) if bool(mask[r, q, k])]
                expected = [k for k in range(q + 1) if int(datum_of[r * width + k]) == d]
                assert keys == expected
    assert any(crowded)  # several datums share a row somewhere
    assert sorted(torch.cat(seen).tolist()) == list(range(sum(len(t) for t in tokens)))
    got = rebuilt(tokens, [Group(0, list(range(len(tokens))))], 80)
    assert all(torch.equal(a, b) for a, b in zip(got, tokens, strict=True))


def test_one_datum_per_full_row_needs_no_mask() -> None:
    (wave,) = plan_waves(rows(16, 16, 16), [Group(0, [0, 1, 2])], tokens_per_pass=1000)
    (batch,) = wave.micro_batches
    assert batch.attention_mask is None and batch.input_ids.shape == (3, 16)
    assert torch.equal(batch.position_ids, torch.arange(16).expand(3, 16))


def test_shared_prefixes_run_once_and_every_member_reads_its_own_tokens_back() -> None:
    prompt_a, prompt_b = rows(20, seed=1)[0], rows(24, seed=2)[0]
    tails = rows(5, 9, 3, 7, 6, 1, seed=3)
    tokens = [torch.cat([prompt_a, t]) for t in tails[:3]] + [torch.cat([prompt_b, t]) for t in tails[3:]]
    tokens.append(rows(11, seed=4)[0])
    groups = [Group(20, [0, 1, 2]), Group(24, [3, 4, 5]), Group(0, [6])]
    waves = plan_waves(tokens, groups, tokens_per_pass=100)
    assert [w.prefix is not None for w in waves] == [True, False]
    assert waves[0].prefix.input_ids.shape == (2, 24)  # both prompts in one prefix pass (within half the budget)
    (batch,) = waves[0].micro_batches
    assert batch.input_ids.shape == (2, 17)  # a row per group (up to the prompt's width), its members back to back
    assert batch.row_prefix.tolist() == [0, 1] or batch.row_prefix.tolist() == [1, 0]
    got = rebuilt(tokens, groups, 100)
    assert all(torch.equal(a, b) for a, b in zip(got, tokens, strict=True))
    positions = batch.position_ids.flatten()[batch.body_index]
    assert int(positions.min()) >= 20  # members' own tokens continue their prompt's positions
    assert [len(w.micro_batches) for w in plan_waves(tokens, groups, tokens_per_pass=64)] == [1, 1, 1]  # 2 x 24 > 32


def test_chunked_logprobs_equal_full_logits_and_keep_no_logits_for_backward(
    trainer: TrainingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    model: PeftModel = trainer._trainer.model
    layer = model.get_base_model().get_output_embeddings()  # LoRA-wrapped: its factors get gradients too
    vocab = layer.out_features
    monkeypatch.setattr(head_logprobs, "LOGITS_PER_CHUNK", 7 * vocab)  # chunks of 7 tokens
    head = OutputHead(layer, vocab)
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(40, layer.in_features, generator=gen)
    targets = torch.randint(0, vocab, (40, 3), generator=gen)
    weights = torch.randn(40, 3, generator=gen)

    def grads(logprobs: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        h = hidden.clone().requires_grad_(True)
        model.zero_grad(set_to_none=True)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
            lp = logprobs(h)
        (lp * weights).sum().backward()
        lora = [p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None]
        return lp.detach(), [h.grad, *lora], max(saved)

    chunked, chunked_grads, chunked_saved = grads(lambda h: head.logprobs(h, targets))
    full, full_grads, full_saved = grads(lambda h: target_logprobs(layer(h), targets))
    torch.testing.assert_close(chunked, full, rtol=0, atol=1e-5)
    assert len(chunked_grads) == 3
    for got, want in zip(chunked_grads, full_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert full_saved >= 40 * vocab  # the full path keeps logits for backward
    assert chunked_saved < 7 * vocab + 1  # the chunked one keeps at most a chunk (recomputed in backward)


def float64_alone(name: str, datum: types.Datum) -> Callable:
    """A custom loss: ``name`` on one datum, in float64."""

    def loss(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        (lp,) = logprobs
        inputs = {k: v.double() for k, v in submitted_datum(datum, 0).inputs.items() if k != "target_tokens"}
        return token_losses(name, lp.double(), inputs, CONFIGS.get(name)).sum(), {}

    return loss


@pytest.mark.parametrize("loss", list(LOSSES))
def test_packed_gradients_equal_each_datum_alone_in_float64(
    new_trainer: Callable[..., TrainingClient],
    grads_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
    monkeypatch: pytest.MonkeyPatch,
    loss: str,
) -> None:
    """Mixed lengths packed into shared rows and several micro-batches, against each datum alone in float64."""
    made = passes.LossPasses.__init__

    def small_micro_batches(self: passes.LossPasses, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)
        self.tokens_per_micro_batch = 64

    monkeypatch.setattr(passes.LossPasses, "__init__", small_micro_batches)
    gen = torch.Generator().manual_seed(5)
    data = []
    for n in (30, 5, 17, 30, 3, 11, 8, 23):
        tokens = torch.randint(0, 250, (n + 1,), generator=gen)
        sampled = (torch.rand(n, generator=gen) > 0.2).float()
        inputs = {
            "target_tokens": tokens[1:].tolist(),
            "logprobs": (-torch.rand(n, generator=gen) * 3 - 2).tolist(),
            "advantages": (torch.randn(n, generator=gen) * sampled).tolist(),
            "weights": sampled.tolist(),
            "sequence_ratio_mask": sampled.tolist(),
        }
        datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1].tolist()), loss_fn_inputs=inputs)
        data.append(with_sampled_provenance(datum, max(2, n // 3), f"seq-{n}"))  # stable_reinforce reads it
    packed, alone = new_trainer(seed=4), new_trainer(seed=4)
    for client in (packed, alone):  # one step first, so that lora_B is not zero and every factor gets gradients
        client.forward_backward(data[:1], "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    out = packed.forward_backward(data, loss, CONFIGS.get(loss)).result()
    singles = [alone.forward_backward_custom([d], float64_alone(loss, d)).result() for d in data]
    assert out.metrics["loss:sum"] == pytest.approx(sum(s.metrics["loss:sum"] for s in singles), rel=1e-5, abs=1e-5)
    for got, single in zip(out.loss_fn_outputs, singles, strict=True):
        want = single.loss_fn_outputs[0]["logprobs"].to_torch()
        torch.testing.assert_close(got["logprobs"].to_torch(), want, rtol=0, atol=1e-5)
    got, want = grads_of(packed), grads_of(alone)
    assert got.keys() == want.keys() and got
    for name in want:
        scale = float(want[name].abs().max())
        assert scale > 0
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-5 * scale, msg=name)


def test_the_cost_of_a_pass_is_the_line_through_its_timings() -> None:
    cost = PassCost(torch.device("cpu"))
    assert cost.overhead_tokens() == 0.0  # nothing timed yet: sharing is not held back
    for tokens in (100, 400, 100, 250):
        cost.record(tokens, 0.02 + 1e-4 * tokens)  # 20 ms a pass, 0.1 ms a token: a pass costs 200 tokens
    assert cost.overhead_tokens() == pytest.approx(200.0)
    flat = PassCost(torch.device("cpu"))
    for tokens in (64, 512):
        flat.record(tokens, 0.05)  # more tokens cost nothing more: bound by the fixed part
    assert flat.overhead_tokens() == float("inf")
    timed = PassCost(torch.device("cpu"))
    for tokens in (8, 16):
        with timed.timing(tokens):
            torch.ones(tokens).sum()
    assert timed.overhead_tokens() >= 0.0


def test_a_group_shares_its_prompt_only_when_that_saves_more_than_a_pass_costs(trainer: TrainingClient) -> None:
    gen = torch.Generator().manual_seed(6)
    prompt = torch.randint(0, 250, (40,), generator=gen)
    items = []
    for _ in range(3):  # saving 2 x 40 = 80 token positions
        tokens = torch.cat([prompt, torch.randint(0, 250, (10,), generator=gen)])
        targets = {"target_tokens": tokens.tolist()}
        datum = types.Datum(model_input=types.ModelInput.from_ints(tokens.tolist()), loss_fn_inputs=targets)
        items.append(submitted_datum(datum, len(items)))
    engine = trainer._trainer._passes
    cost = engine._costs[True]
    for tokens in (100, 400):
        cost.record(tokens, 1e-4 * (79 + tokens))  # a pass costs 79 tokens: sharing pays
    assert [g.prefix for g in engine._groups(items, True)] == [40]
    for tokens in (100, 400):
        cost.record(tokens, 1e-4 * (200 + tokens))  # the line through all four points: 139.5 tokens
    assert [g.prefix for g in engine._groups(items, True)] == [0]
    assert [g.prefix for g in engine._groups(items, False)] == [40]  # forward-only passes: nothing timed yet


def test_bodies_too_long_to_pair_up_within_the_prompt_width_get_rows_of_their_own_length() -> None:
    prompt = rows(16, seed=7)[0]
    tails = rows(15, 15, 15, seed=8)
    tokens = [torch.cat([prompt, t]) for t in tails]
    (wave,) = plan_waves(tokens, [Group(16, [0, 1, 2])], tokens_per_pass=1000)
    (batch,) = wave.micro_batches
    assert batch.input_ids.shape == (3, 15)  # no padding to the prompt's 16 tokens: one body fills each row
    assert batch.attention_mask is None  # and plain causal attention after the full prompt is right
