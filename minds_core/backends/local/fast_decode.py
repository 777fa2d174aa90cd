"""One decode step of a Llama-family model as plain tensor ops, without transformers' per-module overhead.

On small models a decode step is mostly Python: transformers' module calls,
output records and config look-ups cost about as much as the matmuls. For the
architectures whose layers are exactly RMSNorm -> attention (q/k/v/o
projections, optional per-head q/k RMSNorm as in Qwen3, rotary positions) ->
RMSNorm -> SiLU-gated MLP (Llama, Mistral, Qwen2, Qwen3), ``FastDecoder``
runs that step straight off the module's weights (the same tensors, no copy).
Any other model decodes through its own ``forward``. Prefill always does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .kv_buffer import KVBuffer

__all__ = ["FastDecoder"]

_ARCHITECTURES = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
_ROPE_TYPES = frozenset({"default", "linear", "llama3"})  # inverse frequencies fixed at load time


_Linear = tuple[torch.Tensor, torch.Tensor | None]
"""A linear layer's weight and bias (the module's own tensors)."""


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor
    q: _Linear
    k: _Linear
    v: _Linear
    o: _Linear
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    post_norm: torch.Tensor
    gate: _Linear
    up: _Linear
    down: _Linear
    scaling: float


def _linear(module: nn.Linear) -> _Linear:
    return module.weight, module.bias


def _apply(layer: _Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, layer[0], layer[1])


class FastDecoder:
    """Decode steps of one Llama-family model over a ``KVBuffer``; ``for_model`` says whether it applies."""

    def __init__(self, model: nn.Module) -> None:
        inner = model.model
        config = model.config
        self.eps = float(config.rms_norm_eps)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        self.embed = inner.embed_tokens.weight
        self.final_norm = inner.norm.weight
        self.unembed = _linear(model.lm_head)
        self.inv_freq = inner.rotary_emb.inv_freq
        self.rope_scaling = float(getattr(inner.rotary_emb, "attention_scaling", 1.0))
        self.layers = [
            _Layer(
                input_norm=layer.input_layernorm.weight,
                q=_linear(layer.self_attn.q_proj),
                k=_linear(layer.self_attn.k_proj),
                v=_linear(layer.self_attn.v_proj),
                o=_linear(layer.self_attn.o_proj),
                q_norm=layer.self_attn.q_norm.weight if hasattr(layer.self_attn, "q_norm") else None,
                k_norm=layer.self_attn.k_norm.weight if hasattr(layer.self_attn, "k_norm") else None,
                post_norm=layer.post_attention_layernorm.weight,
                gate=_linear(layer.mlp.gate_proj),
                up=_linear(layer.mlp.up_proj),
                down=_linear(layer.mlp.down_proj),
                scaling=float(layer.self_attn.scaling),
            )
            for layer in inner.layers
        ]

    @classmethod
    def for_model(cls, model: nn.Module) -> FastDecoder | None:
        """A fast decoder for ``model``, or None when its architecture is not one this module reproduces."""
        config = getattr(model, "config", None)
        if type(model).__name__ not in _ARCHITECTURES or config is None:
            return None
        rope = getattr(config, "rope_parameters", None) or {}
        if (
            getattr(config, "hidden_act", None) != "silu"
            or rope.get("rope_type", "default") not in _ROPE_TYPES
            or any(getattr(layer.self_attn, "sliding_window", None) for layer in model.model.layers)
            or getattr(config, "mlp_bias", False)
        ):
            return None
        return cls(model)

    def step(self, cache: KVBuffer, token_ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, V]`` after feeding each row its token ``token_ids[row]``; the cache advances."""
        positions, mask = cache.step_inputs(self.embed.dtype)
        x = self.embed[token_ids]
        rows = x.shape[0]
        freqs = positions.float() * self.inv_freq.float()
        angles = torch.cat((freqs, freqs), dim=-1)
        cos = (angles.cos() * self.rope_scaling).to(x.dtype)[:, None, :]
        sin = (angles.sin() * self.rope_scaling).to(x.dtype)[:, None, :]
        for index, layer in enumerate(self.layers):
            h = self._norm(x, layer.input_norm)
            q = _apply(layer.q, h).view(rows, -1, self.head_dim)
            k = _apply(layer.k, h).view(rows, -1, self.head_dim)
            v = _apply(layer.v, h).view(rows, -1, self.head_dim)
            if layer.q_norm is not None:
                q = self._norm(q, layer.q_norm)
            if layer.k_norm is not None:
                k = self._norm(k, layer.k_norm)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys, values = cache.update(k[:, :, None], v[:, :, None], index)
            attended = F.scaled_dot_product_attention(
                q[:, :, None], keys, values, attn_mask=mask, scale=layer.scaling, enable_gqa=True
            )
            x = x + _apply(layer.o, attended.reshape(rows, -1))
            h = self._norm(x, layer.post_norm)
            x = x + _apply(layer.down, F.silu(_apply(layer.gate, h)) * _apply(layer.up, h))
        cache.advance()
        return _apply(self.unembed, self._norm(x, self.final_norm))

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm as Llama and Qwen compute it: in float32, scaled after casting back."""
        if x.dtype == torch.float32:
            return F.rms_norm(x, weight.shape, weight, self.eps)
        return weight * F.rms_norm(x.float(), weight.shape, eps=self.eps).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
