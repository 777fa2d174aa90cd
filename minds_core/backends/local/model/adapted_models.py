"""Samplers' models: a base model with a LoRA adapter, in module trees pooled for reuse.

Where the placement merges adapters (``Placement.merge_adapters``: always on
the CPU and on CUDA), a sampler decodes with ``W + (alpha / rank) * B @ A`` in
place of each adapted ``W``, computed in float32 and rounded once to the base's
dtype: no LoRA matmuls per decode step. Unmerged, the adapter stays a float32
side path, as the trainer runs it: on a bf16 base, updates far below bf16's
resolution of the weights still reach the sampler, at the cost of the LoRA
matmuls in every step. Every other tensor is the base model's own, shared. A
merged tree's adapted weights lie back to back per group of sibling layers
(``sibling_weights``: q/k/v/o, gate/up), so that a decode step runs each group
as one matrix product (on the CPU laid out transposed: MKL multiplies a decode
step's few rows by that layout about twice as fast). The module trees are
pooled per set of adapted layers: when a sampler is garbage-collected its tree
returns to the pool, and the next sampler writes its snapshot into the same
buffers (in place: views of them, such as a decode step's joined weights or a
captured CUDA graph's, stay valid), so a training step neither copies the
module tree nor allocates weights anew.
The pool keeps at most ``KEPT_FREE`` unused trees per set of layers and drops
the others (their weights and decode slots are freed): trees of samplers that
are gone do not pile up.
"""

from __future__ import annotations

import copy
import itertools
import threading

import torch
from torch import nn

from .errors import LocalBadRequestError
from .lora import AdapterState, LoraSpec, attach_lora, load_adapter_state, target_modules
from .sibling_weights import lay_out, sibling_groups

__all__ = ["KEPT_FREE", "AdaptedModels"]

KEPT_FREE = 2
"""Unused trees the pool keeps per set of adapted layers: an RL loop's previous snapshot, which the next one reuses,
and one more for a second run of the same shape, or a snapshot that outlived its successor."""

_ADAPTER_PREFIX = "base_model.model."


PoolKey = tuple[tuple[str, ...], LoraSpec | None]
"""The adapted layers' names, and the LoRA settings where the adapter stays unmerged."""


class AdaptedModels:
    """A pool of module trees over one frozen base model, each holding one adapter snapshot; see the module doc."""

    def __init__(self, base: nn.Module, merge: bool) -> None:
        self._base = base
        self._merges = merge
        self._free: dict[PoolKey, list[nn.Module]] = {}
        self._lock = threading.Lock()

    def acquire(self, spec: LoraSpec, adapter: AdapterState) -> tuple[nn.Module, PoolKey]:
        """A tree computing ``base + adapter``, and the pool key to ``release`` it with when done."""
        names = tuple(target_modules(self._base, spec))
        key = (names, None if self._merges else spec)
        with self._lock:
            free = self._free.get(key)
            tree = free.pop() if free else None
        if not self._merges:
            tree = tree or attach_lora(self._base, spec, seed=0)
            load_adapter_state(tree, adapter)
            return tree, key
        tree = tree or self._new_tree(names)
        _merge(self._base, tree, names, spec, adapter)
        return tree, key

    def release(self, key: PoolKey, tree: nn.Module) -> None:
        """Return ``tree`` to the pool (its sampler is gone); past ``KEPT_FREE`` unused ones it is dropped."""
        with self._lock:
            free = self._free.setdefault(key, [])
            if len(free) < KEPT_FREE:
                free.append(tree)

    def _new_tree(self, names: tuple[str, ...]) -> nn.Module:
        """A copy of the module tree sharing every base tensor; the layers ``names`` get weights of their own,
        siblings' back to back in one buffer (``sibling_weights``; transposed on the CPU)."""
        shared = {id(t): t for t in itertools.chain(self._base.parameters(), self._base.buffers())}
        tree = copy.deepcopy(self._base, shared)
        for group in sibling_groups(tree, names):
            lay_out(group, transposed=group[0].weight.device.type == "cpu")
        return tree


@torch.no_grad()
def _merge(base: nn.Module, tree: nn.Module, names: tuple[str, ...], spec: LoraSpec, adapter: AdapterState) -> None:
    keys = {name: [f"{_ADAPTER_PREFIX}{name}.lora_{part}.weight" for part in ("A", "B")] for name in names}
    expected = {key for pair in keys.values() for key in pair}
    if missing := sorted(expected - set(adapter)):
        raise LocalBadRequestError(f"Adapter weights are missing {len(missing)} tensors, e.g. {missing[0]!r}")
    if unexpected := sorted(set(adapter) - expected):
        raise LocalBadRequestError(f"Adapter weights do not fit this model: unexpected {unexpected[:3]}")
    scale = spec.alpha / spec.rank
    for name in names:
        weight = base.get_submodule(name).weight
        merged = tree.get_submodule(name).weight
        a, b = (adapter[key].to(weight.device, torch.float32) for key in keys[name])
        merged.copy_(torch.addmm(weight.float(), b, a, alpha=scale))  # in float32, rounded once
