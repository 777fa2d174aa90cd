"""One decode step of a Llama-family model as plain tensor ops over ``KVSlots``: a fixed set of kernels.

For the architectures whose layers are exactly RMSNorm -> attention (q/k/v/o
projections, optional per-head q/k RMSNorm as in Qwen3, rotary positions) ->
RMSNorm -> SiLU-gated MLP (Llama, Mistral, Qwen2, Qwen3), ``FastDecoder``
runs a decode step straight off the module's weights (the same tensors, no
copy), without transformers' per-module overhead, and with no value that
changes per step outside a tensor: positions come from the slots' device
tensor, rotary angles from a table built once. So the step can be captured as
a CUDA graph (``cuda_graphs``). A peft model with unmerged LoRA layers (a
sampler whose placement keeps adapters unmerged, see ``adapted_models``) decodes the same way, each adapted
layer adding its LoRA term as peft computes it: in the adapter's dtype, cast
back to the layer's. Layers that read one input (q/k/v; gate/up) run as one
matrix product where their weights lie back to back in one buffer, as the base
model's (``models``) and a merged sampler's (``adapted_models``) do
(``sibling_weights``): one view over that memory, so a snapshot merged in place
later shows through it; their biases side by side in a copy made once (biases
are frozen). Elsewhere each layer runs a product of its own. Their unmerged
LoRA terms run together: their ``A`` factors stacked, their ``B`` factors (times
the LoRA scale) in one block-diagonal matrix, copied from the adapter by
``refresh``. Any other model decodes through its own ``forward``; prefill
always does.

Between the matrix products a step's math is elementwise: RMSNorms, the
rotation of queries and keys, residual adds, the softmax, the SiLU gate. Run
eagerly, each op is a kernel of its own (a few microseconds each, hundreds a
step on a GPU). ``StepMath`` holds that math as five functions (norm,
add-and-norm, norm-and-rotate, softmax, gate); given a ``torch.compile`` mode
(``Placement.decode_compile``) it compiles them, so that inductor fuses each
into a kernel or two. Only the rows (and the softmax's attended columns) vary
between calls: the first call compiles for its shapes, a call with another size
once more with that size dynamic (a single row compiles apart), and later
buckets do not recompile. The compiled kernels are plain launches, so
``cuda_graphs`` captures them like any other (each step shape runs once before
its capture, so no compile happens inside one). Where compiling fails the math
runs eagerly from then on, logged once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from minds_core.base.logs import get_logger

from ..model.accelerator import EVENTS
from ..model.placement import COMPILE_MODES
from ..model.sibling_weights import joined
from .kv_slots import KVSlots

__all__ = ["FastDecoder", "StepMath"]

log = get_logger("sampler")

_ARCHITECTURES = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
_ROPE_TYPES = frozenset({"default", "linear", "llama3"})  # inverse frequencies fixed at load time


class _Projection:
    """Linear layers that read one input, as one: their outputs side by side (one matrix product where their
    weights lie back to back, else one per layer), and their unmerged LoRA terms (if any) in two matrix products
    for all of them; see the module doc."""

    def __init__(self, modules: list[nn.Module]) -> None:
        bases = [getattr(module, "base_layer", module) for module in modules]
        self.weights = [base.weight for base in bases]  # the modules' own tensors
        self.biases = [base.bias for base in bases]
        self.weight: torch.Tensor | None = None
        """All the weights as one view of their memory (``sibling_weights.joined``; a lone layer's own weight), or
        None: one product each."""
        self.bias: torch.Tensor | None = None
        """With ``weight``: the biases side by side (a copy: biases are frozen; a lone layer's own bias), or None
        where there are none."""
        if len(bases) == 1:
            self.weight, self.bias = self.weights[0], self.biases[0]
        elif len({bias is None for bias in self.biases}) == 1:
            self.weight = joined(self.weights)
            if self.weight is not None and self.biases[0] is not None:
                self.bias = torch.cat(self.biases)
        self.lora_a = self.lora_b = None
        self._loras: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        if modules[0] is not bases[0]:  # peft LoRA layers (never merged by peft here): one adapter per sampler
            for module in modules:
                (adapter,) = module.active_adapters
                a, b = module.lora_A[adapter].weight, module.lora_B[adapter].weight
                self._loras.append((a, b, float(module.scaling[adapter])))
            ranks, outs = sum(a.shape[0] for a, _, _ in self._loras), sum(b.shape[0] for _, b, _ in self._loras)
            a = self._loras[0][0]
            self.lora_a = a.new_empty(ranks, a.shape[1])
            self.lora_b = a.new_zeros(outs, ranks)
            self.refresh()

    def refresh(self) -> None:
        """Copy the adapter's current factors into the stacked ones (in place: captured steps read them)."""
        rank = out = 0
        for a, b, scale in self._loras:
            assert self.lora_a is not None and self.lora_b is not None
            self.lora_a[rank : rank + a.shape[0]] = a
            self.lora_b[out : out + b.shape[0], rank : rank + a.shape[0]] = b * scale
            rank, out = rank + a.shape[0], out + b.shape[0]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is not None:
            y = F.linear(x, self.weight, self.bias)
        else:
            y = torch.cat([F.linear(x, weight, bias) for weight, bias in zip(self.weights, self.biases, strict=True)], -1)
        if self.lora_a is None or self.lora_b is None:  # set together: plain layers
            return y
        lora = F.linear(F.linear(x.to(self.lora_a.dtype), self.lora_a), self.lora_b)
        return (y + lora).to(x.dtype)


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: _Projection
    o: _Projection
    qk_norm: torch.Tensor | None  # per-head RMSNorm weights of the query heads then the key heads [Hq + Hk, D]
    post_norm: torch.Tensor
    gate_up: _Projection
    down: _Projection
    scaling: float


class FastDecoder:
    """Decode steps of one Llama-family model over ``KVSlots``; ``for_model`` says whether it applies."""

    def __init__(self, model: nn.Module, compile_mode: str | None = None) -> None:
        inner = model.model
        config = model.config
        self.eps = float(config.rms_norm_eps)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        self.query_heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.embed = inner.embed_tokens.weight
        self.final_norm = inner.norm.weight
        self.unembed = _Projection([model.lm_head])
        self._cos, self._sin = _rotations(
            inner.rotary_emb.inv_freq,
            float(getattr(inner.rotary_emb, "attention_scaling", 1.0)),
            int(config.max_position_embeddings),
            self.embed.dtype,
        )
        self._no_mask = self.embed.new_zeros(1, 1, 1)  # ignored (beta 0), but baddbmm takes one
        self.layers = [
            _Layer(
                input_norm=layer.input_layernorm.weight,
                qkv=_Projection([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]),
                o=_Projection([layer.self_attn.o_proj]),
                qk_norm=self._qk_norm(layer.self_attn),
                post_norm=layer.post_attention_layernorm.weight,
                gate_up=_Projection([layer.mlp.gate_proj, layer.mlp.up_proj]),
                down=_Projection([layer.mlp.down_proj]),
                scaling=float(layer.self_attn.scaling),
            )
            for layer in inner.layers
        ]
        self._next_norms = [layer.input_norm for layer in self.layers[1:]] + [self.final_norm]
        self.math = StepMath(compile_mode)

    def _qk_norm(self, attention: nn.Module) -> torch.Tensor | None:
        if not hasattr(attention, "q_norm"):
            return None
        query = attention.q_norm.weight.expand(self.query_heads, -1)
        key = attention.k_norm.weight.expand(self.kv_heads, -1)
        return torch.cat((query, key))

    @property
    def adapted(self) -> bool:
        """Whether the model has unmerged LoRA layers."""
        return any(projection.lora_a is not None for projection in self._projections())

    def _projections(self) -> list[_Projection]:
        return [self.unembed, *(p for layer in self.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down))]

    def held(self) -> list[torch.Tensor]:
        """Every tensor a step reads: the model's own weights and this decoder's tables and stacked LoRA factors."""
        tensors = [self.embed, self.final_norm, self._cos, self._sin, self._no_mask]
        for layer in self.layers:
            tensors += [layer.input_norm, layer.post_norm, *([] if layer.qk_norm is None else [layer.qk_norm])]
        for projection in self._projections():
            biases = [*projection.biases, projection.bias]  # ``bias``: the joined biases' copy, or a lone layer's own
            tensors += [*projection.weights, *(bias for bias in biases if bias is not None)]
            tensors += [t for t in (projection.lora_a, projection.lora_b) if t is not None]
        return tensors

    def refresh(self) -> None:
        """Take up the adapter's current weights (a new snapshot loaded into the same module tree)."""
        for projection in self._projections():
            projection.refresh()

    @classmethod
    def for_model(cls, model: nn.Module, compile_mode: str | None = None) -> FastDecoder | None:
        """A fast decoder for ``model`` (its elementwise math compiled in ``compile_mode``, if given: ``StepMath``),
        or None when its architecture is not one this module reproduces."""
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
        return cls(model, compile_mode)

    def forward(self, slots: KVSlots, token_ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, V]`` after feeding each row of the slots' window its token ``token_ids[row]`` at the
        row's position (its key/value written there; the positions themselves stay as they are)."""
        x = self.embed[token_ids]
        rows, groups = x.shape[0], self.query_heads // self.kv_heads
        positions = slots.positions[:rows]
        cos, sin = self._cos[positions][:, None], self._sin[positions][:, None]  # [rows, 1, head_dim]
        if slots.aligned:  # every row that goes on attends to every column: nothing to hide
            mask, beta = self._no_mask, 0.0
        else:
            # The mask as the scores' matrix products lay them out: [rows * kv heads, query heads per kv head,
            # columns].
            mask = slots.mask(x.dtype)[:, None, None].expand(rows, self.kv_heads, groups, -1)
            mask, beta = mask.reshape(rows * self.kv_heads, groups, -1), 1.0
        qk_width = (self.query_heads + self.kv_heads) * self.head_dim
        math, eps = self.math, self.eps
        h = math.norm(x, self.layers[0].input_norm, eps)
        for index, (layer, next_norm) in enumerate(zip(self.layers, self._next_norms, strict=True)):
            # Queries and keys side by side: one norm and one rotation for both.
            qkv = layer.qkv(h)
            # One query per row: each key/value head's group of query heads against that row's keys,
            # stored transposed, so that ``keys.transpose`` is the layout the product reads fastest.
            qk, v = qkv.split((qk_width, qkv.shape[-1] - qk_width), dim=-1)
            q, k = math.rotate(qk.view(rows, -1, self.head_dim), layer.qk_norm, cos, sin, eps, self.kv_heads)
            v = v.view(rows, -1, self.head_dim)
            keys, values = slots.update(k[:, :, None], v[:, :, None], index)
            keys_t = keys.transpose(-1, -2).reshape(rows * self.kv_heads, self.head_dim, -1)
            scores = torch.baddbmm(mask, q, keys_t, beta=beta, alpha=layer.scaling)
            probs = math.probs(scores, values.dtype)
            attended = torch.bmm(probs, values.reshape(rows * self.kv_heads, -1, self.head_dim))
            x, h = math.add_norm(x, layer.o(attended.view(rows, -1)), layer.post_norm, eps)
            x, h = math.add_norm(x, layer.down(math.gate(layer.gate_up(h))), next_norm, eps)
        return self.unembed(h)


class StepMath:
    """The elementwise math of a decode step (see the module doc): eager, or compiled by ``torch.compile`` in
    ``mode`` (one of ``COMPILE_MODES``) until compiling fails. Its functions, attributes (eager: the plain
    functions themselves, nothing in between):

    * ``norm(x, weight, eps)``: RMSNorm of ``x`` scaled by ``weight``, as Llama and Qwen compute it;
    * ``add_norm(x, delta, weight, eps)``: the residual stream ``x + delta``, and its ``norm``;
    * ``rotate(qk, qk_norm, cos, sin, eps, kv_heads)``: queries then keys ``[rows, heads, head_dim]``, normed
      per head (where ``qk_norm`` is not None) and rotated by the rows' ``cos`` and ``sin`` ``[rows, 1, head_dim]``;
      the queries grouped by key/value head ``[rows * kv_heads, query heads per kv head, head_dim]``, and the keys
      ``[rows, kv_heads, head_dim]``;
    * ``probs(scores, dtype)``: the softmax of ``scores`` over the last dim, computed in float32, in ``dtype``;
    * ``gate(gate_up)``: ``silu(gate) * up`` of the gate and up projections side by side.
    """

    def __init__(self, mode: str | None = None) -> None:
        assert mode is None or mode in COMPILE_MODES, mode  # ``Placement`` checks what users set
        self.mode = mode
        self.failure: str | None = None
        """Why the math runs eagerly though a mode was given (the first compile error), else None."""
        compiled = _compiled(mode) if mode is not None else {}
        self.norm, self.add_norm, self.rotate, self.probs, self.gate = (
            self._fallible(function, compiled[function]) if compiled else function for function in _FUNCTIONS
        )

    @property
    def compiled(self) -> bool:
        """Whether the math runs compiled (a mode was given, and compiling has not failed)."""
        return self.mode is not None and self.failure is None

    def _fallible(self, function: Callable, compiled: Callable) -> Callable:
        """``compiled``, or ``function`` from the first failure of any of this math's compiled functions on."""

        def run(*args: object):  # the result of ``function``
            if self.failure is None:
                try:
                    return compiled(*args)
                except Exception as exc:  # noqa: BLE001 - a failed compile: the math runs eagerly from now on
                    self.failure = _reason(exc)
                    EVENTS.count("compile_fallbacks")
                    log.warning(
                        "decode math runs eagerly: torch.compile failed", mode=self.mode, reason=self.failure,
                        off='set local.compile = "off" to compile nothing',
                    )  # fmt: skip
            return function(*args)

        return run


def _reason(exc: Exception) -> str:
    """What failed, in a line: the exception's type and its message's first two lines (inductor's first line names
    only the backend, its second the error)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join([f"{type(exc).__name__}:", *lines[:2]])[:400]


def _compile(function: Callable, mode: str) -> Callable:
    """``function`` compiled by inductor in ``mode`` (lazily: on its first call)."""
    return torch.compile(function, mode=mode)


_compiled_by_mode: dict[str, dict[Callable, Callable]] = {}


def _compiled(mode: str) -> dict[Callable, Callable]:
    """The step's functions compiled in ``mode``, shared by every ``StepMath`` of the process (compiled code is
    kept per ``torch.compile`` wrapper: one wrapper per function compiles each shape once)."""
    if mode not in _compiled_by_mode:
        _compiled_by_mode[mode] = {function: _compile(function, mode) for function in _FUNCTIONS}
    return _compiled_by_mode[mode]


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Llama and Qwen compute it: in float32, scaled after casting back."""
    if x.dtype == torch.float32:
        return _rms_norm(x, eps) * weight
    return weight * _rms_norm(x.float(), eps).to(x.dtype)


