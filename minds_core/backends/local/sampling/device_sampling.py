"""Choosing decode slots' next tokens on the device: temperature, top-k/top-p, seeded draws, log-probs, stops.

Every setting that differs per row (temperature, top-k, top-p, seed, stop
tokens, token limit) and every count that changes per step lives in a device
tensor indexed by slot, so one ``draw`` serves any mix of requests, needs no
host sync, and a CUDA graph can capture it. Each row's sampled tokens and
their log-probs are written into per-slot output buffers, read by the host
only when rows finish.

A draw is an exponential race in two rounds, with no cumulative sum over the
vocabulary. Each token ``j`` of unnormalised probability ``w_j`` (softmax of
logits / T, after top-k/top-p, less its max) arrives at ``E_j / w_j``, ``E_j``
exponential: the first to arrive is ``j`` with probability ``w_j / sum(w)``
(Gumbel-max in other words). The vocabulary is cut into ``blocks`` of
``width`` tokens (both about its square root; the last block padded with
weight 0), and as the first arrival of a block is itself exponential at the
block's total weight, a draw races the blocks by their totals, then the
tokens of the winning block: exactly the same distribution, with only
``blocks + width`` exponentials per row and step instead of one per token,
and one pass to exponentiate the logits and one to sum each block (float32).
The exponentials are ``-log u`` of counter-based uniforms ``u``: a hash of the
row's key (from the request's seed and the sample's index), the token's index
in the sample and the exponential's lane, so a seeded sample gets the same
draws whatever else shares its batch, and no generator state is carried. Where
the whole batch's ``log u`` take at most ``TABLE_BYTES`` (a small vocabulary),
they are tabled when a row joins, for every index it draws at (up to its token
limit), as a draw of a few hundred tokens costs little but its kernels; else
each draw hashes its own. Greedy rows (temperature 0) take the argmax of the
logits.
Reported log-probs are under the model's own distribution at temperature 1,
before truncation (the policy's ``log p`` that RL losses compare against).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

__all__ = ["TABLE_BYTES", "Draws", "RowSettings", "row_key"]

TABLE_BYTES = 64 << 20
"""The most a batch's tabled ``log u`` may take (``[slots, capacity, blocks + width]`` float32); past it, hashed
at each draw."""

_FLOAT32_MAX = torch.finfo(torch.float32).max
_GOLDEN = 0x9E3779B97F4A7C15
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 that holds it."""
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


def _mix_int(value: int) -> int:
    """splitmix64's finaliser on a Python int (64-bit wrap-around)."""
    value &= _MASK64
    value = ((value ^ (value >> 30)) * _MIX[0]) & _MASK64
    value = ((value ^ (value >> 27)) * _MIX[1]) & _MASK64
    return value ^ (value >> 31)


def row_key(seed: int, sample: int) -> int:
    """The int64 key of sample ``sample`` of a request seeded ``seed``: its draws' stream."""
    return _signed(_mix_int(seed ^ _mix_int(sample + _GOLDEN)))


