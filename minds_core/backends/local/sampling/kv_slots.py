"""Keys and values of a decode batch's slots, preallocated at fixed addresses (what a CUDA graph replays over).

A slot holds one sequence; ``positions[slot]`` is its length so far, where its
next token's key/value goes. A decode step over the first ``rows`` slots
writes each row's new key/value at that row's own position (an index per row,
read from the device: no Python int per row), and attends over the first
``columns`` positions under a mask hiding what lies past each row's position.
Keys are stored transposed (``[slots, heads, head_dim, capacity]``), so that
a step's scores ``q @ k^T`` read them in the layout a matrix product wants.
The tensors never move while the batch runs: rows join by having a prompt's
keys/values copied into free slots, and leave by being overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from transformers.cache_utils import Cache

__all__ = ["KVSlots"]


class _Window(NamedTuple):
    """Views of one step shape: the rows' positions (also as scatter indices into their keys and values), the
    columns, each layer's rows of keys and values (whole, and in the window)."""

    positions: torch.Tensor
    key_index: torch.Tensor
    value_index: torch.Tensor
    columns: torch.Tensor
    rows_keys: list[torch.Tensor]
    rows_values: list[torch.Tensor]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


class KVSlots(Cache):
    """Per-layer keys ``[slots, heads, head_dim, capacity]`` (transposed) and values ``[slots, heads, capacity,
    head_dim]``, with each slot's length in ``positions``; see the module doc."""

    def __init__(
        self, layers: int, heads: int, head_dim: int, slots: int, capacity: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(layers=[])
        self.keys = [torch.zeros(slots, heads, head_dim, capacity, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(slots, heads, capacity, head_dim, dtype=dtype, device=device) for _ in range(layers)]
        self.positions = torch.zeros(slots, dtype=torch.int64, device=device)
        self.column_index = torch.arange(capacity, device=device)
        self.rows = self.columns = 0
        self.aligned = False  # every live row of the window is at position ``columns - 1``: nothing to mask
        self._window: _Window | None = None
        self._windows: dict[tuple[int, int], _Window] = {}

    @property
    def slots(self) -> int:
        """Sequences the buffers hold at most."""
        return len(self.positions)

    @property
    def capacity(self) -> int:
        """Positions per slot."""
        return len(self.column_index)

    @property
    def bytes_per_position(self) -> int:
        """Bytes of keys and values one position of one slot takes."""
        total = sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))
        return total // (self.slots * self.capacity)

    def held(self) -> tuple[torch.Tensor, ...]:
        """Every tensor these slots hold (the windows are views of them)."""
        return (*self.keys, *self.values, self.positions, self.column_index)

    def window(self, rows: int, columns: int, aligned: bool = False) -> None:
        """Fix the next step's shape: slots ``0 .. rows - 1``, attending over positions ``0 .. columns - 1``;
        ``aligned``: every row that goes on is at position ``columns - 1`` (the samples of one prompt), so that
        no mask is needed (rows that stopped compute on garbage, unread).
        (The window's views are made once per shape: a CPU step pays for every tensor op.)"""
        self.rows, self.columns, self.aligned = rows, columns, aligned
        views = self._windows.get((rows, columns))
        if views is None:
            heads, head_dim = self.values[0].shape[1], self.values[0].shape[3]
            positions = self.positions[:rows]
            views = self._windows[(rows, columns)] = _Window(
                positions,
                positions[:, None, None, None].expand(rows, heads, head_dim, 1),
                positions[:, None, None, None].expand(rows, heads, 1, head_dim),
                self.column_index[:columns],
                [keys[:rows] for keys in self.keys],
                [values[:rows] for values in self.values],
                [keys[:rows, :, :, :columns].transpose(-1, -2) for keys in self.keys],
                [values[:rows, :, :columns] for values in self.values],
            )
        self._window = views

    def mask(self, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask ``[rows, columns]`` of the window: 0 up to each row's position (its new token), then -inf."""
        assert self._window is not None, "window first"
        hidden = self._window.columns > self._window.positions[:, None]
        return torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill_(hidden, torch.finfo(dtype).min)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one token per row (``[rows, heads, 1, head_dim]``) at the row's position; the window's keys and
        values, both ``[rows, heads, columns, head_dim]`` (views: the keys' ``transpose(-1, -2)`` is the stored
        layout). ``window`` fixes the rows and columns."""
        assert self._window is not None, "window first"
        window = self._window
        window.rows_keys[layer_idx].scatter_(3, window.key_index, key_states.transpose(-1, -2))
        window.rows_values[layer_idx].scatter_(2, window.value_index, value_states)
        return window.keys[layer_idx], window.values[layer_idx]

    def advance(self, fed: torch.Tensor) -> None:
        """Each row of the window whose ``fed`` is true got its token: its position moves on."""
        assert self._window is not None, "window first"
        self._window.positions.add_(fed)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Positions before the window's last column (what a model forward counts as already cached)."""
        return max(self.columns - 1, 0)

    def fill(self, slots: torch.Tensor, prompt_kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Copy one prompt's keys/values (``[1, heads, P, head_dim]`` per layer) into each of ``slots``."""
        length = prompt_kv[0][0].shape[-2]
        for layer, (k, v) in enumerate(prompt_kv):
            self.keys[layer][slots, :, :, :length] = k.transpose(-1, -2).to(self.keys[layer].dtype)
            self.values[layer][slots, :, :length] = v.to(self.values[layer].dtype)
        self.positions[slots] = length

    def move(self, source: torch.Tensor, target: torch.Tensor) -> None:
        """Copy slots ``source`` onto slots ``target`` (a compaction: the batch then runs in fewer rows)."""
        for tensor in (*self.keys, *self.values, self.positions):
            tensor[target] = tensor[source]

    def copy_from(self, old: KVSlots) -> None:
        """Take over the contents of an ``old`` buffer with no more slots or positions (growing)."""
        for new, kept in zip((*self.keys, *self.values, self.positions), (*old.keys, *old.values, old.positions), strict=True):
            new[tuple(map(slice, kept.shape))] = kept
