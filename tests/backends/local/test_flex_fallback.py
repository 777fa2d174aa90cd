"""FlexAttention that fails leaves requests correct: the probe, the dense rerun, the gradients taken back.

A compiled FlexAttention kernel can fail on a user's GPU where none runs here (inductor
compiles its backward lazily, at the first backward pass). The fake kernels below stand
in for such a kernel: they compute real attention (SDPA over the block mask's dense
form) and fail where a GPU compile would, or compute wrong values. The same checks on a
real GPU kernel are in ``test_cuda_flex.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pytest
import torch
from structlog.testing import capture_logs
from tinker import types
from torch._dynamo.utils import counters
from torch.nn.attention.flex_attention import BlockMask, create_mask

from minds_core.backends.local import TrainingClient
from minds_core.backends.local.model import packed_attention
from minds_core.backends.local.model.packed_attention import block_mask, compile_flex, prove
from minds_core.backends.local.training import passes
from minds_core.backends.local.training.datums import submitted_datum
from minds_core.backends.local.training.packing import Group, MicroBatch, plan_waves
from minds_core.backends.local.training.passes import shared_prefix_groups

from .test_packed import rows, shared_prompt_data

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


class _FailsInBackward(torch.autograd.Function):
    """Identity whose backward raises, as a kernel whose backward fails to compile does."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("fake: inductor failed to compile FlexAttention's backward")


class FakeKernel:
    """A fake FlexAttention kernel on the CPU: SDPA over the block mask's dense form (real values), whose backward
    fails from its ``fail_from``-th backward pass on (None: never); ``ignore_mask`` computes wrong values instead."""

    def __init__(self, fail_from: int | None = None, *, ignore_mask: bool = False) -> None:
        self.fail_from = fail_from
        self.ignore_mask = ignore_mask
        self.calls = 0
        self.backward_calls = 0

    def __call__(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, block_mask: BlockMask,
        scale: float | None, enable_gqa: bool,
    ) -> torch.Tensor:  # fmt: skip
        self.calls += 1
        rows, _, queries, keys = block_mask.shape
        dense = None if self.ignore_mask else create_mask(block_mask.mask_mod, rows, None, queries, keys)
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=dense, scale=scale, enable_gqa=enable_gqa
        )
        if not out.requires_grad:
            return out
        if self.fail_from is not None and self.backward_calls + 1 >= self.fail_from:
            out = _FailsInBackward.apply(out)
        out.register_hook(self._count)  # runs as its backward begins
        return out

    def _count(self, grad: torch.Tensor) -> None:
        self.backward_calls += 1


@pytest.fixture
def fresh_flex(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[FakeKernel], None]]:
    """This process's FlexAttention state made fresh, and a way to install a fake kernel on every device."""
    monkeypatch.setattr(packed_attention, "_failure", [])
    monkeypatch.setattr(packed_attention, "_proven", set())

    def install(kernel: FakeKernel) -> None:
        monkeypatch.setattr(packed_attention, "flex_kernel", lambda device_type, grad: kernel)

    yield install


def request_items() -> list:
    data = shared_prompt_data(30, (5, 12, 7, 3), seed=4) + shared_prompt_data(0, (9, 23, 40, 2, 17), seed=5)
    return [submitted_datum(datum, i) for i, datum in enumerate(data)]


def engine(trainer: TrainingClient, attention: str) -> passes.LossPasses:
    return passes.LossPasses(
        trainer._trainer.model, compute_dtype=torch.float32, tokens_per_micro_batch=64, share_prefixes=True,
        attention=attention,
    )  # fmt: skip


def loss(lp: torch.Tensor, inputs: dict) -> torch.Tensor:
    return -(lp * torch.arange(len(lp))).sum()


def grads(trainer: TrainingClient) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in trainer._trainer.model.named_parameters() if p.grad is not None}


