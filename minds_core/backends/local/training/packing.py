"""How a request's datums are laid out for the forward passes: shared prefixes, packed rows, micro-batches.

Token ``t`` of datum ``d`` has the request-flat index ``offsets[d] + t`` (the datums'
tokens back to back in request order); every index here is into that order, into the
flattened rows of a pass, or into a pass's log-probs.

A *wave* runs the members of some groups (datums sharing a prompt, see ``passes``)
after one prefix pass holding each group's prefix in a row of its own; the datums
sharing nothing form a wave without a prefix. The rest of each datum (its *body*,
all of it when it shares nothing) is packed back to back into rows as wide as the
wave's longest body or prefix, with no padding between datums; a row holds bodies
of one group, so that it carries that group's prefix keys/values once for all of
them. Each body token attends causally within its own datum and to its group's
prefix (a block-diagonal mask), and carries its position in the datum.

The token budget bounds what a pass holds at once: a prefix pass takes at most half
of it, and the micro-batches that continue it take rows while their tokens fit the
rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TypeVar

import torch

__all__ = ["Group", "MicroBatch", "PrefixPass", "Wave", "plan_waves"]

_Tensors = TypeVar("_Tensors", "PrefixPass", "MicroBatch")


@dataclass(frozen=True)
class Group:
    """Datums ``members`` (request indices) whose first ``prefix`` tokens are equal (``prefix`` 0: none shared)."""

    prefix: int
    members: list[int]


@dataclass(frozen=True)
class PrefixPass:
    """The shared prefixes of a wave's groups, one group per row, right-padded to the longest (``width``)."""

    input_ids: torch.Tensor
    """``[groups, width]`` int64: each group's prefix tokens (its first member's), then zeros."""
    hidden_index: torch.Tensor
    """``[prefix tokens]``: where each real prefix token sits in the flattened ``[groups * width]`` hidden states."""
    target_index: torch.Tensor
    """``[prefix tokens, members]``: the request-flat index whose target each member scores at that position
    (the widest group sets ``members``; narrower groups repeat their first member's index, unused)."""


@dataclass(frozen=True)
class MicroBatch:
    """One forward (and backward) pass over packed rows of datum bodies."""

    input_ids: torch.Tensor
    """``[rows, width]`` int64 tokens; rows end in zeros where their datums fall short of ``width``."""
    position_ids: torch.Tensor
    """``[rows, width]``: each token's position in its datum (the first body token of a member is at ``prefix``)."""
    segment: torch.Tensor
    """``[rows, width]``: which body of the batch each token belongs to (0, 1, ... across rows); -1 for padding."""
    prefix_lengths: torch.Tensor
    """``[rows]``: the prefix length of the group each row continues (0 in a wave without a prefix)."""
    width_prefix: int
    """The prefix pass's width: the keys of each row's prefix come first, padded to this many."""
    plain: bool
    """Whether plain causal attention (after the whole prefix, if any) is already right: one datum filling each
    row, every prefix full. Then no mask is needed."""
    row_prefix: torch.Tensor
    """``[rows]``: the prefix-pass row (group) each row continues; zeros in a wave without a prefix."""
    body_index: torch.Tensor
    """``[body tokens]``: where each datum-body token sits in the flattened ``[rows * width]`` hidden states."""
    body_targets: torch.Tensor
    """``[body tokens]``: the request-flat index of each body token (its target and loss inputs)."""
    source_index: torch.Tensor
    """``[tokens]``: for every token of this batch's datums, in request-flat order, its log-prob's place in
    ``cat(prefix log-probs flattened [prefix tokens * members], body log-probs [body tokens])``."""
    flat_index: torch.Tensor
    """``[tokens]``: the request-flat index of those tokens (ascending)."""
    datum_index: torch.Tensor
    """``[tokens]``: which of this batch's datums each of those tokens belongs to (0, 1, ... in request order)."""

    @property
    def attention_mask(self) -> torch.Tensor | None:
        """``[rows, 1, width, width_prefix + width]`` bool, True where a query attends a key (block-diagonal causal
        attention after each row's prefix), on the batch's device; None when ``plain``."""
        return None if self.plain else _mask(self.segment, self.prefix_lengths, self.width_prefix)


