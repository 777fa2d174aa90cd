"""FlexAttention compiled on a CUDA GPU for packed training rows: the probe, agreement with the dense mask
(forward and backward), and one compilation serving packed rows of every shape. Skipped where torch sees no
GPU (the fallback logic runs on the CPU with fake kernels in ``test_flex_fallback.py``)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from minds_core.backends.local import TrainingClient
from minds_core.backends.local.model import packed_attention
from minds_core.backends.local.model.packed_attention import block_mask, flex_kernel, prove
from minds_core.backends.local.model.placement import resolve_placement
from minds_core.backends.local.training.datums import submitted_datum
from minds_core.backends.local.training.passes import LossPasses

from .test_cuda import gpu_service, gpu_trainer  # noqa: F401 - fixtures used here
from .test_flex_fallback import mixed_request, packed_batches

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def compiled_graphs() -> int:
    return counters["stats"]["unique_graphs"]


def test_the_probe_passes_at_the_qwen3_shapes_in_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 query heads, 8 key/value heads of 128 dims (Qwen3-0.6B and 1.7B), as the passes run them: autocast. The
    record of proven kinds starts empty, so the probe runs here whatever ran before in the process."""
    monkeypatch.setattr(packed_attention, "_proven", set())
    kernel = flex_kernel("cuda", True)
    query = torch.empty(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    key = torch.empty(1, 8, 1, 128, device="cuda", dtype=torch.bfloat16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        prove(kernel, query, key, key, 128**-0.5)
    assert packed_attention._proven == {(query.device, torch.bfloat16, 16, 8, 128, 128, 128**-0.5, True)}


def test_flex_attention_trains_like_the_dense_mask_and_never_falls_back(gpu_trainer: TrainingClient) -> None:  # noqa: F811
    placement = resolve_placement("cuda")
    model = gpu_trainer._trainer.model
    items = [submitted_datum(datum, i) for i, datum in enumerate(mixed_request(seed=1))]
    results = []
    for attention in ("flex", "dense"):
        model.zero_grad(set_to_none=True)
        passes = LossPasses(
            model, compute_dtype=placement.dtype, tokens_per_micro_batch=2048, share_prefixes=True, attention=attention
        )
        logprobs, _, _ = passes.run(items, lambda lp, inputs: -lp.sum() / 1e3, backward=True)
        results.append((logprobs, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
        assert packed_attention.flex_failure() is None  # flex really ran: no dense rerun behind the result
    (flex_lp, flex_grads), (dense_lp, dense_grads) = results
    for got, want in zip(flex_lp, dense_lp, strict=True):
        error = (got - want).abs()
        assert float(error.max()) < 0.2 and float(error.mean()) < 0.03
    assert flex_grads.keys() == dense_grads.keys() and flex_grads
    for key, want in dense_grads.items():
        torch.testing.assert_close(flex_grads[key], want, rtol=0, atol=2e-2 * float(want.abs().max()) + 1e-6, msg=key)


def test_packed_rows_of_new_shapes_reuse_the_compiled_kernel() -> None:
    """Forward and backward over block masks of many packed shapes (rows, width, prefix width): the kernel
    compiles once per kind of shape (a single row or several, a prefix or none), not once per shape. The heads,
    head size and scale are minds-tiny's (run alone, this test compiles for them; after the test above, which
    trains minds-tiny, most kinds are compiled already)."""
    kernel = flex_kernel("cuda", True)
    gen = torch.Generator().manual_seed(3)
    shapes, before = set(), compiled_graphs()

    def random(rows: int, heads: int, tokens: int) -> torch.Tensor:
        return torch.randn(rows, heads, tokens, 16, generator=gen).to("cuda", torch.bfloat16).requires_grad_()

    with torch.autocast("cuda", dtype=torch.bfloat16):
        for batch in packed_batches(range(8)):
            segment, prefixes = batch.segment.cuda(), batch.prefix_lengths.cuda()
            rows, width = segment.shape
            shapes.add((rows, width, batch.width_prefix))
            mask = block_mask(segment, prefixes, batch.width_prefix)
            q = random(rows, 4, width)
            kv = [random(rows, 2, batch.width_prefix + width) for _ in range(2)]
            out = kernel(q, *kv, block_mask=mask, scale=0.25, enable_gqa=True)
            out.float().square().mean().backward()
            assert all(t.grad is not None and bool(t.grad.isfinite().all()) for t in (q, *kv))
    graphs = compiled_graphs() - before
    assert len(shapes) >= 10, shapes
    assert graphs <= 4, f"{graphs} compilations for {len(shapes)} shapes: {sorted(shapes)}"
