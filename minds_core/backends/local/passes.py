"""Forward/backward passes over a request's datums: token-bounded micro-batches and shared prefixes.

A request's datums are split into micro-batches bounded by padded tokens (and
by logits held at once); gradients accumulate across them, so a step's peak
memory is that of one micro-batch, whatever the number of rollouts.

Datums that start with the same tokens (a group's rollouts of one prompt) run
that prefix once: one forward pass over the prefix yields its keys/values and
its logits; every suffix then attends to those keys/values, and the gradients
reaching them from all suffixes are summed and sent back through the prefix
pass once. The result equals running every datum whole, up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache

from .inputs import DatumTensors
from .kv_cache import cache_argument, returned_cache
from .models import target_logprobs

__all__ = ["ItemLoss", "LossPasses", "padded_logits", "shared_prefix_groups"]

ItemLoss = Callable[[int, torch.Tensor], torch.Tensor]
"""``loss(index, logprobs) -> scalar``: the loss of datum ``index`` from its target log-probs."""

LOGITS_PER_MICRO_BATCH = 1 << 26
"""Float logits held at once per forward pass (256 MiB; binds before the token bound at vocabularies over 32k)."""

MIN_SHARED_PREFIX = 16
"""Shortest common prefix looked for (datums are bucketed by their first this many tokens)."""

MIN_SHARED_SAVING = 256
"""Fewest token positions a shared prefix must save (its length times the members beyond the first)
to run in passes of its own: a shared group adds a prefix pass forward and back, and below this
the passes cost more than the positions they save (sharing prefixes of 16-20 tokens among a few
rollouts made an RL step of the tiny model ~40% slower than running them whole)."""


@dataclass(frozen=True)
class _Group:
    """Datums ``members`` whose first ``prefix`` tokens are equal (``prefix`` 0: run whole)."""

    prefix: int
    members: list[int]


def shared_prefix_groups(items: Sequence[DatumTensors], min_prefix: int = MIN_SHARED_PREFIX) -> list[_Group]:
    """Datums sharing at least ``min_prefix`` leading tokens, grouped; the rest in one group of prefix 0.

    Datums are bucketed by their first ``min_prefix`` tokens (and the shape of a target
    row: ``[T]`` or ``[T, K]``); a bucket of two or more shares its longest common
    prefix, cut so that every member keeps one token of its own, when that saves at
    least ``MIN_SHARED_SAVING`` token positions.
    """
    tokens = [item.tokens for item in items]
    buckets: dict[tuple[object, ...], list[int]] = {}
    alone: list[int] = []
    for i, (row, item) in enumerate(zip(tokens, items, strict=True)):
        if len(row) > min_prefix:
            key = (tuple(item.inputs["target_tokens"].shape[1:]), *row[:min_prefix].tolist())
            buckets.setdefault(key, []).append(i)
        else:
            alone.append(i)
    groups = []
    for members in buckets.values():
        prefix = _common_prefix([tokens[i] for i in members]) if len(members) > 1 else 0
        if prefix >= min_prefix and prefix * (len(members) - 1) >= MIN_SHARED_SAVING:
            groups.append(_Group(prefix, members))
        else:
            alone.extend(members)
    if alone:
        groups.append(_Group(0, sorted(alone)))
    return groups


def _common_prefix(rows: Sequence[torch.Tensor]) -> int:
    first = rows[0]
    common = min(len(row) for row in rows) - 1  # every member keeps at least one token of its own
    for row in rows[1:]:
        differs = (first[:common] != row[:common]).nonzero()
        if len(differs):
            common = int(differs[0, 0])
    return common


class LossPasses:
    """Runs a request's datums through ``model`` in micro-batches, sharing prefixes; see the module doc."""

    def __init__(
        self, model: nn.Module, vocab_size: int, *, tokens_per_micro_batch: int, share_prefixes: bool = True
    ) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.tokens_per_micro_batch = tokens_per_micro_batch  # padded input tokens per pass (rows x longest row)
        self.share_prefixes = share_prefixes

    def run(
        self, items: Sequence[DatumTensors], loss: ItemLoss, *, backward: bool
    ) -> tuple[list[torch.Tensor], float]:
        """Target log-probs of every datum (detached) and the summed loss; with ``backward``, add its gradients."""
        logprobs: list[torch.Tensor] = [torch.empty(0)] * len(items)
        groups = shared_prefix_groups(items) if self.share_prefixes else [_Group(0, list(range(len(items))))]
        total = 0.0
        with torch.set_grad_enabled(backward):
            for group in groups:
                if group.prefix:
                    total += self._shared(items, group, loss, logprobs, backward)
                else:
                    total += self._whole(items, group.members, loss, logprobs, backward)
        return logprobs, total

    def _whole(
        self,
        items: Sequence[DatumTensors],
        members: list[int],
        loss: ItemLoss,
        out: list[torch.Tensor],
        backward: bool,
    ) -> float:
        total = 0.0
        for batch in self._micro_batches([len(items[i].tokens) for i in members]):
            rows = [members[b] for b in batch]
            logits = padded_logits(self.model, [items[i].tokens for i in rows], None)
            losses = []
            for row, i in enumerate(rows):
                lp = target_logprobs(logits[row, : len(items[i].tokens)], items[i].inputs["target_tokens"])
                losses.append(loss(i, lp))
                out[i] = lp.detach()
            batch_loss = torch.stack(losses).sum()
            if backward:
                batch_loss.backward()
            total += float(batch_loss.detach())
        return total

    def _shared(
        self,
        items: Sequence[DatumTensors],
        group: _Group,
        loss: ItemLoss,
        out: list[torch.Tensor],
        backward: bool,
    ) -> float:
        p = group.prefix
        prefix_out = self.model(input_ids=items[group.members[0]].tokens[None, :p], use_cache=True)
        prefix_kv = _keys_values(returned_cache(prefix_out))
        prefix_logits = prefix_out.logits[0]
        # Log-probs of every member's first p targets, from the one prefix pass: [members, p(, K)].
        prefix_lp = _shared_logprobs(prefix_logits, [items[i].inputs["target_tokens"][:p] for i in group.members])
        del prefix_out, prefix_logits
        # Leaves standing in for the prefix's outputs: suffix passes accumulate their gradients.
        kv_leaves = [(k.detach().requires_grad_(backward), v.detach().requires_grad_(backward)) for k, v in prefix_kv]
        lp_leaf = prefix_lp.detach().requires_grad_(backward)
        total = 0.0
        suffix_lengths = [len(items[i].tokens) - p for i in group.members]
        for batch in self._micro_batches(suffix_lengths):
            rows = [group.members[b] for b in batch]
            logits = padded_logits(self.model, [items[i].tokens[p:] for i in rows], kv_leaves)
            losses = []
            for row, (b, i) in enumerate(zip(batch, rows, strict=True)):
                targets = items[i].inputs["target_tokens"][p:]
                suffix_lp = target_logprobs(logits[row, : len(targets)], targets)
                lp = torch.cat([lp_leaf[b], suffix_lp])
                losses.append(loss(i, lp))
                out[i] = lp.detach()
            batch_loss = torch.stack(losses).sum()
            if backward:
                batch_loss.backward()
            total += float(batch_loss.detach())
        if backward:
            _backward_prefix(prefix_kv, kv_leaves, prefix_lp, lp_leaf)
        return total

    def _micro_batches(self, lengths: Sequence[int]) -> Iterator[list[int]]:
        """Positions in ``lengths``, in order, grouped so that padded tokens and logits fit (one row at least)."""
        batch: list[int] = []
        longest = 0
        for i, length in enumerate(lengths):
            longest_with = max(longest, length)
            rows = len(batch) + 1
            if batch and (
                rows * longest_with > self.tokens_per_micro_batch
                or rows * longest_with * self.vocab_size > LOGITS_PER_MICRO_BATCH
            ):
                yield batch
                batch, longest_with = [], length
            batch.append(i)
            longest = longest_with
        if batch:
            yield batch

