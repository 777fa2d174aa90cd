"""Sibling linear layers' weights back to back in one buffer, so that layers reading one input are one product.

The linear layers directly under one parent module (a layer's q/k/v/o
projections; its MLP's gate/up projections) that read inputs of the same width,
in one dtype on one device, form a group. ``lay_out`` gives a group one buffer
``[sum of out features, in features]`` holding the weights in module order, and
makes each layer's ``weight`` a view into it (a Parameter over the same memory:
no second copy of the weights). Everything that reads or writes a layer's
weight in place (``F.linear``, peft's base layer, a merge's ``copy_``) works as
before; what reads a group of them can use ``joined``: one view over all of the
weights, a single matrix product where there were one per layer.

Laid out ``transposed``, the buffer is ``[in features, sum of out features]``
and each weight the transpose of a block of its columns. ``F.linear`` then
multiplies by a row-major ``[in, out]`` matrix, which MKL does about twice as
fast as by the transpose of an ``[out, in]`` one when few rows come in (8 rows
of a decode step, at 64 to 1536 features), and as fast for many (a prompt's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

__all__ = ["joined", "lay_out", "sibling_groups"]


def sibling_groups(model: nn.Module, names: Iterable[str] | None = None) -> list[list[nn.Linear]]:
    """The linear layers ``names`` of ``model`` (default: every one whose weight no other module shares, such as
    an unembedding tied to the embedding) grouped by parent module, input width, dtype and device, in module order
    (a layer without such a sibling is a group of one)."""
    if names is None:
        uses: dict[int, int] = {}
        for _, param in model.named_parameters(remove_duplicate=False):
            uses[id(param)] = uses.get(id(param), 0) + 1
        names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and uses[id(m.weight)] == 1]
    groups: dict[tuple[str, int, torch.dtype, torch.device], list[nn.Linear]] = {}
    for name in names:
        module = model.get_submodule(name)
        if not isinstance(module, nn.Linear):
            raise TypeError(f"{name!r} is a {type(module).__name__}, not a linear layer")
        parent = name.rpartition(".")[0]
        weight = module.weight
        groups.setdefault((parent, weight.shape[1], weight.dtype, weight.device), []).append(module)
    return list(groups.values())


@torch.no_grad()
def lay_out(
    group: Sequence[nn.Linear], device: torch.device | None = None, *, trainable: bool = False, transposed: bool = False
) -> None:
    """Give the layers of ``group`` (one of ``sibling_groups``) weights in one new buffer on ``device`` (default:
    theirs), back to back in order: each ``weight`` a Parameter viewing its rows (``transposed``: the transpose of
    its columns; see the module doc), holding the values it had; frozen (LoRA trains factors beside a weight, never
    the weight itself) unless ``trainable`` (LoRA factors: ``joined_lora``)."""
    first = group[0].weight
    total, width = sum(module.weight.shape[0] for module in group), first.shape[1]
    buffer = first.new_empty((width, total) if transposed else (total, width), device=device)
    start = 0
    for module in group:
        weight = module.weight
        block = buffer[:, start : start + weight.shape[0]].t() if transposed else buffer[start : start + weight.shape[0]]
        block.copy_(weight)
        module.weight = nn.Parameter(block, requires_grad=trainable)
        start += weight.shape[0]


def joined(weights: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """One view ``[sum of rows, in]`` over ``weights`` where they lie back to back in one storage as ``lay_out``
    leaves them (each contiguous, starting where the one before ends; or, ``transposed``, each the transpose of the
    columns after the one before's), all of one input width and dtype, else None. The view reads the same memory:
    later in-place writes to any of the weights show through it."""
    first = weights[0]
    if any(weight.dim() != 2 for weight in weights):
        return None
    total, width = sum(weight.shape[0] for weight in weights), first.shape[1]
    transposed = first.stride(0) == 1 and first.stride(1) >= total  # columns of a buffer that wide at least
    strides = (1, first.stride(1)) if transposed else (width, 1)
    storage, offset = first.untyped_storage().data_ptr(), first.storage_offset()
    for weight in weights:
        if (
            weight.untyped_storage().data_ptr() != storage
            or weight.storage_offset() != offset
            or weight.stride() != strides
            or weight.shape[1] != width
            or weight.dtype != first.dtype
        ):
            return None
        offset += weight.shape[0] * strides[0]
    return first.detach().as_strided((total, width), strides)
