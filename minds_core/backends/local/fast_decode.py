"""One decode step of a Llama-family model as plain tensor ops over ``KVSlots``: a fixed set of kernels.

For the architectures whose layers are exactly RMSNorm -> attention (q/k/v/o
projections, optional per-head q/k RMSNorm as in Qwen3, rotary positions) ->
RMSNorm -> SiLU-gated MLP (Llama, Mistral, Qwen2, Qwen3), ``FastDecoder``
runs a decode step straight off the module's weights (the same tensors, no
copy), without transformers' per-module overhead, and with no value that
changes per step outside a tensor: positions come from the slots' device
tensor, rotary angles from a table built once. So the step can be captured as
a CUDA graph (``cuda_graphs``). A peft model with unmerged LoRA layers (a
sampler on a bf16 base, see ``merged``) decodes the same way, each adapted
layer adding its LoRA term as peft computes it: in the adapter's dtype, cast
back to the layer's. Any other model decodes through its own ``forward``;
prefill always does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .kv_slots import KVSlots

__all__ = ["FastDecoder"]

_ARCHITECTURES = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
_ROPE_TYPES = frozenset({"default", "linear", "llama3"})  # inverse frequencies fixed at load time


@dataclass(frozen=True)
class _Linear:
    """A linear layer's weight and bias (the module's own tensors), and its unmerged LoRA factors if any."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    lora_a: torch.Tensor | None = None
    lora_b: torch.Tensor | None = None
    scaling: float = 1.0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        if self.lora_a is None or self.lora_b is None:  # set together: a plain layer
            return y
        lora = F.linear(F.linear(x.to(self.lora_a.dtype), self.lora_a), self.lora_b)
        return (y + lora * self.scaling).to(x.dtype)


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor
    q: _Linear
    k: _Linear
    v: _Linear
    o: _Linear
    qk_norm: torch.Tensor | None  # per-head RMSNorm weights of the query heads then the key heads [Hq + Hk, D]
    post_norm: torch.Tensor
    gate: _Linear
    up: _Linear
    down: _Linear
    scaling: float


def _linear(module: nn.Module) -> _Linear:
    base = getattr(module, "base_layer", None)
    if base is None:
        return _Linear(module.weight, module.bias)
    (adapter,) = module.active_adapters  # a peft LoRA layer (never merged by peft here): one adapter per sampler
    return _Linear(
        base.weight,
        base.bias,
        module.lora_A[adapter].weight,
        module.lora_B[adapter].weight,
        float(module.scaling[adapter]),
    )


