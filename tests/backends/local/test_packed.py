"""Packed micro-batches and chunked log-probs: the layout, and numerics equal to running each datum alone."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from peft import PeftModel
from tinker import types

from minds_core.backends.local import TrainingClient
from minds_core.backends.local.model import head_logprobs, packed_attention
from minds_core.backends.local.model.head_logprobs import OutputHead, target_logprobs
from minds_core.backends.local.model.packed_attention import block_mask
from minds_core.backends.local.training import pass_cost, passes
from minds_core.backends.local.training.datums import submitted_datum
from minds_core.backends.local.training.losses import LOSSES, token_losses
from minds_core.backends.local.training.packing import Group, plan_waves
from minds_core.backends.local.training.pass_cost import PlanTimes
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
@pytest.mark.slow  # a CPU-second or more of float64 numerics or bombs: the whole suite runs it
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


def test_the_plan_run_is_the_faster_by_measured_time_and_the_other_is_retried_as_rarely_as_it_is_slower() -> None:
    plans = PlanTimes(torch.device("cpu"))
    trials = []
    for _ in range(2 * pass_cost.TRIALS):  # each plan in turn first, sharing first
        trials.append(share := plans.choose())
        plans.record(share, 1000, 0.3 if share else 0.2)  # 1000 datum tokens: sharing takes 1.5x longer
    assert trials == [True, False] * pass_cost.TRIALS
    assert plans.metrics(False) == {
        "prompt_sharing:mean": 0.0,
        "ms_per_ktoken_sharing:mean": pytest.approx(300.0),
        "ms_per_ktoken_whole:mean": pytest.approx(200.0),
    }
    chosen = [plans.choose() for _ in range(100)]
    retried = [i for i, share in enumerate(chosen, start=len(trials) + 1) if share]
    interval = math.ceil(pass_cost.RETRY * 1.5**2)  # 36 requests: the slower plan runs once in every 36
    assert retried == [len(trials) + 1 + interval, len(trials) + 1 + 2 * interval]
    plans.record(True, 4000, 0.4)  # sharing turns out faster on another shape: it runs from then on
    assert plans.choose() and plans.choose()
    plans.record(True, 1000, 5.0)  # one slow request does not count against the plan's best recent time
    assert plans.choose()
    lopsided = PlanTimes(torch.device("cpu"))
    for share in (True, False) * pass_cost.TRIALS:
        lopsided.choose()
        lopsided.record(share, 1000, 0.1 if share else 1.0)  # 10x: a retry would cost 9 requests' worth
    assert sum(not lopsided.choose() for _ in range(pass_cost.MAX_RETRY + 1)) == 1  # the slower, once in MAX_RETRY


class FakeClock:
    """A fake clock for the passes: it stands still except when ``charge`` advances it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def charge(self, seconds: float) -> None:
        self.now += seconds


class FakeCudaEvent:
    """A FAKE ``torch.cuda.Event`` (there is no GPU here): ``record`` notes the time of ``clock``, ``elapsed_time``
    gives milliseconds as CUDA events do, ``synchronize`` counts the host waits."""

    clock = FakeClock()
    waits = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing, "events that time must be made with enable_timing"
        self.at: float | None = None

    def record(self) -> None:
        self.at = self.clock()

    def synchronize(self) -> None:
        FakeCudaEvent.waits += 1

    def elapsed_time(self, end: FakeCudaEvent) -> float:
        assert self.at is not None and end.at is not None, "both events recorded"
        return 1000 * (end.at - self.at)


