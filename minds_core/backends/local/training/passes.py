"""Forward/backward passes over a request's datums: packed micro-batches, shared prefixes, chunked log-probs.

A request's datums run in token-budgeted micro-batches of packed rows (see
``packing``); gradients accumulate across them, so a step's peak memory is that of
one micro-batch, whatever the number of rollouts. Log-probs come from the final
hidden states through the output layer in chunks (``head_logprobs``): no pass holds
the logits of all its tokens.

Datums that start with the same tokens (a group's rollouts of one prompt) run that
prefix once: one pass over the prefixes yields their keys/values and their
log-probs; every member's remaining tokens then attend to its group's keys/values,
and the gradients reaching them from all members are summed and sent back through
the prefix pass once. Whether a request's groups share is chosen by the measured time of
both plans on this model (``pass_cost``). The result equals running every datum whole,
up to float rounding.

The loss sees log-probs of many datums at once: one call per micro-batch, on
tensors gathered once per request, with no per-datum Python and no host sync in the
loop.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import torch
from torch import nn
from torch.nn.attention.flex_attention import BlockMask
from transformers import DynamicCache

from ..model.cache_argument import cache_argument, returned_cache
from ..model.head_logprobs import OutputHead
from ..model.packed_attention import ATTENTION, block_mask, disable_flex, flex_usable
from .datums import DatumTensors
from .losses import DATUM_INDEX
from .packing import Group, MicroBatch, PrefixPass, Wave, plan_waves
from .pass_cost import PlanTimes

__all__ = ["BatchLoss", "CallerError", "LossPasses", "shared_prefix_groups"]

BatchLoss = Callable[[torch.Tensor, Mapping[str, torch.Tensor]], torch.Tensor]
"""``loss(logprobs, inputs) -> scalar``: the summed loss of a batch of tokens of several datums, concatenated:
their target log-probs ``[N]`` (``[N, K]`` for top-k targets) and loss inputs of the same leading size,
with ``inputs[DATUM_INDEX]`` naming each token's datum."""

MIN_SHARED_PREFIX = 16
"""Shortest common prefix looked for (datums are bucketed by their first this many tokens)."""

_KV = list[tuple[torch.Tensor, torch.Tensor]]
_T = TypeVar("_T")