def accumulate_dense_twice(trainer: TrainingClient) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """The log-probs of the request and the gradients of two dense runs of it (what one run adds to another's)."""
    trainer._trainer.model.zero_grad(set_to_none=True)
    dense = engine(trainer, "dense")
    dense.run(request_items(), loss, backward=True)
    logprobs, _, _ = dense.run(request_items(), loss, backward=True)
    want = grads(trainer)
    trainer._trainer.model.zero_grad(set_to_none=True)
    return logprobs, want


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys() and want
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=0, atol=1e-5 * float(value.abs().max()), msg=name)


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_a_backward_that_fails_after_the_probe_leaves_the_accumulated_gradients_and_reruns_densely(
    trainer: TrainingClient, fresh_flex: Callable[[FakeKernel], None]
) -> None:
    want_lp, want_grads = accumulate_dense_twice(trainer)
    engine(trainer, "dense").run(request_items(), loss, backward=True)  # gradients accumulated before the request
    kernel = FakeKernel(fail_from=2)  # the probe's backward compiles; the first real one (a new shape) fails
    fresh_flex(kernel)
    flex = engine(trainer, "flex")
    with capture_logs() as logs:
        logprobs, _, _ = flex.run(request_items(), loss, backward=True)
        flex.run(request_items(), loss, backward=False)
    assert kernel.backward_calls >= 2  # the probe's, then the real pass's that failed part-way through the model
    assert_same(grads(trainer), want_grads)  # taken back, then added once by the dense rerun
    for got, want in zip(logprobs, want_lp, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert packed_attention.flex_failure() == "RuntimeError: fake: inductor failed to compile FlexAttention's backward"
    warnings = [log for log in logs if log["log_level"] == "warning"]
    assert [log["reason"] for log in warnings] == [packed_attention.flex_failure()]  # logged once
    calls = kernel.calls
    flex.run(request_items(), loss, backward=True)
    assert kernel.calls == calls  # the dense mask from then on


def test_a_probe_that_fails_in_backward_chooses_the_dense_mask_before_any_real_pass(
    trainer: TrainingClient, fresh_flex: Callable[[FakeKernel], None]
) -> None:
    trainer._trainer.model.zero_grad(set_to_none=True)
    want_lp, _, _ = engine(trainer, "dense").run(request_items(), loss, backward=True)
    want = grads(trainer)
    trainer._trainer.model.zero_grad(set_to_none=True)
    kernel = FakeKernel(fail_from=1)
    fresh_flex(kernel)
    with capture_logs() as logs:
        logprobs, _, _ = engine(trainer, "flex").run(request_items(), loss, backward=True)
    assert kernel.calls == 1  # the probe only
    assert packed_attention.flex_failure().startswith("FlexAttentionFailed: FlexAttention's probe failed: RuntimeError")
    assert sum(log["log_level"] == "warning" for log in logs) == 1
    assert_same(grads(trainer), want)
    for got, expected in zip(logprobs, want_lp, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_the_probe_rejects_a_kernel_that_computes_wrong_values(fresh_flex: Callable[[FakeKernel], None]) -> None:
    kernel = FakeKernel(ignore_mask=True)
    query, key = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
    with pytest.raises(packed_attention.FlexAttentionFailed, match="probe differs from the dense mask: .* off by"):
        prove(kernel, query, key, key, None)


def test_the_probe_runs_once_per_kind_of_input(fresh_flex: Callable[[FakeKernel], None]) -> None:
    kernel = FakeKernel()
    for heads, kv_heads in ((4, 2), (4, 2), (4, 4), (4, 2)):
        prove(kernel, torch.randn(1, heads, 8, 16), torch.randn(1, kv_heads, 8, 16), torch.randn(1, kv_heads, 8, 16), 0.25)
    assert kernel.calls == 2 and kernel.backward_calls == 2  # GQA 2:1, then 1:1


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_a_failure_that_is_not_flex_attentions_is_raised_and_leaves_the_gradients(
    trainer: TrainingClient, fresh_flex: Callable[[FakeKernel], None]
) -> None:
    fresh_flex(FakeKernel())
    flex = engine(trainer, "flex")
    flex.run(request_items(), loss, backward=True)
    before = grads(trainer)
    seen = []

    def bad_loss(lp: torch.Tensor, inputs: dict) -> torch.Tensor:
        seen.append(len(lp))
        if len(seen) % 2 == 0:  # the second micro-batch of each attempt: the first one's gradients are in already
            raise ValueError("a loss that breaks")
        return loss(lp, inputs)

    with pytest.raises(ValueError, match="a loss that breaks") as raised:
        flex.run(request_items(), bad_loss, backward=True)
    assert any("dense mask after FlexAttention failed" in note for note in raised.value.__notes__)
    assert_same(grads(trainer), before)
    assert packed_attention.flex_usable()  # the dense rerun failed too: not FlexAttention's fault


def test_a_custom_loss_that_raises_runs_once_and_keeps_flex_attention(
    trainer: TrainingClient, fresh_flex: Callable[[FakeKernel], None]
) -> None:
    kernel = FakeKernel()
    fresh_flex(kernel)
    trainer._trainer._passes.attention = "flex"
    calls = []

    def custom(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        calls.append(len(data))
        raise KeyError("the caller's own mistake")

    data = shared_prompt_data(30, (5, 12, 7), seed=4) + shared_prompt_data(0, (9, 23), seed=5)
    items = [submitted_datum(datum, i) for i, datum in enumerate(data)]
    with pytest.raises(KeyError, match="the caller's own mistake"):
        trainer._trainer.forward_backward_custom(data, items, custom)
    assert calls == [len(data)] and kernel.calls > 1  # its passes went through FlexAttention, and ran once
    assert packed_attention.flex_usable()


def test_block_mask_functions_capture_tensors_only() -> None:
    """No size of a batch is a Python constant the compiled kernel could guard on (compilation counts: the slow
    ``test_one_compilation_serves_packed_rows_of_every_shape_of_a_kind``)."""
    tokens = [torch.cat([rows(20, seed=1)[0], tail]) for tail in rows(3, 9, 5, seed=2)] + rows(7, 30, seed=3)
    for wave in plan_waves(tokens, [Group(20, [0, 1, 2]), Group(0, [3, 4])], tokens_per_pass=48):
        for batch in wave.micro_batches:
            mask = block_mask(batch.segment, batch.prefix_lengths, batch.width_prefix)
            captured = [cell.cell_contents for cell in mask.mask_mod.__closure__]
            assert captured and all(isinstance(value, torch.Tensor) for value in captured)


def test_a_custom_loss_whose_flex_backward_fails_runs_again_densely(
    trainer: TrainingClient, fresh_flex: Callable[[FakeKernel], None]
) -> None:
    data = shared_prompt_data(30, (5, 12, 7), seed=4) + shared_prompt_data(0, (9, 23), seed=5)
    items = [submitted_datum(datum, i) for i, datum in enumerate(data)]
    calls = []

    def custom(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        calls.append(len(data))
        return -sum((lp * (i + 1)).sum() for i, lp in enumerate(logprobs)), {"n": float(len(logprobs))}

    engine = trainer._trainer
    engine.model.zero_grad(set_to_none=True)
    want = engine.forward_backward_custom(data, items, custom)
    want_grads = grads(trainer)
    engine.model.zero_grad(set_to_none=True)
    fresh_flex(FakeKernel(fail_from=2))
    engine._passes.attention = "flex"
    got = engine.forward_backward_custom(data, items, custom)
    assert len(calls) == 3  # the dense reference, then the flex attempt and its dense rerun
    assert packed_attention.flex_failure() == "RuntimeError: fake: inductor failed to compile FlexAttention's backward"
    assert_same(grads(trainer), want_grads)
    assert got.metrics == {**want.metrics, "compile_fallbacks:sum": 1.0}  # the failed compile, counted
    for a, b in zip(got.loss_fn_outputs, want.loss_fn_outputs, strict=True):
        torch.testing.assert_close(a["logprobs"].to_torch(), b["logprobs"].to_torch(), rtol=0, atol=1e-5)


def mixed_request(seed: int, groups: int = 3) -> list[types.Datum]:
    """Groups of rollouts sharing a prompt (prompts of 20-300 tokens, completions of 2-400), and datums alone."""
    gen = torch.Generator().manual_seed(seed)
    draw = lambda low, high: int(torch.randint(low, high, (), generator=gen))
    data = []
    for _ in range(groups):
        prompt = torch.randint(0, 250, (draw(20, 300),), generator=gen).tolist()
        for _ in range(draw(2, 6)):
            tokens = prompt + torch.randint(0, 250, (draw(2, 400),), generator=gen).tolist()
            data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs={"target_tokens": tokens}))
    for _ in range(draw(1, 6)):
        tokens = torch.randint(0, 250, (draw(3, 500),), generator=gen).tolist()
        data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs={"target_tokens": tokens}))
    return data