@dataclass(frozen=True)
class Wave:
    """A prefix pass (None: nothing shared) and the micro-batches that continue it."""

    prefix: PrefixPass | None
    micro_batches: list[MicroBatch]

    def to(self, device: torch.device) -> Wave:
        """This wave with every tensor on ``device``."""
        return Wave(self.prefix and _to(self.prefix, device), [_to(batch, device) for batch in self.micro_batches])


def _to(layout: _Tensors, device: torch.device) -> _Tensors:
    moved = {
        f.name: value.to(device, non_blocking=True)
        for f in fields(layout)
        if isinstance(value := getattr(layout, f.name), torch.Tensor)
    }
    return replace(layout, **moved)


@dataclass(frozen=True)
class _Body:
    datum: int
    start: int  # the first token of the datum this body runs: its group's prefix length
    length: int
    slot: int  # the prefix-pass row of its group (0 in a wave without a prefix)


def plan_waves(tokens: Sequence[torch.Tensor], groups: Sequence[Group], tokens_per_pass: int) -> list[Wave]:
    """The passes running the datums of input ``tokens`` in ``groups``, each pass within ``tokens_per_pass``
    padded tokens where a single datum allows it."""
    lengths = [len(row) for row in tokens]
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    shared = sorted((g for g in groups if g.prefix), key=lambda g: g.prefix)
    waves: list[list[Group]] = []
    for group in shared:  # as many groups per prefix pass as fit half the budget (rows x longest prefix)
        if waves and (len(waves[-1]) + 1) * group.prefix <= tokens_per_pass // 2:
            waves[-1].append(group)
        else:
            waves.append([group])
    planned = [_wave(wave, tokens, offsets, tokens_per_pass) for wave in waves]
    alone = sorted(i for g in groups if not g.prefix for i in g.members)
    if alone:
        planned.append(_wave([Group(0, alone)], tokens, offsets, tokens_per_pass))
    return planned


def _wave(groups: list[Group], tokens: Sequence[torch.Tensor], offsets: Sequence[int], budget: int) -> Wave:
    prefix = _prefix_pass(groups, tokens, offsets) if groups[0].prefix else None
    members = max(len(g.members) for g in groups)
    bodies, source_prefix = [], {}
    token_start = 0  # of each group's first prefix token among the prefix pass's real tokens
    for slot, group in enumerate(groups):
        for member, datum in enumerate(group.members):
            bodies.append(_Body(datum, group.prefix, len(tokens[datum]) - group.prefix, slot))
            source_prefix[datum] = (token_start, member)
        token_start += group.prefix
    prefix_sources = token_start * members  # log-probs of the prefix pass, flattened [prefix tokens * members]
    width_prefix = max(g.prefix for g in groups)
    body_budget = budget - len(groups) * width_prefix if prefix else budget
    batches = [
        _micro_batch(rows, groups, tokens, offsets, source_prefix, members, prefix_sources, width_prefix)
        for rows in _packed(bodies, body_budget, width_prefix)
    ]
    return Wave(prefix, batches)


def _prefix_pass(groups: list[Group], tokens: Sequence[torch.Tensor], offsets: Sequence[int]) -> PrefixPass:
    """One row per group: its prefix, as its first member has it."""
    width = max(g.prefix for g in groups)
    members = max(len(g.members) for g in groups)
    input_ids = torch.zeros(len(groups), width, dtype=torch.int64)
    hidden, targets = [], []
    for row, group in enumerate(groups):
        input_ids[row, : group.prefix] = tokens[group.members[0]][: group.prefix]
        positions = torch.arange(group.prefix)
        hidden.append(row * width + positions)
        firsts = torch.tensor([offsets[i] for i in group.members])
        firsts = torch.cat([firsts, firsts[:1].expand(members - len(firsts))])
        targets.append(firsts[None, :] + positions[:, None])
    return PrefixPass(
        input_ids=input_ids,
        hidden_index=torch.cat(hidden),
        target_index=torch.cat(targets),
    )