class CallerError(Exception):
    """An error of the caller's own code (a custom loss) run inside ``LossPasses.falling_back``: raised as it
    came (``error``), never retried."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def shared_prefix_groups(items: Sequence[DatumTensors], min_prefix: int = MIN_SHARED_PREFIX) -> list[Group]:
    """Datums sharing at least ``min_prefix`` leading tokens, grouped; the rest in one group of prefix 0.

    Datums are bucketed by their first ``min_prefix`` tokens (and the shape of a target
    row: ``[T]`` or ``[T, K]``); a bucket of two or more shares its longest common
    prefix, cut so that every member keeps one token of its own.
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
        if prefix >= min_prefix:
            groups.append(Group(prefix, members))
        else:
            alone.extend(members)
    if alone:
        groups.append(Group(0, sorted(alone)))
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
    """Runs a request's datums through a causal LM (a peft model) in packed micro-batches; see the module doc.

    ``compute_dtype`` is the base weights' dtype: below float32, the passes run under autocast
    to it, so that the float32 LoRA weights compute in it too (their gradients reach them in float32).
    ``share_prefixes``: whether datums sharing a prompt run it once; None (the default) chooses per
    request by the measured time of both plans (``pass_cost``). ``attention``: how packed rows are masked
    (``packed_attention.MODES``); ``flex`` needs a model loaded with ``packed_attention.ATTENTION``, and is
    the dense mask otherwise, and once FlexAttention has failed in the process (see ``falling_back``).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        compute_dtype: torch.dtype,
        tokens_per_micro_batch: int,
        share_prefixes: bool | None = None,
        attention: str = "dense",
    ) -> None:
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.decoder = causal_lm.get_decoder()
        config = causal_lm.config
        self.head = OutputHead(
            causal_lm.get_output_embeddings(), config.vocab_size, getattr(config, "final_logit_softcapping", None)
        )
        self.device = next(model.parameters()).device
        self.compute_dtype = compute_dtype
        self.tokens_per_micro_batch = tokens_per_micro_batch  # padded input tokens per pass (rows x row width)
        self.share_prefixes = share_prefixes
        self._boolean_mask = config._attn_implementation in ("sdpa", ATTENTION)
        self.attention = attention if config._attn_implementation == ATTENTION else "dense"
        self._plans = {backward: PlanTimes(self.device) for backward in (True, False)}
        self._trainable = [p for p in model.parameters() if p.requires_grad]
        self._flex_used = False  # whether the running attempt has built a FlexAttention block mask
        self._dense_only = False  # while an attempt runs again with the dense mask

    def run(
        self, items: Sequence[DatumTensors], loss: BatchLoss, *, backward: bool
    ) -> tuple[list[torch.Tensor], float, dict[str, float]]:
        """Target log-probs of every datum (detached, on the CPU), the summed loss, and the metrics of the plan
        run (none when no datums share a prompt); with ``backward``, add its gradients."""
        return self.falling_back(lambda: self._run(items, loss, backward=backward))

    def falling_back(self, attempt: Callable[[], _T]) -> _T:
        """``attempt()`` (passes of this object, and the backward passes of their losses), all or nothing: where
        it raises, the gradients it added are taken back, so accumulated gradients stay as they were.

        Where it raised after building a FlexAttention block mask (a kernel that fails to compile, often only
        at its first backward pass, or its probe, see ``packed_attention.prove``), it runs again with the dense
        mask; where that succeeds, FlexAttention was at fault and the process keeps the dense mask from then
        on (logged once, with the first error). Out-of-memory errors and a ``CallerError`` are raised as they
        came, and so is the dense attempt's error (FlexAttention staying on: the fault was elsewhere)."""
        saved = [None if p.grad is None else p.grad.clone() for p in self._trainable]  # device copies: no sync
        flex_error: Exception | None = None  # the first attempt's, where it ran again with the dense mask
        while True:
            self._flex_used, self._dense_only = False, flex_error is not None
            try:
                result = attempt()
            except BaseException as exc:  # noqa: BLE001 (gradients restored, then raised or retried)
                self._restore(saved)
                failure = exc
            else:
                if flex_error is not None:
                    disable_flex(flex_error)
                return result
            finally:
                self._dense_only = False
            flex_fault = isinstance(failure, Exception) and not isinstance(failure, (torch.OutOfMemoryError, CallerError))
            if flex_error is None and self._flex_used and flex_fault:
                flex_error = failure
                continue
            if isinstance(failure, CallerError):
                failure = failure.error
            if flex_error is not None:
                failure.add_note(f"(it ran again with the dense mask after FlexAttention failed: {flex_error!r:.300})")
            raise failure

    def _restore(self, saved: Sequence[torch.Tensor | None]) -> None:
        """The gradients as ``saved`` (copies: a pass run again adds to them in place)."""
        for param, grad in zip(self._trainable, saved, strict=True):
            param.grad = None if grad is None else grad.clone()

    def _run(
        self, items: Sequence[DatumTensors], loss: BatchLoss, *, backward: bool
    ) -> tuple[list[torch.Tensor], float, dict[str, float]]:
        out: list[torch.Tensor] = [torch.empty(0)] * len(items)
        total = torch.zeros((), device=self.device)
        parts = [[items[i] for i in indices] for indices in _by_target_shape(items)]
        candidates = [self._candidates(part) for part in parts]
        plans = self._plans[backward]
        shares = any(group.prefix for groups in candidates for group in groups)
        share = shares and (plans.choose() if self.share_prefixes is None else self.share_prefixes)
        timing = plans.timing(share, sum(len(item.tokens) for item in items)) if shares else contextlib.nullcontext()
        with torch.set_grad_enabled(backward), timing:
            for indices, part, groups in zip(_by_target_shape(items), parts, candidates, strict=True):
                flat = _flat_inputs(part, self.device)
                targets = flat["target_tokens"]
                logprobs = torch.empty(targets.shape, device=self.device)
                for wave in self._waves(part, groups if share else [Group(0, list(range(len(part))))]):
                    prefix = self._prefix(wave.prefix, targets) if wave.prefix else None
                    for batch in wave.micro_batches:
                        lp = self._body_logprobs(batch, targets, *(prefix.leaves() if prefix else (None, None)))
                        inputs = {key: value.index_select(0, batch.flat_index) for key, value in flat.items()}
                        batch_loss = loss(lp, {**inputs, DATUM_INDEX: batch.datum_index})
                        if backward:
                            batch_loss.backward()
                        logprobs.index_copy_(0, batch.flat_index, lp.detach())
                        total += batch_loss.detach()
                    if backward and prefix is not None:
                        prefix.backward()
                for i, lp in zip(indices, _split(logprobs.cpu(), part), strict=True):
                    out[i] = lp
        plans.settle()
        return out, float(total), plans.metrics(share) if shares else {}

    def logprobs_with_grad(self, items: Sequence[DatumTensors]) -> list[torch.Tensor]:
        """Differentiable target log-probs of every datum, all in one graph (nothing shared, one budget-free pass
        per target shape): for a loss that needs them all at once."""
        out: list[torch.Tensor] = [torch.empty(0)] * len(items)
        for indices in _by_target_shape(items):
            part = [items[i] for i in indices]
            flat = _flat_inputs(part, self.device)
            (wave,) = self._waves(part, [Group(0, list(range(len(part))))], sys.maxsize)
            (batch,) = wave.micro_batches
            lp = self._body_logprobs(batch, flat["target_tokens"], None, None)
            ordered = torch.zeros_like(lp).index_copy(0, batch.flat_index, lp)
            for i, piece in zip(indices, _split(ordered, part), strict=True):
                out[i] = piece
        return out

    def _candidates(self, items: Sequence[DatumTensors]) -> list[Group]:
        """The groups ``items`` would run in when sharing (all in one group of prefix 0 where sharing is off)."""
        if self.share_prefixes is False:
            return [Group(0, list(range(len(items))))]
        return shared_prefix_groups(items)

    def _waves(self, items: Sequence[DatumTensors], groups: list[Group], budget: int | None = None) -> list[Wave]:
        """The request's passes (see ``packing``), their tensors on the device."""
        tokens = [item.tokens for item in items]
        return [wave.to(self.device) for wave in plan_waves(tokens, groups, budget or self.tokens_per_micro_batch)]

    def _prefix(self, prefix: PrefixPass, targets: torch.Tensor) -> _PrefixGradients:
        with self._autocast():
            out = self.decoder(input_ids=prefix.input_ids, use_cache=True)
            hidden = out.last_hidden_state.flatten(0, 1).index_select(0, prefix.hidden_index)
            index = prefix.target_index
            wanted = targets.reshape(targets.shape[0], -1).index_select(0, index.flatten())
            lp = self.head.logprobs(hidden, wanted.reshape(index.shape[0], -1))  # [prefix tokens, members * K]
        kv = [(layer.keys, layer.values) for layer in returned_cache(out).layers]
        return _PrefixGradients(kv, lp, torch.is_grad_enabled())

    def _body_logprobs(
        self, batch: MicroBatch, targets: torch.Tensor, prefix_kv: _KV | None, prefix_lp: torch.Tensor | None
    ) -> torch.Tensor:
        """Log-probs ``[tokens(, K)]`` of the batch's datums' tokens, request-flat order (``batch.flat_index``)."""
        cache: dict[str, object] = {"use_cache": False}
        if prefix_kv is not None:
            kv = DynamicCache()
            for layer, (k, v) in enumerate(prefix_kv):
                kv.update(k.index_select(0, batch.row_prefix), v.index_select(0, batch.row_prefix), layer)
            cache = cache_argument(kv)
        flat_targets = targets.reshape(targets.shape[0], -1)
        with self._autocast():
            out = self.decoder(
                input_ids=batch.input_ids,
                position_ids=batch.position_ids,
                attention_mask=self._mask(batch),
                **cache,
            )
            hidden = out.last_hidden_state.flatten(0, 1).index_select(0, batch.body_index)
            lp = self.head.logprobs(hidden, flat_targets.index_select(0, batch.body_targets))
        if prefix_lp is not None:
            lp = torch.cat([prefix_lp.reshape(-1, lp.shape[1]), lp])
        return lp.index_select(0, batch.source_index).reshape(-1, *targets.shape[1:])

    def _mask(self, batch: MicroBatch) -> torch.Tensor | BlockMask | None:
        if batch.plain:
            return None
        if self.attention == "flex" and not self._dense_only and flex_usable():
            self._flex_used = True
            return block_mask(batch.segment, batch.prefix_lengths, batch.width_prefix)
        mask = batch.attention_mask
        if self._boolean_mask:
            return mask
        blocked = torch.finfo(self.compute_dtype).min  # eager attention adds the mask to the scores
        return torch.zeros(mask.shape, dtype=self.compute_dtype, device=self.device).masked_fill_(~mask, blocked)

    def _autocast(self) -> contextlib.AbstractContextManager[object]:
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)