class FastDecoder:
    """Decode steps of one Llama-family model over ``KVSlots``; ``for_model`` says whether it applies."""

    def __init__(self, model: nn.Module) -> None:
        inner = model.model
        config = model.config
        self.eps = float(config.rms_norm_eps)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        self.query_heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.embed = inner.embed_tokens.weight
        self.final_norm = inner.norm.weight
        self.unembed = _linear(model.lm_head)
        self._cos, self._sin = _rotations(
            inner.rotary_emb.inv_freq,
            float(getattr(inner.rotary_emb, "attention_scaling", 1.0)),
            int(config.max_position_embeddings),
            self.embed.dtype,
        )
        self.layers = [
            _Layer(
                input_norm=layer.input_layernorm.weight,
                q=_linear(layer.self_attn.q_proj),
                k=_linear(layer.self_attn.k_proj),
                v=_linear(layer.self_attn.v_proj),
                o=_linear(layer.self_attn.o_proj),
                qk_norm=self._qk_norm(layer.self_attn),
                post_norm=layer.post_attention_layernorm.weight,
                gate=_linear(layer.mlp.gate_proj),
                up=_linear(layer.mlp.up_proj),
                down=_linear(layer.mlp.down_proj),
                scaling=float(layer.self_attn.scaling),
            )
            for layer in inner.layers
        ]

    def _qk_norm(self, attention: nn.Module) -> torch.Tensor | None:
        if not hasattr(attention, "q_norm"):
            return None
        query = attention.q_norm.weight.expand(self.query_heads, -1)
        key = attention.k_norm.weight.expand(self.kv_heads, -1)
        return torch.cat((query, key))

    @classmethod
    def for_model(cls, model: nn.Module) -> FastDecoder | None:
        """A fast decoder for ``model``, or None when its architecture is not one this module reproduces."""
        if hasattr(model, "get_base_model"):  # a peft model (``attach_lora``'s: LoRA without DoRA, in eval mode)
            model = model.get_base_model()
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

    def forward(self, slots: KVSlots, token_ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, V]`` after feeding each row of the slots' window its token ``token_ids[row]`` at the
        row's position (its key/value written there; the positions themselves stay as they are)."""
        x = self.embed[token_ids]
        rows, groups = x.shape[0], self.query_heads // self.kv_heads
        positions = slots.positions[:rows]
        cos, sin = self._cos[positions][:, None], self._sin[positions][:, None]  # [rows, 1, head_dim]
        # The mask as the scores' matrix products lay them out: [rows * kv heads, query heads per kv head, columns].
        mask = slots.mask(x.dtype)[:, None, None].expand(rows, self.kv_heads, groups, -1)
        mask = mask.reshape(rows * self.kv_heads, groups, -1)
        half = self.head_dim // 2
        for index, layer in enumerate(self.layers):
            h = self._norm(x, layer.input_norm)
            # Queries and keys side by side: one norm and one rotation for both.
            qk = torch.cat((layer.q(h), layer.k(h)), dim=-1).view(rows, -1, self.head_dim)
            v = layer.v(h).view(rows, -1, self.head_dim)
            if layer.qk_norm is not None:
                qk = self._norm(qk, layer.qk_norm)
            qk = torch.addcmul(qk * cos, qk.roll(half, dims=-1), sin)
            keys, values = slots.update(qk[:, self.query_heads :, None], v[:, :, None], index)
            # One query per row: each key/value head's group of query heads against that row's keys,
            # stored transposed, so that ``keys.transpose`` is the layout the product reads fastest.
            q = qk[:, : self.query_heads].reshape(rows * self.kv_heads, groups, self.head_dim)
            keys_t = keys.transpose(-1, -2).reshape(rows * self.kv_heads, self.head_dim, -1)
            scores = torch.baddbmm(mask, q, keys_t, alpha=layer.scaling)
            probs = scores.softmax(dim=-1, dtype=torch.float32).to(values.dtype)
            attended = torch.bmm(probs, values.reshape(rows * self.kv_heads, -1, self.head_dim))
            x = x + layer.o(attended.view(rows, -1))
            h = self._norm(x, layer.post_norm)
            x = x + layer.down(F.silu(layer.gate(h)) * layer.up(h))
        return self.unembed(self._norm(x, self.final_norm))

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm as Llama and Qwen compute it: in float32, scaled after casting back."""
        if x.dtype == torch.float32:
            return _rms_norm(x, self.eps) * weight
        return weight * _rms_norm(x.float(), self.eps).to(x.dtype)


def _rotations(
    inv_freq: torch.Tensor, scaling: float, positions: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tables of the rotary cosines and sines ``[positions, head_dim]``. Rotating half the dims is rolling them by
    half with the first half negated: the sines carry that sign."""
    angles = torch.arange(positions, device=inv_freq.device).float()
    freqs = angles[:, None] * inv_freq.float()
    cos = (torch.cat((freqs, freqs), dim=-1).cos() * scaling).to(dtype)
    sin = (torch.cat((-freqs, freqs), dim=-1).sin() * scaling).to(dtype)
    return cos, sin


def _rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps)`` over the last dim, as ``layer_norm`` of ``[x, -x]`` (whose mean is 0 and
    whose variance is ``mean(x^2)``): one fused kernel, where torch's CPU ``rms_norm`` runs several small ops."""
    width = x.shape[-1]
    return F.layer_norm(torch.cat((x, -x), dim=-1), (2 * width,), eps=eps)[..., :width]
