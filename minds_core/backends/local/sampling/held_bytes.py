"""Bytes of memory a set of tensors holds: what a sampler costs, counted from its real tensors.

Views share their base's storage, so storages are counted once each, whole; the storages of
``shared`` tensors (a frozen base model's weights, held whatever happens to a sampler) are left out.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["storage_bytes"]


def storage_bytes(tensors: Iterable[torch.Tensor], shared: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the distinct storages behind ``tensors``, less those behind ``shared``."""
    skipped = {_key(tensor) for tensor in shared}
    held: dict[tuple[str, int], int] = {}
    for tensor in tensors:
        key = _key(tensor)
        if key not in skipped and key[1]:  # an empty storage has no address and holds nothing
            held[key] = tensor.untyped_storage().nbytes()
    return sum(held.values())


def _key(tensor: torch.Tensor) -> tuple[str, int]:
    return str(tensor.device), tensor.untyped_storage().data_ptr()
