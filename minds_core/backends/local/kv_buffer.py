"""A preallocated key/value cache whose rows sit at positions of their own (continuous batching).

Every row of a decode batch is one sequence; row ``r`` holds ``lengths[r]``
tokens. A decode step writes each row's new key/value at its own next
position, in place (no concatenation per token), and attends over the first
``max(lengths) + 1`` columns under a mask that hides each row's unused tail.
Keys are stored transposed (``[rows, heads, head_dim, capacity]``), so that a
decode step's scores ``q @ k^T`` read them in the layout a matrix product wants
(about twice as fast as transposing on the fly, for one query per row). While
every row has the same length (the samples of one prompt), a step writes one
column of all rows by slicing and needs no mask.
Rows join (a request's prefilled prompt, copied in) and leave (finished
sequences, compacted out) between steps. The rows grow by doubling; the positions grow to the longest
row's need, and a reallocation for them keeps only the rows in use.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache

__all__ = ["KVBuffer"]


class KVBuffer(Cache):
    """Per-layer keys ``[rows, heads, head_dim, capacity]`` (transposed) and values ``[rows, heads, capacity,
    head_dim]``, filled row by row; see the module doc."""

    def __init__(self) -> None:
        super().__init__(layers=[])
        self.keys: list[torch.Tensor] = []  # transposed: [rows, heads, head_dim, capacity]
        self.values: list[torch.Tensor] = []
        self.lengths = torch.zeros(0, dtype=torch.int64)
        self._longest = 0  # max(lengths), kept here: reading it off the tensor would cost a sync per step
        self._shortest = 0  # min(lengths), likewise
        self._columns = 0
        self._row_index = self._columns_index = self.lengths

    @property
    def rows(self) -> int:
        """Sequences in the batch."""
        return len(self.lengths)

    @property
    def uniform_length(self) -> int | None:
        """The length of every row when all rows have the same one, else None."""
        return self._longest if self._shortest == self._longest and self.rows else None

    def add(self, prompt_kv: Sequence[tuple[torch.Tensor, torch.Tensor]], copies: int, room: int) -> None:
        """Append ``copies`` rows holding one prompt's keys/values (``[1, heads, P, head_dim]`` per layer).

        ``room``: the positions those rows will need in all (prompt plus the tokens fed back).
        """
        length = prompt_kv[0][0].shape[-2]
        start = self.rows
        self._reserve(start + copies, max(room, length), prompt_kv)
        for layer, (k, v) in enumerate(prompt_kv):
            self.keys[layer][start : start + copies, :, :, :length] = k.transpose(-1, -2)
            self.values[layer][start : start + copies, :, :length] = v
        added = torch.full((copies,), length, dtype=torch.int64, device=self.lengths.device)
        self.lengths = torch.cat([self.lengths, added])
        self._shortest = min(self._shortest, length) if start else length
        self._longest = max(self._longest, length)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (in that order), moved to the front."""
        for tensors in (self.keys, self.values):
            for layer, tensor in enumerate(tensors):
                tensor[: len(rows)] = tensor[rows]
        self.lengths = self.lengths[rows.to(self.lengths.device)]
        self._longest = int(self.lengths.max()) if len(rows) else 0
        self._shortest = int(self.lengths.min()) if len(rows) else 0

    def step_inputs(self, dtype: torch.dtype, need_mask: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``position_ids [rows, 1]`` of the next token, and the mask as transformers takes it: additive,
        ``[rows, 1, 1, columns]``, hiding what lies past each row's own length (None when it would hide
        nothing and ``need_mask`` is off: every row has the same length). Fixes the step's rows and
        columns for ``update``."""
        self._columns = columns = self._longest + 1
        if not need_mask and self.uniform_length is not None:
            return self.lengths[:, None], None
        if len(self._row_index) != self.rows:
            self._row_index = torch.arange(self.rows, device=self.lengths.device)
        if len(self._columns_index) < columns:  # doubling when outgrown, never because rows came or left
            self._columns_index = torch.arange(max(columns, 2 * len(self._columns_index)), device=self.lengths.device)
        hidden = self._columns_index[:columns] > self.lengths[:, None]
        mask = torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill_(hidden, torch.finfo(dtype).min)
        return self.lengths[:, None], mask[:, None, None, :]

    def advance(self) -> None:
        """Every row got its token of this step."""
        self.lengths += 1
        self._longest += 1
        self._shortest += 1

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one token per row at that row's position; the keys/values to attend over, both
        ``[rows, heads, columns, head_dim]`` (views: the keys' ``transpose(-1, -2)`` is the stored layout).

        Call ``step_inputs`` first: it fixes the step's rows and columns.
        """
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        length = self.uniform_length
        if length is not None:  # one column of every row: a slice, not an index per row
            keys[: self.rows, :, :, length] = key_states[:, :, 0]
            values[: self.rows, :, length] = value_states[:, :, 0]
        else:
            keys[self._row_index, :, :, self.lengths] = key_states[:, :, 0]
            values[self._row_index, :, self.lengths] = value_states[:, :, 0]
        return keys[: self.rows, :, :, : self._columns].transpose(-1, -2), values[: self.rows, :, : self._columns]

    @property
    def allocated_bytes(self) -> int:
        """Bytes this buffer holds: keys, values and its index tensors."""
        tensors = {id(t): t for t in (*self.keys, *self.values, self.lengths, self._row_index, self._columns_index)}
        return sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Columns in use (the longest row)."""
        return self._longest

    def _reserve(self, rows: int, length: int, like: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        capacity_rows = self.keys[0].shape[0] if self.keys else 0
        capacity_length = self.values[0].shape[2] if self.values else 0
        if rows <= capacity_rows and length <= capacity_length:
            return
        # Rows double when outgrown; a reallocation for a longer row alone keeps just the rows in use.
        new_rows = max(rows, 2 * capacity_rows) if rows > capacity_rows else rows
        new_length = max(length, capacity_length)
        for tensors, index, axis in ((self.keys, 0, 3), (self.values, 1, 2)):  # axis: the one along positions
            for layer, pair in enumerate(like):
                heads, dim = pair[index].shape[1], pair[index].shape[3]
                shape = (new_rows, heads, dim, new_length) if index == 0 else (new_rows, heads, new_length, dim)
                grown = pair[index].new_zeros(shape)
                if layer < len(tensors):
                    old = tensors[layer]
                    grown[: self.rows].narrow(axis, 0, old.shape[axis]).copy_(old[: self.rows])
                    tensors[layer] = grown
                else:
                    tensors.append(grown)
        self.lengths = self.lengths.to(like[0][0].device)