def test_gpu_requests_are_timed_by_events_read_only_once_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA a request's plan is timed by events, read after the request has synchronised (``settle``): nothing
    counts before, each settled request counts its seconds per datum token, and a failed request counts nothing."""
    clock = FakeClock()
    monkeypatch.setattr(FakeCudaEvent, "clock", clock)
    monkeypatch.setattr(FakeCudaEvent, "waits", 0)
    monkeypatch.setattr(torch.cuda, "Event", FakeCudaEvent)
    plans = PlanTimes(torch.device("cuda"))
    with plans.timing(True, 1000):
        clock.charge(0.3)
    with plans.timing(False, 2000):
        clock.charge(0.2)
    assert math.isnan(plans.seconds_per_token(True)) and FakeCudaEvent.waits == 0  # no host wait per request
    with pytest.raises(RuntimeError, match="a pass failed"), plans.timing(True, 1000):
        clock.charge(5.0)
        raise RuntimeError("a pass failed")
    plans.settle()
    assert FakeCudaEvent.waits == 2
    assert plans.seconds_per_token(True) == pytest.approx(0.3 / 1000)
    assert plans.seconds_per_token(False) == pytest.approx(0.2 / 2000)
    plans.settle()  # nothing left to read
    assert FakeCudaEvent.waits == 2 and len(plans._times[True]) == 1


def shared_prompt_data(prompt: int, tails: tuple[int, ...], seed: int) -> list[types.Datum]:
    """Datums of a ``prompt``-token prompt each followed by a tail of its own (of ``tails`` tokens)."""
    gen = torch.Generator().manual_seed(seed)
    first = torch.randint(0, 250, (prompt,), generator=gen)
    data = []
    for tail in tails:
        tokens = torch.cat([first, torch.randint(0, 250, (tail,), generator=gen)]).tolist()
        data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs={"target_tokens": tokens}))
    return data


@pytest.mark.parametrize(
    ("cost", "shares"),
    [
        (lambda rows, width: 1.0, False),  # a fixed cost per pass: the prefix pass costs more than it saves
        (lambda rows, width: 1e-3 * rows * width**2, True),  # attention area: sharing's narrower rows win
    ],
    ids=["fixed-cost-per-pass", "cost-by-attention-area"],
)
def test_requests_share_their_prompts_when_the_measured_passes_say_it_is_faster(
    trainer: TrainingClient, cost: Callable[[int, int], float], shares: bool
) -> None:
    engine = trainer._trainer._passes
    clock = FakeClock()
    engine._plans[True] = PlanTimes(engine.device, clock=clock)
    hook = engine.decoder.register_forward_pre_hook(
        lambda module, args, kwargs: clock.charge(cost(*kwargs["input_ids"].shape)), with_kwargs=True
    )
    data = shared_prompt_data(40, (10, 10, 10, 10), seed=6)  # whole: 4 rows of 50; sharing: 1 x 40, then 1 x 40
    items = [submitted_datum(datum, i) for i, datum in enumerate(data)]
    metrics = [
        engine.run(items, lambda lp, inputs: -lp.sum(), backward=True)[2] for _ in range(2 * pass_cost.TRIALS + 2)
    ]
    hook.remove()
    assert [m["prompt_sharing:mean"] for m in metrics] == [1.0, 0.0] * pass_cost.TRIALS + [float(shares)] * 2
    whole = cost(4, 50) / 200  # the fake seconds of each plan, per datum token
    sharing = 2 * cost(1, 40) / 200
    assert metrics[-1]["ms_per_ktoken_sharing:mean"] == pytest.approx(1e6 * sharing)
    assert metrics[-1]["ms_per_ktoken_whole:mean"] == pytest.approx(1e6 * whole)


@pytest.mark.slow
def test_the_plan_follows_the_times_measured_on_the_real_model(trainer: TrainingClient) -> None:
    data = shared_prompt_data(200, (30, 50, 20, 40), seed=9)
    outputs = [trainer.forward_backward(data, "cross_entropy").result().metrics for _ in range(2 * pass_cost.TRIALS + 1)]
    assert [m["prompt_sharing:mean"] for m in outputs[:-1]] == [1.0, 0.0] * pass_cost.TRIALS
    measured = outputs[-2]  # both plans' best times before the last request: it runs the faster
    assert measured["ms_per_ktoken_sharing:mean"] > 0 and measured["ms_per_ktoken_whole:mean"] > 0
    faster = measured["ms_per_ktoken_sharing:mean"] <= measured["ms_per_ktoken_whole:mean"]
    assert outputs[-1]["prompt_sharing:mean"] == float(faster)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # unfused on the CPU: slow, right
@pytest.mark.slow
def test_flex_attention_block_masks_give_the_dense_masks_log_probs_and_gradients(trainer: TrainingClient) -> None:
    data = shared_prompt_data(30, (5, 12, 7, 3), seed=4) + shared_prompt_data(0, (9, 23, 40, 2, 17), seed=5)
    items = [submitted_datum(datum, i) for i, datum in enumerate(data)]
    model = trainer._trainer.model

    def run(attention: str) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        """Log-probs of a forward pass (through FlexAttention itself when ``flex``), and gradients (through the
        block mask's dense form on the CPU, where FlexAttention has no backward)."""
        model.zero_grad(set_to_none=True)
        engine = passes.LossPasses(
            model, compute_dtype=torch.float32, tokens_per_micro_batch=64, share_prefixes=True, attention=attention
        )
        assert engine.attention == attention
        loss = lambda lp, inputs: -(lp * torch.arange(len(lp))).sum()
        logprobs, _, _ = engine.run(items, loss, backward=False)
        engine.run(items, loss, backward=True)
        return logprobs, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    (flex_lp, flex_grads), (dense_lp, dense_grads) = run("flex"), run("dense")
    for got, want in zip(flex_lp, dense_lp, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert flex_grads.keys() == dense_grads.keys() and flex_grads
    for name, want in dense_grads.items():
        torch.testing.assert_close(flex_grads[name], want, rtol=0, atol=1e-5 * float(want.abs().max()), msg=name)


def test_flex_attention_that_fails_to_build_leaves_the_dense_mask_for_the_rest_of_the_process(
    trainer: TrainingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def kernel_without_a_compiler(device_type: str, grad: bool) -> Callable[..., torch.Tensor]:
        """A fake FlexAttention kernel that fails as one does where its compiler is missing."""

        def fail(*args: object, **kwargs: object) -> torch.Tensor:
            calls.append(device_type)
            raise RuntimeError("fake: triton found no C compiler")

        return fail

    monkeypatch.setattr(packed_attention, "flex_kernel", kernel_without_a_compiler)
    monkeypatch.setattr(packed_attention, "_failure", [])
    data = shared_prompt_data(30, (5, 12, 7), seed=4) + shared_prompt_data(0, (9, 23), seed=5)
    items = [submitted_datum(datum, i) for i, datum in enumerate(data)]
    results = []
    for attention in ("flex", "dense"):
        engine = passes.LossPasses(
            trainer._trainer.model, compute_dtype=torch.float32, tokens_per_micro_batch=64, share_prefixes=True,
            attention=attention,
        )  # fmt: skip
        results.append(engine.run(items, lambda lp, inputs: -lp.sum(), backward=False)[0])
    assert calls == ["cpu"]  # tried once, then never again in this process
    assert packed_attention.flex_failure() == "RuntimeError: fake: triton found no C compiler"
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_a_block_mask_attends_exactly_where_the_dense_mask_does() -> None:
    tokens = [torch.cat([rows(20, seed=1)[0], tail]) for tail in rows(3, 9, 5, seed=2)] + rows(7, 30, seed=3)
    for wave in plan_waves(tokens, [Group(20, [0, 1, 2]), Group(0, [3, 4])], tokens_per_pass=48):
        for batch in wave.micro_batches:
            if batch.plain:
                continue
            mask = block_mask(batch.segment, batch.prefix_lengths, batch.width_prefix)
            dense = batch.attention_mask[:, 0]
            n_rows, width, keys = dense.shape
            q, kv = torch.arange(width)[:, None], torch.arange(keys)[None, :]
            for b in range(n_rows):
                assert torch.equal(mask.mask_mod(torch.tensor(b), None, q, kv), dense[b])


def test_bodies_too_long_to_pair_up_within_the_prompt_width_get_rows_of_their_own_length() -> None:
    prompt = rows(16, seed=7)[0]
    tails = rows(15, 15, 15, seed=8)
    tokens = [torch.cat([prompt, t]) for t in tails]
    (wave,) = plan_waves(tokens, [Group(16, [0, 1, 2])], tokens_per_pass=1000)
    (batch,) = wave.micro_batches
    assert batch.input_ids.shape == (3, 15)  # no padding to the prompt's 16 tokens: one body fills each row
    assert batch.attention_mask is None  # and plain causal attention after the full prompt is right