def _packed(bodies: list[_Body], budget: int, min_width: int) -> list[list[list[_Body]]]:
    """Micro-batches of rows of bodies: longest first, each into the first row of its group with room.

    A micro-batch's rows are as wide as its first (longest) body, or ``min_width`` where that holds two of
    them; it takes rows while rows x width fits ``budget``.
    """
    batches: list[list[list[_Body]]] = []
    rows: list[list[_Body]] = []
    room: list[int] = []
    width = 0
    for body in sorted(bodies, key=lambda b: -b.length):
        for r, row in enumerate(rows):
            if row[0].slot == body.slot and room[r] >= body.length:
                row.append(body)
                room[r] -= body.length
                break
        else:
            if rows and (len(rows) + 1) * width > budget:
                batches.append(rows)
                rows, room = [], []
            if not rows:
                width = min_width if 2 * body.length <= min_width else body.length
            rows.append([body])
            room.append(width - body.length)
    if rows:
        batches.append(rows)
    return batches


def _micro_batch(
    rows: list[list[_Body]],
    groups: list[Group],
    tokens: Sequence[torch.Tensor],
    offsets: Sequence[int],
    source_prefix: dict[int, tuple[int, int]],
    members: int,
    prefix_sources: int,
    width_prefix: int,
) -> MicroBatch:
    width = max(sum(b.length for b in row) for row in rows)
    input_ids = torch.zeros(len(rows), width, dtype=torch.int64)
    positions = torch.zeros(len(rows), width, dtype=torch.int64)
    segment = torch.full((len(rows), width), -1, dtype=torch.int64)  # the body each token belongs to; -1: padding
    body_index, body_targets, placed = [], [], []
    count = body_tokens = 0
    for r, row in enumerate(rows):
        column = 0
        for body in row:
            span = torch.arange(body.length)
            input_ids[r, column : column + body.length] = tokens[body.datum][body.start :]
            positions[r, column : column + body.length] = body.start + span
            segment[r, column : column + body.length] = count
            body_index.append(r * width + column + span)
            body_targets.append(offsets[body.datum] + body.start + span)
            placed.append((body, body_tokens))
            body_tokens += body.length
            column += body.length
            count += 1
        positions[r, column:] = torch.arange(width - column)
    sources, flat = [], []
    for body, body_start in sorted(placed, key=lambda item: item[0].datum):
        if body.start:
            token_start, member = source_prefix[body.datum]
            sources.append((token_start + torch.arange(body.start)) * members + member)
        sources.append(prefix_sources + body_start + torch.arange(body.length))
        flat.append(offsets[body.datum] + torch.arange(body.start + body.length))
    prefixes = torch.tensor([groups[row[0].slot].prefix for row in rows])
    plain = all(len(row) == 1 and row[0].length == width for row in rows) and bool((prefixes == width_prefix).all())
    return MicroBatch(
        input_ids=input_ids,
        position_ids=positions,
        segment=segment,
        prefix_lengths=prefixes,
        width_prefix=width_prefix,
        plain=plain,
        row_prefix=torch.tensor([row[0].slot for row in rows]),
        body_index=torch.cat(body_index),
        body_targets=torch.cat(body_targets),
        source_index=torch.cat(sources),
        flat_index=torch.cat(flat),
        datum_index=torch.repeat_interleave(torch.arange(len(flat)), torch.tensor([len(f) for f in flat])),
    )


def _mask(segment: torch.Tensor, prefixes: torch.Tensor, width_prefix: int) -> torch.Tensor:
    """Block-diagonal causal attention over packed rows, after each row's prefix (its first ``prefixes[r]`` keys)."""
    rows, width = segment.shape
    column = torch.arange(width, device=segment.device)
    body = (segment[:, :, None] == segment[:, None, :]) & (column[None, :] <= column[:, None])
    prefix = torch.arange(width_prefix, device=segment.device)[None, :] < prefixes[:, None]
    prefix = prefix[:, None, :].expand(rows, width, width_prefix)
    return torch.cat([prefix, body], dim=-1)[:, None]
