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
FlexAttention is compiled on CUDA. On the CPU it runs unfused and has no backward pass:
there a pass with gradients gets the block mask's dense form (so the CPU tests check
the block mask's gradients, and FlexAttention's log-probs without them), and the CPU
keeps the dense mask by default.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, create_mask, flex_attention
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from minds_core.logs import get_logger

__all__ = ["ATTENTION", "MODES", "block_mask", "packed_attention_mode"]

ATTENTION = "minds_packed"
"""The attention implementation base models load with (SDPA, and FlexAttention for block masks)."""

MODES = ("dense", "flex")
"""How training passes mask packed rows: a dense boolean mask (SDPA), or a FlexAttention block mask."""

log = get_logger("trainer")


def block_mask(segment: torch.Tensor, prefix_lengths: torch.Tensor, width_prefix: int) -> BlockMask:
    """The packed rows' attention as a block mask: query ``q`` of row ``b`` attends key ``kv`` when ``kv`` is one
    of the row's ``prefix_lengths[b]`` prefix keys (the first ``width_prefix`` keys hold prefixes), or a body key
    of the same datum (``segment``: ``[rows, width]``, each body's number, -1 for padding) not after ``q``."""
    rows, width = segment.shape

    def attends(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        key = kv - width_prefix
        body_key = key.clamp(min=0)
        in_body = (key >= 0) & (segment[b, q] == segment[b, body_key]) & (body_key <= q)
        return (kv < prefix_lengths[b]) | in_body

    return create_block_mask(attends, rows, None, width, width_prefix + width, device=segment.device)


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
        out = _flex(query, key, value, attention_mask, scaling)
        if out is not None:
            return out.transpose(1, 2).contiguous(), None
        attention_mask = _dense(attention_mask)
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


_failed: list[str] = []
"""Why FlexAttention failed in this process, once it has: packed rows take the dense mask from then on."""


def _flex(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: BlockMask, scaling: float | None
) -> torch.Tensor | None:
    """FlexAttention over ``mask``; None where it cannot run: a pass with gradients on the CPU (it has no backward
    there), or a process where it failed before (e.g. no compiler for its kernels; logged once)."""
    if _failed or (query.device.type == "cpu" and torch.is_grad_enabled()):
        return None
    try:
        return flex_kernel(query.device.type)(
            query, key, value, block_mask=mask, scale=scaling, enable_gqa=query.shape[1] != key.shape[1]
        )
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 (a kernel that cannot be built here: the dense mask serves instead)
        _failed.append(f"{type(exc).__name__}: {exc}"[:400])
        log.warning("FlexAttention failed: packed training rows use the dense mask from now on", reason=_failed[0])
        return None


def flex_kernel(device_type: str) -> Callable[..., torch.Tensor]:
    """FlexAttention for a device type: compiled on CUDA (once per process), unfused elsewhere."""
    return _compiled_flex() if device_type == "cuda" else flex_attention


def _dense(mask: BlockMask) -> torch.Tensor:
    """The boolean mask ``[rows, 1, queries, keys]`` a block mask stands for, element by element."""
    rows, _, queries, keys = mask.shape
    return create_mask(mask.mask_mod, rows, None, queries, keys, device=mask.kv_num_blocks.device)


@functools.cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    return torch.compile(flex_attention)


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