def _mix(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (multiplications wrap; shifts made logical by masking)."""
    z = z ^ ((z >> 30) & ((1 << 34) - 1))
    z = z * _signed(_MIX[0])
    z = z ^ ((z >> 27) & ((1 << 37) - 1))
    z = z * _signed(_MIX[1])
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def uniforms(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """float64 uniforms in (0, 1), one per (key, counter): the hash's top 53 bits, centred in their interval."""
    bits = (_mix(keys + counters * _signed(_GOLDEN)) >> 11) & ((1 << 53) - 1)
    return (bits.double() + 0.5) * 2.0**-53


def log_uniforms(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """float32 ``log u`` of ``uniforms``: minus the exponentials a draw races."""
    return uniforms(keys, counters).log_().float()


class Rows(NamedTuple):
    """Views of the first rows of each per-slot tensor a draw reads or writes (made once per row count)."""

    logits: torch.Tensor
    done: torch.Tensor
    count: torch.Tensor
    slot: torch.Tensor
    inverse_temperature: torch.Tensor
    tempered: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    stop_ids: torch.Tensor
    limit: torch.Tensor
    written: torch.Tensor
    tokens: torch.Tensor
    key: torch.Tensor
    log_u: torch.Tensor
    weights: torch.Tensor
    out_tokens: torch.Tensor
    out_logprobs: torch.Tensor


@dataclass(frozen=True)
class RowSettings:
    """What one row samples with (host side, written into the slot when the row joins)."""

    temperature: float
    top_k: int
    top_p: float
    key: int
    stop_ids: tuple[int, ...]
    limit: int


class Draws:
    """The sampling state of ``slots`` decode slots on ``device``; see the module doc.

    ``logits [slots, V]`` (float32) are the next-token logits of each slot; ``tokens`` the tokens
    chosen by the last ``draw`` (what the next forward feeds); ``count`` the tokens each slot has
    sampled, ``done`` whether it stopped (a stop token, or its limit); ``out_tokens``/``out_logprobs``
    ``[slots, capacity]`` every sampled token and its log-prob; ``key`` each row's noise stream, and
    ``log_u [slots, capacity, blocks + width]`` its draws' when tabled (``[slots, 0, ...]`` when not); ``written``
    the index the last draw wrote at. Free slots are ``done``. The vocabulary is raced in
    ``blocks`` of ``width`` tokens (the module doc); ``weights [slots, blocks * width]`` holds a draw's
    unnormalised probabilities (its padding past ``vocab`` stays 0).
    """

    def __init__(self, slots: int, vocab: int, capacity: int, stops: int, device: torch.device) -> None:
        def full(value: float | bool, dtype: torch.dtype, *shape: int) -> torch.Tensor:
            return torch.full((slots, *shape), value, dtype=dtype, device=device)

        self.vocab, self.capacity = vocab, capacity
        self.width = math.isqrt(vocab - 1) + 1  # the square root, rounded up
        self.blocks = -(-vocab // self.width)
        self.logits = full(0.0, torch.float32, vocab)
        self.tokens = full(0, torch.int64)
        self.inverse_temperature = full(1.0, torch.float32)
        self.tempered = full(False, torch.bool)
        self.top_k = full(vocab, torch.int64)
        self.top_p = full(1.0, torch.float32)
        self.key = full(0, torch.int64)
        lanes = self.blocks + self.width
        self.tabled = slots * capacity * lanes * 4 <= TABLE_BYTES
        self.log_u = full(0.0, torch.float32, capacity if self.tabled else 0, lanes)
        self.weights = full(0.0, torch.float32, self.blocks * self.width)
        self.stop_ids = full(-1, torch.int64, stops)
        self.limit = full(1, torch.int64)
        self.count = full(0, torch.int64)
        self.done = full(True, torch.bool)
        self.written = full(0, torch.int64)
        self.out_tokens = full(0, torch.int64, capacity)
        self.out_logprobs = full(0.0, torch.float32, capacity)
        self.top_ids = full(0, torch.int64, capacity, 0)
        self.top_logprobs = full(0.0, torch.float32, capacity, 0)
        self.slot_index = torch.arange(slots, device=device)
        self.vocab_rank = torch.arange(vocab, device=device)
        self.lanes = torch.arange(self.blocks + self.width, device=device)  # a draw's noises: blocks', then tokens'
        self._rows: dict[int, Rows] = {}

    def first(self, rows: int) -> Rows:
        """Views of slots ``0 .. rows - 1`` of every per-slot tensor (made once per row count)."""
        views = self._rows.get(rows)
        if views is None:
            views = self._rows[rows] = Rows(
                self.logits[:rows], self.done[:rows], self.count[:rows], self.slot_index[:rows],
                self.inverse_temperature[:rows, None], self.tempered[:rows], self.top_k[:rows, None],
                self.top_p[:rows, None], self.stop_ids[:rows], self.limit[:rows], self.written[:rows], self.tokens[:rows],
                self.key[:rows], self.log_u[:rows], self.weights[:rows], self.out_tokens[:rows], self.out_logprobs[:rows],
            )  # fmt: skip
        return views

    @property
    def slots(self) -> int:
        """Slots held."""
        return len(self.tokens)

    @property
    def stops(self) -> int:
        """Stop tokens a slot can hold."""
        return self.stop_ids.shape[1]

    def held(self) -> tuple[torch.Tensor, ...]:
        """Every tensor this state holds (what it costs: ``held_bytes``)."""
        return (*self._tensors(), self.log_u, self.weights, self.slot_index, self.vocab_rank, self.lanes)

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return (
            self.logits, self.tokens, self.inverse_temperature, self.tempered, self.top_k, self.top_p, self.key,
            self.stop_ids, self.limit, self.count, self.done, self.written, self.out_tokens, self.out_logprobs,
            self.top_ids, self.top_logprobs,
        )  # fmt: skip

    def join(self, slots: torch.Tensor, logits: torch.Tensor, settings: list[RowSettings]) -> None:
        """Start a row in each of ``slots`` with next-token ``logits [V]`` and its own settings."""
        device = self.tokens.device

        def column(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device)

        self.logits[slots] = logits.float()
        inverse = [min(1 / s.temperature, _FLOAT32_MAX) if s.temperature else 1.0 for s in settings]  # finite: T > 0 tiny
        self.inverse_temperature[slots] = column(inverse, torch.float32)
        self.tempered[slots] = column([bool(s.temperature) for s in settings], torch.bool)
        self.top_k[slots] = column([s.top_k if 0 < s.top_k < self.vocab else self.vocab for s in settings], torch.int64)
        self.top_p[slots] = column([s.top_p for s in settings], torch.float32)
        self.key[slots] = column([s.key for s in settings], torch.int64)
        self._table(slots, max(s.limit for s in settings))
        stop_ids = torch.full((len(settings), self.stops), -1, dtype=torch.int64)
        for row, s in enumerate(settings):
            stop_ids[row, : len(s.stop_ids)] = torch.tensor(sorted(s.stop_ids), dtype=torch.int64)
        self.stop_ids[slots] = stop_ids.to(device)
        self.limit[slots] = column([s.limit for s in settings], torch.int64)
        self.count[slots] = 0
        self.done[slots] = False

    def leave(self, slots: torch.Tensor) -> None:
        """Free ``slots``: they compute on (in a batch's bucket) but count nothing."""
        self.done[slots] = True

    def move(self, source: torch.Tensor, target: torch.Tensor) -> None:
        """Copy slots ``source`` onto slots ``target``."""
        for tensor in (*self._tensors(), self.log_u):
            tensor[target] = tensor[source]

    def copy_from(self, old: Draws) -> None:
        """Take over the rows of an ``old`` state that is no larger in any dimension (growing)."""
        self.want_top(old.top_ids.shape[-1])
        for new, kept in zip(self._tensors(), old._tensors(), strict=True):
            new[tuple(map(slice, kept.shape))] = kept
        if self.tabled:  # then so is the no larger ``old``
            self.log_u[tuple(map(slice, old.log_u.shape))] = old.log_u

    def _table(self, slots: torch.Tensor, limit: int) -> None:
        """Table the ``log u`` of the rows in ``slots`` from their keys (where tabled), for the indices a row of at
        most ``limit`` tokens reads: its draws', and the one a finished row draws at on (unread)."""
        if self.tabled:
            indices = min(limit + 1, self.capacity)
            counters = torch.arange(indices * len(self.lanes), device=self.key.device)
            self.log_u[slots, :indices] = log_uniforms(self.key[slots, None], counters).view(len(slots), indices, -1)

    def want_top(self, k: int) -> None:
        """Make room for ``k`` top log-probs per sampled token."""
        if self.top_ids.shape[-1] < k:
            shape = (*self.out_tokens.shape, k)
            self.top_ids = torch.zeros(shape, dtype=torch.int64, device=self.tokens.device)
            self.top_logprobs = torch.zeros(shape, dtype=torch.float32, device=self.tokens.device)

    def draw(self, rows: int, greedy: bool, tempered: bool, scaled: bool, truncated: bool) -> None:
        """Choose the next token of slots ``0 .. rows - 1`` from their logits, record it and its log-prob, and
        update the counts and stop flags. The switches say whether any row is greedy, is tempered, is tempered at
        other than 1, truncates (top-k or top-p): the work a batch needs is fixed by them."""
        row = self.first(rows)
        live = ~row.done
        at = row.count.clamp(max=self.capacity - 1)[:, None]
        logprobs = row.logits.log_softmax(dim=-1)  # the policy's, at temperature 1: what is reported
        choice = logprobs.argmax(dim=-1) if greedy else None
        if tempered:
            drawn = self._race(row, logprobs, at, scaled, truncated)
            choice = drawn if choice is None else torch.where(row.tempered, drawn, choice)
        assert choice is not None, "a draw is greedy or tempered"
        chosen = choice[:, None]
        row.out_tokens.scatter_(1, at, chosen)
        row.out_logprobs.scatter_(1, at, logprobs.gather(1, chosen))
        row.written.copy_(at[:, 0])
        row.tokens.copy_(choice)
        stopped = (chosen == row.stop_ids).any(dim=-1)
        row.count.add_(live)
        row.done.logical_or_(stopped.logical_or_(row.count >= row.limit))

    def _race(self, row: Rows, logprobs: torch.Tensor, at: torch.Tensor, scaled: bool, truncated: bool) -> torch.Tensor:
        """Each row's token drawn from its tempered, truncated distribution by the two-round race of the module
        doc, with the uniforms of index ``at [rows, 1]`` of its stream."""
        weights = row.weights[:, : self.vocab]  # unnormalised: less their max, so that nothing underflows
        if truncated or scaled:
            # The max is taken off before scaling: the likeliest token's weight is exactly 1 at any temperature (scaled
            # first, a tiny T's huge logits would cancel to nothing, every weight 0, and token 0 be drawn).
            gaps = logprobs - logprobs.amax(dim=-1, keepdim=True)
            if truncated:
                values = self._truncate(gaps * row.inverse_temperature, row)
                torch.sub(values, values.amax(dim=-1, keepdim=True), out=weights).exp_()
            else:
                torch.mul(gaps, row.inverse_temperature, out=weights).exp_()
        else:
            torch.exp(logprobs, out=weights)  # at most 1, the largest at least 1 / V
        masses = row.weights.view(-1, self.blocks, self.width).sum(dim=-1)
        # log u = -E for E ~ Exp(1): the largest log u / w is the smallest arrival time E / w.
        if self.tabled:
            log_u = row.log_u.gather(1, at[:, :, None].expand(-1, -1, len(self.lanes)))[:, 0]
        else:
            log_u = log_uniforms(row.key[:, None], at * len(self.lanes) + self.lanes)
        block = (log_u[:, : self.blocks] / masses).argmax(dim=-1, keepdim=True)
        members = block * self.width + self.lanes[: self.width]  # the block's tokens (past V: padding, weight 0)
        token = (log_u[:, self.blocks :] / row.weights.gather(1, members)).argmax(dim=-1, keepdim=True)
        return members.gather(1, token)[:, 0]

    def _truncate(self, scaled: torch.Tensor, row: Rows) -> torch.Tensor:
        """Tempered logits with the tokens outside each row's top-k, then its top-p, set to -inf."""
        ordered, order = scaled.sort(dim=-1, descending=True)
        ordered = ordered.masked_fill(self.vocab_rank >= row.top_k, float("-inf"))
        weights = (ordered - ordered[:, :1]).exp_()  # unnormalised probabilities, largest first
        before = weights.cumsum(dim=-1) - weights
        top_p = row.top_p
        outside = (before >= top_p * weights.sum(dim=-1, keepdim=True)) & (top_p < 1)  # the mass before covers top_p
        return torch.empty_like(scaled).scatter_(1, order, ordered.masked_fill(outside, float("-inf")))

    def record_top(self, rows: int, k: int) -> None:
        """Record the ``k`` most likely tokens and their log-probs at each row's last sampled position."""
        row = self.first(rows)
        top = row.logits.log_softmax(dim=-1).topk(min(k, self.vocab), dim=-1)
        slot, at = row.slot, row.written
        self.top_ids[slot, at, : top.indices.shape[1]] = top.indices
        self.top_logprobs[slot, at, : top.values.shape[1]] = top.values