def padded_logits(
    model: nn.Module, rows: Sequence[torch.Tensor], prefix_kv: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None
) -> torch.Tensor:
    """Logits ``[rows, longest, V]`` of right-padded token ``rows``, continuing ``prefix_kv`` (one row's) when given."""
    lengths = [len(row) for row in rows]
    input_ids = torch.zeros(len(rows), max(lengths), dtype=torch.int64, device=rows[0].device)
    mask = torch.zeros_like(input_ids)
    for r, row in enumerate(rows):
        input_ids[r, : lengths[r]] = row
        mask[r, : lengths[r]] = 1
    padded = min(lengths) != max(lengths)
    if prefix_kv is None:
        return model(input_ids=input_ids, attention_mask=mask if padded else None, use_cache=False).logits
    cache = DynamicCache()
    for layer, (k, v) in enumerate(prefix_kv):
        cache.update(k.expand(len(rows), -1, -1, -1), v.expand(len(rows), -1, -1, -1), layer)
    if padded:
        prefix_length = prefix_kv[0][0].shape[-2]
        mask = torch.cat([mask.new_ones(len(rows), prefix_length), mask], dim=1)
    return model(
        input_ids=input_ids, attention_mask=mask if padded else None, **cache_argument(cache)
    ).logits


def _keys_values(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _backward_prefix(
    prefix_kv: Sequence[tuple[torch.Tensor, torch.Tensor]],
    kv_leaves: Sequence[tuple[torch.Tensor, torch.Tensor]],
    prefix_lp: torch.Tensor,
    lp_leaf: torch.Tensor,
) -> None:
    """Send the gradients gathered on the leaves back through the prefix pass."""
    outputs, grads = [], []
    pairs = [*zip(prefix_kv, kv_leaves, strict=True)]
    for (k, v), (k_leaf, v_leaf) in pairs:
        for tensor, leaf in ((k, k_leaf), (v, v_leaf)):
            if leaf.grad is not None and tensor.requires_grad:
                outputs.append(tensor)
                grads.append(leaf.grad)
    if lp_leaf.grad is not None and prefix_lp.requires_grad:
        outputs.append(prefix_lp)
        grads.append(lp_leaf.grad)
    if outputs:
        torch.autograd.backward(outputs, grads)


def _shared_logprobs(logits: torch.Tensor, targets: Sequence[torch.Tensor]) -> torch.Tensor:
    """``target_logprobs`` of several target sets on the same logits ``[T, V]``: ``[len(targets), T(, K)]``."""
    logits = logits.float()
    normaliser = torch.logsumexp(logits, dim=-1, keepdim=True)
    stacked = torch.stack(list(targets))
    picked = logits.gather(-1, stacked.transpose(0, 1).reshape(logits.shape[0], -1)) - normaliser
    return picked.reshape(logits.shape[0], *stacked.shape[:1], *stacked.shape[2:]).transpose(0, 1)
