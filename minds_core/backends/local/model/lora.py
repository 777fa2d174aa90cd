"""LoRA adapters (peft) on a shared frozen base model, and their weights as plain tensors."""

from __future__ import annotations

import copy
import itertools
import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from torch import nn
from transformers import PreTrainedModel

from .errors import LocalBadRequestError

__all__ = ["AdapterState", "LoraSpec", "adapter_state", "attach_lora", "load_adapter_state", "target_modules"]

AdapterState = dict[str, torch.Tensor]
"""Adapter weights keyed as in a peft ``adapter_model.safetensors``."""

_ATTENTION_PARTS = ("attn", "attention")
_MLP_PARTS = ("mlp", "feed_forward", "ffn")


@dataclass(frozen=True)
class LoraSpec:
    """What a LoRA training run adapts. ``alpha`` is fixed, so the LoRA scale is ``alpha / rank``."""

    rank: int
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True
    alpha: float = 32.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (stored in checkpoints)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoraSpec:
        """The inverse of ``to_json``."""
        return cls(**data)


def attach_lora(base: PreTrainedModel, spec: LoraSpec, seed: int) -> PeftModel:
    """A new peft model over ``base``'s weights (shared, not copied) with a fresh adapter.

    The module tree is copied so that each adapter gets its own LoRA layers, while
    every frozen base tensor stays one object in memory. ``lora_A`` is initialised
    from ``seed`` without touching torch's global RNG; ``lora_B`` starts at zero.
    """
    if spec.rank < 1:
        raise LocalBadRequestError(f"LoRA rank must be a positive integer, got {spec.rank}")
    shared = {id(t): t for t in itertools.chain(base.parameters(), base.buffers())}
    tree = copy.deepcopy(base, shared)
    config = LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=0.0,
        bias="none",
        target_modules=target_modules(tree, spec),
    )
    with warnings.catch_warnings():  # peft reads a deprecated transformers property: noise for our users
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = get_peft_model(tree, config)
    generator = torch.Generator().manual_seed(seed)  # drawn on the CPU: the same start on every device
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_A." in name:
                drawn = torch.empty(param.shape, dtype=param.dtype)
                nn.init.kaiming_uniform_(drawn, a=math.sqrt(5), generator=generator)
                param.copy_(drawn)
    model.eval()
    return model


def target_modules(model: PreTrainedModel, spec: LoraSpec) -> list[str]:
    """Names of the linear layers of ``model`` that ``spec`` adapts."""
    unembed = model.get_output_embeddings()
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        parents = name.split(".")[:-1]
        if module is unembed:
            wanted = spec.train_unembed
        elif any(part in parent for parent in parents for part in _ATTENTION_PARTS):
            wanted = spec.train_attn
        elif any(part in parent for parent in parents for part in _MLP_PARTS):
            wanted = spec.train_mlp
        else:
            wanted = False
        if wanted:
            names.append(name)
    if not names:
        raise LocalBadRequestError(
            f"No LoRA target modules for train_attn={spec.train_attn}, train_mlp={spec.train_mlp}, "
            f"train_unembed={spec.train_unembed} in a {model.config.model_type!r} model: "
            "enable at least one group of linear layers that the model has"
        )
    return names


def adapter_state(model: PeftModel) -> AdapterState:
    """A detached CPU copy of the adapter weights (a snapshot: later training leaves it unchanged)."""
    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    return {key: value.detach().to("cpu", copy=True) for key, value in state.items()}


def load_adapter_state(model: PeftModel, state: AdapterState) -> None:
    """Copy ``state`` into ``model``'s adapter; every adapter weight must be covered."""
    expected = get_peft_model_state_dict(model, save_embedding_layers=False)
    if missing := sorted(set(expected) - set(state)):
        raise LocalBadRequestError(f"Adapter weights are missing {len(missing)} tensors, e.g. {missing[0]!r}")
    if wrong := [name for name, tensor in expected.items() if state[name].shape != tensor.shape]:
        name = wrong[0]
        raise LocalBadRequestError(
            f"Adapter weights do not fit this model: {name!r} has shape {tuple(state[name].shape)}, "
            f"the model's {tuple(expected[name].shape)} ({len(wrong)} tensors differ)"
        )
    result = set_peft_model_state_dict(model, state)
    if result.unexpected_keys:
        raise LocalBadRequestError(
            f"Adapter weights do not fit this model: unexpected {sorted(result.unexpected_keys)[:3]}"
        )
