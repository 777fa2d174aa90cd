"""Samplers' models: a base model with a LoRA adapter merged into private copies of the adapted weights.

A sampler of a float32 base decodes with ``W + (alpha / rank) * B @ A`` in
place of each adapted ``W`` (no extra LoRA matmuls per step). Every other tensor is the base model's
own, shared. The module trees holding the merged weights are pooled per set
of adapted layers: when a sampler is garbage-collected its tree returns to the
pool, and the next sampler merges its snapshot into the same weight buffers,
so a training step neither copies the module tree nor allocates weights anew.
"""

from __future__ import annotations

import copy
import itertools
import threading

import torch
from torch import nn

from .errors import LocalBadRequestError
from .lora import AdapterState, LoraSpec, target_modules

__all__ = ["MergedModels"]

_ADAPTER_PREFIX = "base_model.model."


class MergedModels:
    """A pool of module trees over one frozen base model, each with private, merged adapted weights."""

    def __init__(self, base: nn.Module) -> None:
        self._base = base
        self._free: dict[tuple[str, ...], list[nn.Module]] = {}
        self._lock = threading.Lock()

    def acquire(self, spec: LoraSpec, adapter: AdapterState) -> tuple[nn.Module, tuple[str, ...]]:
        """A tree holding ``base + adapter`` merged, and the pool key to ``release`` it with when done."""
        names = tuple(target_modules(self._base, spec))
        with self._lock:
            free = self._free.get(names)
            tree = free.pop() if free else None
        if tree is None:
            tree = self._new_tree(names)
        _merge(self._base, tree, names, spec, adapter)
        return tree, names

    def release(self, names: tuple[str, ...], tree: nn.Module) -> None:
        """Return ``tree`` to the pool (its sampler is gone)."""
        with self._lock:
            self._free.setdefault(names, []).append(tree)

    def _new_tree(self, names: tuple[str, ...]) -> nn.Module:
        """A copy of the module tree sharing every base tensor; the layers ``names`` get weights of their own."""
        shared = {id(t): t for t in itertools.chain(self._base.parameters(), self._base.buffers())}
        tree = copy.deepcopy(self._base, shared)
        for name in names:
            module = tree.get_submodule(name)
            module.weight = nn.Parameter(torch.empty_like(module.weight), requires_grad=False)
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
        a, b = (adapter[key] for key in keys[name])
        weight = base.get_submodule(name).weight
        merged = tree.get_submodule(name).weight
        torch.addmm(weight, b.to(weight), a.to(weight), alpha=scale, out=merged)