class _PrefixGradients:
    """A prefix pass's keys/values and log-probs, with leaves standing in for them in the passes that continue it:
    those accumulate their gradients on the leaves, and ``backward`` sends them through the prefix pass once."""

    def __init__(self, kv: _KV, logprobs: torch.Tensor, grad: bool) -> None:
        self.kv = kv
        self.logprobs = logprobs
        self.kv_leaves = [(k.detach().requires_grad_(grad), v.detach().requires_grad_(grad)) for k, v in kv]
        self.lp_leaf = logprobs.detach().requires_grad_(grad)

    def leaves(self) -> tuple[_KV, torch.Tensor]:
        return self.kv_leaves, self.lp_leaf

    def backward(self) -> None:
        outputs, grads = [], []
        for (k, v), (k_leaf, v_leaf) in zip(self.kv, self.kv_leaves, strict=True):
            for tensor, leaf in ((k, k_leaf), (v, v_leaf)):
                if leaf.grad is not None and tensor.requires_grad:
                    outputs.append(tensor)
                    grads.append(leaf.grad)
        if self.lp_leaf.grad is not None and self.logprobs.requires_grad:
            outputs.append(self.logprobs)
            grads.append(self.lp_leaf.grad)
        if outputs:
            torch.autograd.backward(outputs, grads)