def packed_batches(seeds: Iterable[int], budget: int = 2048) -> Iterator[MicroBatch]:
    """The micro-batches of a mixed request per seed: its groups sharing prompts (odd seeds), or all whole."""
    for seed in seeds:
        items = [submitted_datum(datum, i) for i, datum in enumerate(mixed_request(seed))]
        groups = shared_prefix_groups(items) if seed % 2 else [Group(0, list(range(len(items))))]
        for wave in plan_waves([item.tokens for item in items], groups, tokens_per_pass=budget):
            yield from wave.micro_batches


@pytest.mark.slow  # ~15 s: dynamo traces each kind of shape
def test_one_compilation_serves_packed_rows_of_every_shape_of_a_kind() -> None:
    """The settings of the CUDA kernel (``compile_flex``) with torch's eager backend: what dynamo compiles again
    for (guards on sizes, on what the mask function captures), counted on the CPU; the CUDA test counts the
    inductor kernels themselves."""
    kernel = compile_flex(backend="eager")
    before, shapes = counters["stats"]["unique_graphs"], set()
    for batch in packed_batches(range(4)):
        rows, width = batch.segment.shape
        shapes.add((rows, width, batch.width_prefix))
        mask = block_mask(batch.segment, batch.prefix_lengths, batch.width_prefix)
        q, kv = torch.randn(rows, 4, width, 16), torch.randn(rows, 2, batch.width_prefix + width, 16)
        with torch.no_grad():
            out = kernel(q, kv, kv, block_mask=mask, scale=0.25, enable_gqa=True)
        assert out.shape == q.shape and bool(out.isfinite().all())
    graphs = counters["stats"]["unique_graphs"] - before
    assert len(shapes) >= 10
    assert graphs <= 4, f"{graphs} compilations for {len(shapes)} shapes: {sorted(shapes)}"
