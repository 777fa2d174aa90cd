"""Attention over packed rows without a dense mask: FlexAttention with a document mask, SDPA otherwise.

A packed training row holds several datums back to back; each token attends causally
within its own datum, and to its group's prefix keys (see ``packing``). As a dense
boolean mask that is ``rows x width x (prefix + width)`` and SDPA computes every
masked-out block anyway, so a pass grows with the square of its row width. The same
mask as a FlexAttention ``BlockMask`` skips the blocks no query attends.

Base models load with the attention implementation ``ATTENTION`` (registered here with
transformers): SDPA for every mask but a ``BlockMask``, which goes to FlexAttention.
Sampling and every other caller thus run exactly as under ``sdpa``; only the training
passes that ask for it (``Placement.packed_attention == "flex"``) build block masks.
FlexAttention is compiled on CUDA, once per process for each kind of packed-row shape,
not per shape (sizes compiled as symbols, a mask function that reads tensors only). Before a pass
with gradients first uses it on a kind of input (dtype, head counts and sizes), a small
probe runs it forward and backward against SDPA (``prove``): a kernel that fails to
compile (inductor compiles the backward only at the first backward pass) or computes
wrong values fails there, before any gradient is added. Whatever fails in a pass with
block masks, probe or not, ``passes.LossPasses.falling_back`` takes its gradients back
and runs the request again with the dense mask, which then serves the process
(``disable_flex``, logged once). On the CPU FlexAttention runs unfused and has no
backward pass: there a pass with gradients gets the block mask's dense form (so the
CPU tests check the block mask's gradients, and FlexAttention's log-probs without
them), and the CPU keeps the dense mask by default.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, create_mask, flex_attention
from torch.nn.functional import scaled_dot_product_attention
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from minds_core.base.logs import get_logger

from .accelerator import EVENTS

__all__ = [
    "ATTENTION",
    "MODES",
    "FlexAttentionFailed",
    "block_mask",
    "compile_flex",
    "disable_flex",
    "flex_failure",
    "flex_kernel",
    "flex_usable",
    "packed_attention_mode",
    "prove",
]

ATTENTION = "minds_packed"
"""The attention implementation base models load with (SDPA, and FlexAttention for block masks)."""

MODES = ("dense", "flex")
"""How training passes mask packed rows: a dense boolean mask (SDPA), or a FlexAttention block mask."""

log = get_logger("trainer")


def block_mask(segment: torch.Tensor, prefix_lengths: torch.Tensor, width_prefix: int) -> BlockMask:
    """The packed rows' attention as a block mask: query ``q`` of row ``b`` attends key ``kv`` when ``kv`` is one
    of the row's ``prefix_lengths[b]`` prefix keys (the first ``width_prefix`` keys hold prefixes), or a body key
    of the same datum (``segment``: ``[rows, width]``, each body's number, -1 for padding) not after ``q``.

    The mask function reads tensors only: no number of this batch is a Python constant that the compiled kernel,
    which guards on what the function captures, could specialise on (see ``compile_flex``)."""
    rows, width = segment.shape
    column = torch.arange(-width_prefix, width, device=segment.device)  # each key's body column (prefix: < 0)
    prefix_end = prefix_lengths - width_prefix  # a key whose column is below this is one of the row's prefix

    def attends(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        key = column[kv]
        body_key = key.clamp(min=0)
        in_body = (key >= 0) & (segment[b, q] == segment[b, body_key]) & (body_key <= q)
        return (key < prefix_end[b]) | in_body

    return create_block_mask(attends, rows, None, width, width_prefix + width, device=segment.device)


class FlexAttentionFailed(RuntimeError):
    """FlexAttention cannot serve packed rows here: its probe failed (see ``prove``)."""


def flex_usable() -> bool:
    """Whether packed rows may still use FlexAttention in this process (False once it has failed)."""
    return not _failure


def flex_failure() -> str | None:
    """Why FlexAttention failed in this process (None while it has not)."""
    return _failure[0] if _failure else None


def disable_flex(error: BaseException) -> None:
    """Record that FlexAttention failed with ``error``: packed rows take the dense mask for the rest of the
    process (logged once)."""
    if not _failure:
        _failure.append(f"{type(error).__name__}: {error}"[:400])
        EVENTS.count("compile_fallbacks")
        log.warning(
            "FlexAttention failed: packed training rows use the dense mask from now on", reason=_failure[0],
            off='set local.compile = "off" to compile nothing',
        )  # fmt: skip


_failure: list[str] = []
"""Why FlexAttention failed in this process, once it has."""

_proven: set[tuple[object, ...]] = set()
"""What ``prove`` has checked in this process: device, dtype, heads, key/value heads, head dims, scale, autocast."""


def _attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | BlockMask | None,
    scaling: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' attention signature: ``[batch, heads, tokens, dim]`` in, ``[batch, tokens, heads, dim]`` out."""
    if isinstance(attention_mask, BlockMask):
        kernel = flex_kernel(query.device.type, torch.is_grad_enabled()) if flex_usable() else None
        if kernel is not None:
            if torch.is_grad_enabled():
                prove(kernel, query, key, value, scaling)
            out = kernel(query, key, value, block_mask=attention_mask, scale=scaling, enable_gqa=_gqa(query, key))
            return out.transpose(1, 2).contiguous(), None
        attention_mask = _dense(attention_mask)
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


def flex_kernel(device_type: str, grad: bool) -> Callable[..., torch.Tensor] | None:
    """FlexAttention for a device type: compiled on CUDA (once per process, see ``compile_flex``); unfused
    elsewhere, where it has no backward pass (None with ``grad``)."""
    if device_type == "cuda":
        return _compiled_flex()
    return None if grad else flex_attention


def compile_flex(backend: str = "inductor") -> Callable[..., torch.Tensor]:
    """FlexAttention compiled for packed rows: sizes as symbols from the first call on (``dynamic``), so that a new
    row count, width or prefix width reuses the compiled kernel; it compiles again only for a new kind of shape
    (torch specialises sizes of 1, e.g. a single row, and equal sizes, e.g. rows without a prefix). ``backend``:
    inductor for the fused kernels; tests count compilations with others."""
    return torch.compile(flex_attention, backend=backend, dynamic=True, fullgraph=True)


@functools.cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    return compile_flex()


PROBE_SEGMENTS = ((0,) * 100 + (1,) * 80 + (-1,) * 12, (2,) * 150 + (3,) * 42)
"""The probe's packed rows: two datums and padding, and a datum filling its row, each after a prefix."""
PROBE_PREFIXES = (64, 40)
"""The probe's prefix lengths (the first row's fills the prefix width, the second's leaves padding)."""


def prove(
    kernel: Callable[..., torch.Tensor],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scaling: float | None,
) -> None:
    """Check once per process and kind of input (dtype, head counts and sizes, scale, autocast) that ``kernel``
    runs forward and backward on a block mask built by ``block_mask`` and agrees with SDPA over its dense form
    within the dtype's tolerance; raise ``FlexAttentionFailed`` saying why where it does not. A new kind of input
    compiles the kernel (its backward lazily, at the first backward pass): the probe makes that happen here, on
    small tensors, before any pass has added gradients."""
    device = query.device
    autocast = torch.is_autocast_enabled(device.type)
    spec = (device, query.dtype, query.shape[1], key.shape[1], query.shape[-1], value.shape[-1], scaling, autocast)
    if spec in _proven:
        return
    segment = torch.tensor(PROBE_SEGMENTS, device=device)
    width_prefix = max(PROBE_PREFIXES)
    mask = block_mask(segment, torch.tensor(PROBE_PREFIXES, device=device), width_prefix)
    gen = torch.Generator(device).manual_seed(0)
    rows, width = segment.shape

    def tensor(heads: int, tokens: int, dim: int) -> torch.Tensor:
        return torch.randn(rows, heads, tokens, dim, generator=gen, device=device).to(query.dtype)

    inputs = (
        tensor(query.shape[1], width, query.shape[-1]),
        tensor(key.shape[1], width_prefix + width, key.shape[-1]),
        tensor(value.shape[1], width_prefix + width, value.shape[-1]),
    )
    grad_out = tensor(query.shape[1], width, value.shape[-1])
    gqa = _gqa(query, key)
    with torch.enable_grad():
        try:
            leaves = [t.clone().requires_grad_() for t in inputs]
            out = kernel(*leaves, block_mask=mask, scale=scaling, enable_gqa=gqa)
            got = (out.detach(), *torch.autograd.grad(out, leaves, grad_out))
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            raise FlexAttentionFailed(f"FlexAttention's probe failed: {type(exc).__name__}: {exc}"[:400]) from exc
        with torch.autocast(device.type, enabled=False):
            leaves = [t.float().requires_grad_() for t in inputs]
            out = scaled_dot_product_attention(*leaves, attn_mask=_dense(mask), scale=scaling, enable_gqa=gqa)
            want = (out.detach(), *torch.autograd.grad(out, leaves, grad_out.float()))
    tolerance = max(8 * torch.finfo(query.dtype).eps, 1e-4)
    errors = torch.stack([(g.float() - w).abs().max() / w.abs().max().clamp(min=1) for g, w in zip(got, want, strict=True)])
    worst = float(errors.max())  # one host sync, once per kind of input
    if not worst <= tolerance:
        names = ("output", "query gradient", "key gradient", "value gradient")
        raise FlexAttentionFailed(
            f"FlexAttention's probe differs from the dense mask: {names[int(errors.argmax())]} off by {worst:.3g} "
            f"of its largest value (tolerance {tolerance:.3g})"
        )
    _proven.add(spec)


def _gqa(query: torch.Tensor, key: torch.Tensor) -> bool:
    return query.shape[1] != key.shape[1]


def _dense(mask: BlockMask) -> torch.Tensor:
    """The boolean mask ``[rows, 1, queries, keys]`` a block mask stands for, element by element."""
    rows, _, queries, keys = mask.shape
    return create_mask(mask.mask_mod, rows, None, queries, keys, device=mask.kv_num_blocks.device)


@functools.cache
def packed_attention_mode(device_type: str) -> str:
    """The mode of packed-row attention on a device type, chosen once per process and logged once: FlexAttention
    on CUDA where triton is installed (it compiles there), else the dense mask."""
    try:
        import triton  # noqa: F401  (FlexAttention's CUDA kernels are triton's)
    except ImportError:
        has_triton = False
    else:
        has_triton = True
    mode = "flex" if device_type == "cuda" and has_triton else "dense"
    (log.info if device_type == "cuda" else log.debug)("packed training rows attend", mode=mode, device=device_type)
    return mode


AttentionInterface.register(ATTENTION, _attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)