def _by_target_shape(items: Sequence[DatumTensors]) -> list[list[int]]:
    """Request indices grouped by the shape of a target row (``[T]``, or ``[T, K]`` per K): each group runs alike."""
    shapes: dict[tuple[int, ...], list[int]] = {}
    for i, item in enumerate(items):
        shapes.setdefault(tuple(item.inputs["target_tokens"].shape[1:]), []).append(i)
    return list(shapes.values())


def _flat_inputs(items: Sequence[DatumTensors], device: torch.device) -> dict[str, torch.Tensor]:
    """Every loss input of ``items`` concatenated over their tokens, on ``device``.

    ``weights`` given for some datums only are 1 for the others (as a loss reads a datum without them)."""
    keys = dict.fromkeys(key for item in items for key in item.inputs)
    flat = {
        key: torch.cat([_input(item, key) for item in items]).to(device, non_blocking=True) for key in keys
    }
    return flat


def _input(item: DatumTensors, key: str) -> torch.Tensor:
    if key in item.inputs:
        return item.inputs[key]
    return torch.ones(item.inputs["target_tokens"].shape)  # weights: only they are optional


def _split(flat: torch.Tensor, items: Sequence[DatumTensors]) -> list[torch.Tensor]:
    return list(flat.split([len(item.tokens) for item in items]))