def _add_norm(
    x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    x = x + delta
    return x, _norm(x, weight, eps)


def _rotate(
    qk: torch.Tensor, qk_norm: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, eps: float, kv_heads: int
) -> tuple[torch.Tensor, torch.Tensor]:
    if qk_norm is not None:
        qk = _norm(qk, qk_norm, eps)
    qk = torch.addcmul(qk * cos, qk.roll(qk.shape[-1] // 2, dims=-1), sin)
    rows, heads, head_dim = qk.shape
    q, k = qk.split((heads - kv_heads, kv_heads), dim=1)
    return q.reshape(rows * kv_heads, -1, head_dim), k


def _probs(scores: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return scores.softmax(dim=-1, dtype=torch.float32).to(dtype)


def _gate(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


_FUNCTIONS = (_norm, _add_norm, _rotate, _probs, _gate)
"""``StepMath``'s functions, in the order of its attributes."""


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
    """``x / sqrt(mean(x^2) + eps)`` over the last dim: torch's ``rms_norm`` on a GPU (one fused kernel), on the
    CPU as ``layer_norm`` of ``[x, -x]`` (whose mean is 0 and whose variance is ``mean(x^2)``): one fused kernel,
    where torch's CPU ``rms_norm`` runs several small ops."""
    if x.is_cuda:
        return F.rms_norm(x, (x.shape[-1],), eps=eps)
    width = x.shape[-1]
    return torch.layer_norm(torch.cat((x, -x), dim=-1), (2 * width,), None, None, eps).narrow(-1, 0, width)
