"""LoRA layers that read one input, trained as one: a few large matrix products where peft runs many small ones.

peft's LoRA layer computes ``base(x) + B(A(x)) * scale`` with products, a scale and an add of its own, forward
and backward, for every adapted layer: a layer's q/k/v projections (one input) run three of each, and on a GPU
these small kernels cost more in launches than in arithmetic. ``join_lora`` makes each group of sibling layers
that read one input (``sibling_weights.sibling_groups``, split by what one forward of two tokens shows each
layer reading) compute as one:

* forward: ``h = x @ [A_q; A_k; A_v]^T`` (one product), the base output over the joined base weight (one
  product, its biases added in it), then each layer's block ``y_i += scale * h_i @ B_i^T`` in place (one
  product each, the scale and the add inside it);
* backward: the layers' output gradients side by side (one copy), each block's ``B`` gradient and its share
  of ``h``'s gradient (two products each, written in place), ``A``'s gradient for the group (one product) and
  the input's (two), the factors' gradients cast to float32 once for the group.

A group of one (an o or down projection, the output layer) runs the same way, without the copy. The base
weights are the base model's, back to back since load (``models``); the group's ``lora_A`` weights, and its
``lora_B`` weights, are laid out back to back here too (``sibling_weights.lay_out``), so each joined factor
is a view of the layers' own parameters: the optimizer holds the same per-layer parameters, the adapter
state keeps peft's keys, and every gradient reaches the parameter it belongs to. Under autocast the factors
compute in its dtype (cast once per group), as peft's do; the math is peft's, so the two agree up to float
rounding (in bf16 a layer's LoRA term is scaled and added inside its product, rounded once where peft rounds
three times; in float64 they agree to 1e-12).

Each layer's ``forward`` is replaced by one reading its group: the first layer called with an input computes
the whole group and keeps the other layers' outputs, which their calls with that same tensor (same version)
take; any other call computes anew. Which groups join is chosen once: the layers of a group that cannot
(ranks or scales that differ, base weights not back to back) run alone, and a layer that is no plain LoRA
layer (LoRA dropout, DoRA or another variant, a LoRA bias, more than one adapter) keeps peft's forward; at a call
with other arguments, or with the adapter disabled or merged, outside autocast with an input of another
dtype than the factors, or with factors that no longer lie where ``install`` found them (moved to another
device), a layer runs peft's forward for that call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from peft.tuners.lora.layer import Linear as LoraLinear
from torch import nn

from ..model.sibling_weights import joined, lay_out, sibling_groups

__all__ = ["JoinedLoRA", "join_lora", "use_joined"]


def join_lora(model: nn.Module, base: nn.Module) -> list[JoinedLoRA]:
    """Make the LoRA layers of ``model`` (a peft model over ``base``'s weights, as ``lora.attach_lora`` makes
    one) compute in groups (see the module doc); the groups, each of one or more layers."""
    layers = {id(m.base_layer.weight): m for m in model.modules() if isinstance(m, LoraLinear)}
    grouped = [[layers[id(m.weight)] for m in group if id(m.weight) in layers] for group in sibling_groups(base)]
    grouped += [[m] for m in layers.values() if not any(m in group for group in grouped)]  # e.g. a tied unembedding
    inputs = _inputs(model, [m for group in grouped if len(group) > 1 for m in group])
    joins = []
    for group in grouped:
        for readers in _readers(group, inputs):
            joins += _joined_or_alone(readers)
    use_joined(joins)
    return joins


def use_joined(groups: Iterable[JoinedLoRA], joined: bool = True) -> None:
    """Run the layers of ``groups`` joined (each group's ``install``), or each with peft's forward (``uninstall``)."""
    for group in groups:
        if joined:
            group.install()
        else:
            group.uninstall()


class JoinedLoRA:
    """LoRA layers reading one input, computed together (see the module doc); their base weights back to back."""

    a: torch.Tensor
    """The layers' ``lora_A`` weights as one view (``[sum of ranks, in]``), taken at ``install``."""
    b: torch.Tensor
    """The layers' ``lora_B`` weights as one view (``[sum of outs, rank]``), taken at ``install``."""

    def __init__(self, layers: Sequence[LoraLinear]) -> None:
        self.layers = list(layers)
        first = self.layers[0]
        (self.adapter,) = first.lora_A
        self.scale = float(first.scaling[self.adapter])
        base = [layer.base_layer for layer in self.layers]
        weight = joined([layer.weight for layer in base])
        if weight is None:
            raise ValueError("JoinedLoRA needs its layers' base weights back to back (sibling_weights.lay_out)")
        self.weight = weight
        biases = [layer.bias for layer in base]
        self.bias = None if biases[0] is None else torch.cat(biases).detach()  # frozen: copied once
        self.factors: list[torch.Tensor] = []
        """The layers' ``lora_A`` then ``lora_B`` weights (the parameters the optimizer holds), taken at ``install``."""
        self._addresses: tuple[int, ...] = ()
        self.outs = [layer.base_layer.weight.shape[0] for layer in self.layers]
        self.ranks = [layer.r[self.adapter] for layer in self.layers]
        self._pending: _Pending | None = None

    def install(self) -> None:
        """Replace each layer's ``forward`` by one computing the group (peft's stays behind it), reading the
        layers' factors as they are now (install again after replacing a factor's Parameter); factors that no
        longer lie back to back leave the layers peft's forward."""
        factors = [layer.lora_A[self.adapter].weight for layer in self.layers]
        factors += [layer.lora_B[self.adapter].weight for layer in self.layers]
        n = len(self.layers)
        a, b = joined(factors[:n]), joined(factors[n:])
        if a is None or b is None:
            self.uninstall()
            return
        self.factors, self.a, self.b = factors, a, b
        self._addresses = tuple(factor.data_ptr() for factor in factors)
        for index, layer in enumerate(self.layers):
            layer.forward = partial(self._forward, index, partial(LoraLinear.forward, layer))

    def uninstall(self) -> None:
        """Give each layer peft's ``forward`` back (the factors stay laid out: peft reads each layer's own)."""
        self._pending = None
        for layer in self.layers:
            layer.__dict__.pop("forward", None)

    def _forward(self, index: int, peft_forward: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        layer = self.layers[index]
        autocast = torch.is_autocast_enabled(x.device.type)
        dtype = torch.get_autocast_dtype(x.device.type) if autocast else x.dtype
        if (
            args
            or kwargs
            or layer.disable_adapters
            or layer.merged
            or layer.active_adapters != [self.adapter]
            or (not autocast and x.dtype != self.factors[0].dtype)
            or tuple(factor.data_ptr() for factor in self.factors) != self._addresses  # moved since: not joined
        ):
            self._pending = None
            return peft_forward(x, *args, **kwargs)
        key = (x._version, torch.is_grad_enabled(), dtype)
        pending = self._pending
        if pending is None or index in pending.taken or pending.x is not x or pending.key != key:
            outputs = _Products.apply(x, self, dtype, *self.factors)
            pending = self._pending = _Pending(x, key, outputs)
        pending.taken.add(index)
        if len(pending.taken) == len(self.layers):
            self._pending = None  # every layer has its output: hold nothing between passes
        return pending.outputs[index]


@dataclass
class _Pending:
    x: torch.Tensor
    key: tuple[Any, ...]  # x's version, grad mode, compute dtype
    outputs: tuple[torch.Tensor, ...]
    taken: set[int] = field(default_factory=set)


class _Products(torch.autograd.Function):
    """The outputs of a group's layers (see the module doc) from their input and their factors ``A_1..A_n,
    B_1..B_n`` (inputs, so that their gradients reach them; the products read the group's joined views of them)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, group: JoinedLoRA, dtype: torch.dtype, *factors: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).to(dtype)
        a, b = group.a.to(dtype), group.b.to(dtype)
        h = torch.mm(x2, a.t())
        if group.bias is None:
            y = torch.mm(x2, group.weight.to(dtype).t())
        else:
            y = torch.addmm(group.bias.to(dtype), x2, group.weight.to(dtype).t())
        ys = y.split(group.outs, dim=1)
        for yi, hi, bi in zip(ys, h.split(group.ranks, dim=1), b.split(group.outs), strict=True):
            yi.addmm_(hi, bi.t(), alpha=group.scale)
        ctx.save_for_backward(x2, h, a, b)
        ctx.group, ctx.dtype, ctx.shape, ctx.x_dtype = group, dtype, x.shape, x.dtype
        ctx.factor_dtypes = (factors[0].dtype, factors[-1].dtype)
        return tuple(yi.view(*lead, yi.shape[1]) for yi in ys)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x2, h, a, b = ctx.saved_tensors
        group, dtype, tokens = ctx.group, ctx.dtype, x2.shape[0]
        outs, ranks, scale = group.outs, group.ranks, group.scale
        flat = [grad.reshape(tokens, -1) for grad in grads]
        g = (flat[0] if len(flat) == 1 else torch.cat(flat, dim=1)).to(dtype)  # [tokens, outs]
        gh = h.new_empty(h.shape[1], tokens)  # h's gradient, transposed: each block's rows contiguous
        gb = b.new_empty(b.shape)
        for ghi, gbi, gi, hi, bi in zip(
            gh.split(ranks), gb.split(outs), g.split(outs, dim=1), h.split(ranks, dim=1), b.split(outs), strict=True
        ):
            torch.addmm(ghi, bi.t(), gi.t(), beta=0, alpha=scale, out=ghi)
            torch.addmm(gbi, gi.t(), hi, beta=0, alpha=scale, out=gbi)
        ga = torch.mm(gh, x2).to(ctx.factor_dtypes[0])
        gb = gb.to(ctx.factor_dtypes[1])
        gx = None
        if ctx.needs_input_grad[0]:
            gx = torch.mm(g, group.weight.to(dtype)).addmm_(gh.t(), a).view(ctx.shape).to(ctx.x_dtype)
        return gx, None, None, *ga.split(ranks), *gb.split(outs)


def _inputs(model: nn.Module, layers: Sequence[nn.Module]) -> dict[nn.Module, torch.Tensor]:
    """The input each of ``layers`` reads in one forward of ``model`` over two tokens."""
    seen: dict[nn.Module, torch.Tensor] = {}
    if not layers:
        return seen
    handles = [layer.register_forward_pre_hook(lambda m, args: seen.setdefault(m, args[0])) for layer in layers]
    weight = layers[0].base_layer.weight  # a base below float32 runs the float32 factors under autocast to it
    autocast = torch.autocast(weight.device.type, dtype=weight.dtype, enabled=weight.dtype in (torch.bfloat16, torch.float16))
    try:
        with torch.no_grad(), autocast:
            model(input_ids=torch.zeros((1, 2), dtype=torch.long, device=weight.device))
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _readers(group: Sequence[LoraLinear], inputs: dict[nn.Module, torch.Tensor]) -> list[list[LoraLinear]]:
    """``group`` split into the layers that read one input (in order), each other layer alone."""
    split: list[list[LoraLinear]] = []
    for layer in group:
        read = inputs.get(layer)
        together = next((s for s in split if read is not None and inputs.get(s[0]) is read), None)
        if together is None:
            split.append([layer])
        else:
            together.append(layer)
    return split


def _joined_or_alone(layers: list[LoraLinear]) -> list[JoinedLoRA]:
    """``layers`` as one group where they can join; else each that can run this way alone (see the module doc)."""
    if len(layers) > 1 and all(_plain(layer) for layer in layers) and _alike(layers):
        adapter = next(iter(layers[0].lora_A))
        lay_out([layer.lora_A[adapter] for layer in layers], trainable=True)
        lay_out([layer.lora_B[adapter] for layer in layers], trainable=True)
        return [JoinedLoRA(layers)]
    return [JoinedLoRA([layer]) for layer in layers if _plain(layer) and _alike([layer])]


def _plain(layer: LoraLinear) -> bool:
    """Whether ``layer`` is a plain LoRA linear layer: one adapter, active, no dropout, variant or LoRA bias."""
    if type(layer) is not LoraLinear or len(layer.lora_A) != 1 or layer.merged or layer.disable_adapters:
        return False
    (adapter,) = layer.lora_A
    base = layer.base_layer
    return (
        layer.active_adapters == [adapter]
        and adapter not in layer.lora_variant
        and isinstance(layer.lora_dropout[adapter], nn.Identity)
        and layer.lora_A[adapter].bias is None
        and layer.lora_B[adapter].bias is None
        and type(base) is nn.Linear
        and not base.weight.requires_grad
        and (base.bias is None or not base.bias.requires_grad)
        and layer.lora_A[adapter].weight.dtype == layer.lora_B[adapter].weight.dtype
    )


def _alike(layers: Sequence[LoraLinear]) -> bool:
    """Whether ``layers`` (plain ones; one alone too) can compute as one: one rank, scale and factor dtype, base
    weights back to back, biases for all or none."""
    first = layers[0]
    (adapter,) = first.lora_A
    return (
        len({(layer.r[adapter], layer.scaling[adapter], layer.lora_A[adapter].weight.dtype) for layer in layers}) == 1
        and len({next(iter(layer.lora_A)) for layer in layers}) == 1
        and len({layer.base_layer.bias is None for layer in layers}) == 1
        and joined([layer.base_layer.weight for layer in layers]) is not None
    )
