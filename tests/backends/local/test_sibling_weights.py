"""Sibling projections laid out back to back decode as one matrix product each, with the same logits."""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from minds_core.backends.local import TINY_MODEL
from minds_core.backends.local.model.lora import LoraSpec, attach_lora
from minds_core.backends.local.model.models import BaseModelRegistry
from minds_core.backends.local.model.placement import Placement
from minds_core.backends.local.model.sibling_weights import lay_out, sibling_groups
from minds_core.backends.local.sampling.decode_slots import _ModelForward
from minds_core.backends.local.sampling.fast_decode import FastDecoder

from .test_fast_decode import PROMPT_SETS, models, random_adapter, steps

PROMPTS = PROMPT_SETS["rows-at-different-positions"]


def fused(fast: FastDecoder) -> list[bool]:
    """For each layer, whether its q/k/v and its gate/up projections each hold one weight (one matrix product)."""
    return [p.weight is not None for layer in fast.layers for p in (layer.qkv, layer.gate_up)]


def assert_same_steps(model: nn.Module, fast: FastDecoder, unfused: nn.Module) -> None:
    """``fast``'s decode steps of ``model`` equal those of a decoder of ``unfused`` (a copy of ``model`` whose
    weights are tensors of their own: one product per layer), to float32 rounding."""
    slow = FastDecoder.for_model(unfused)
    assert slow is not None and not any(fused(slow))
    theirs = steps(unfused, PROMPTS, slow.forward, 3)
    for got, expected in zip(steps(model, PROMPTS, fast.forward, 3), theirs, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)  # sums of up to 192 products in another order: float32 rounding reaches 2e-6


def test_siblings_are_grouped_by_parent_and_input_width_in_module_order() -> None:
    model = models()["llama-tied-llama3-rope"]
    groups = sibling_groups(model)
    layer = model.model.layers[0]
    assert groups[:3] == [
        [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj],
        [layer.mlp.gate_proj, layer.mlp.up_proj],
        [layer.mlp.down_proj],
    ]
    assert len(groups) == 3 * 2  # per layer: attention, gate/up, down; the tied unembedding is left out
    assert all(model.lm_head not in group for group in groups)


@torch.inference_mode()
def test_a_merged_tree_decodes_with_one_product_per_group_as_the_unfused_path_does() -> None:
    base = BaseModelRegistry(Placement(torch.device("cpu"), torch.float32, merge_adapters=True)).get(TINY_MODEL)
    spec = LoraSpec(rank=4)
    tree, key = base.adapted.acquire(spec, random_adapter(base.model, spec, seed=1))
    fast = FastDecoder.for_model(tree)
    assert fast is not None and all(fused(fast))
    layer = tree.model.layers[0].self_attn
    assert layer.q_proj.weight.stride()[0] == 1  # on the CPU, laid out transposed
    assert fast.layers[0].qkv.weight.data_ptr() == layer.q_proj.weight.data_ptr()  # a view: no copy
    assert fast.layers[0].qkv.weight.shape[0] == sum(p.weight.shape[0] for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    assert_same_steps(tree, fast, copy.deepcopy(tree))
    base.adapted.release(key, tree)


@torch.inference_mode()
def test_a_transposed_layout_holds_the_same_weights_and_decodes_one_product_per_group() -> None:
    model = models()["qwen3"].eval()
    unfused = copy.deepcopy(model)
    groups = sibling_groups(model)
    for group in groups:
        lay_out(group, transposed=True)
    attention = groups[0]  # q, k, v (and o where it reads as wide an input)
    width = sum(layer.weight.shape[0] for layer in attention)
    assert all(layer.weight.stride() == (1, width) for layer in attention)  # columns of one [in, sum of out] buffer
    for mine, theirs in zip(model.parameters(), unfused.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    fast = FastDecoder.for_model(model)
    assert fast is not None and all(fused(fast))
    qkv = fast.layers[0].qkv.weight
    assert torch.equal(qkv, torch.cat([layer.weight for layer in attention[:3]]))
    attention[1].weight.mul_(2)  # written in place: shows through the joined view
    assert torch.equal(qkv, torch.cat([layer.weight for layer in attention[:3]]))
    attention[1].weight.div_(2)
    assert_same_steps(model, fast, unfused)


@torch.inference_mode()
def test_the_fused_view_reads_the_next_snapshot_merged_into_a_pooled_tree() -> None:
    base = BaseModelRegistry(Placement(torch.device("cpu"), torch.float32, merge_adapters=True)).get(TINY_MODEL)
    spec = LoraSpec(rank=4)
    tree, key = base.adapted.acquire(spec, random_adapter(base.model, spec, seed=1))
    fast = FastDecoder.for_model(tree)  # built once per tree, as the sampler's decode slots are
    assert fast is not None
    before = steps(tree, PROMPTS, fast.forward, 1)[0]
    base.adapted.release(key, tree)
    again, key = base.adapted.acquire(spec, random_adapter(base.model, spec, seed=2))
    assert again is tree
    after = steps(tree, PROMPTS, fast.forward, 1)[0]
    assert (after - before).abs().max() > 1e-2  # the new snapshot counts
    assert_same_steps(tree, fast, copy.deepcopy(tree))
    base.adapted.release(key, tree)


@torch.inference_mode()
def test_the_base_model_is_laid_out_at_load_for_plain_and_unmerged_samplers() -> None:
    placement = Placement(torch.device("cpu"), torch.float32, merge_adapters=False)
    base = BaseModelRegistry(placement).get(TINY_MODEL)
    fast = FastDecoder.for_model(base.model)
    assert fast is not None and all(fused(fast))
    assert_same_steps(base.model, fast, copy.deepcopy(base.model))
    spec = LoraSpec(rank=4)
    tree = attach_lora(base.model, spec, seed=0)
    with torch.no_grad():
        for name, param in tree.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.1)
    unmerged = FastDecoder.for_model(tree)
    assert unmerged is not None and all(fused(unmerged)) and unmerged.layers[0].qkv.lora_a is not None
    assert_same_steps(tree, unmerged, copy.deepcopy(tree))
    assert all(not p.requires_grad for n, p in base.model.named_parameters())


@torch.inference_mode()
def test_qkv_biases_join_the_product() -> None:
    model = models()["qwen2-with-qkv-bias"].eval()
    unfused = copy.deepcopy(model)
    for group in sibling_groups(model):
        lay_out(group)
    fast = FastDecoder.for_model(model)
    assert fast is not None and all(fused(fast))
    assert fast.layers[0].qkv.bias is not None and fast.layers[0].gate_up.bias is None
    held = {id(t) for t in fast.held()}
    assert all(id(layer.qkv.bias) in held for layer in fast.layers)  # the joined biases: copies the decoder holds
    assert_same_steps(model, fast, unfused)
    theirs = steps(model, PROMPTS, _ModelForward(model), 3)  # and transformers' own forward over the laid-out model
    for got, expected in zip(steps(model, PROMPTS, fast.forward, 3), theirs, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@torch.inference_mode()
def test_siblings_out_of_order_or_apart_decode_one_product_each() -> None:
    model = models()["qwen3"].eval()
    unfused = copy.deepcopy(model)
    for layer in model.model.layers:
        attention, mlp = layer.self_attn, layer.mlp
        lay_out([attention.k_proj, attention.q_proj, attention.v_proj])  # one buffer, keys before queries
        lay_out([mlp.gate_proj])  # gate and up in buffers of their own
        lay_out([mlp.up_proj])
    fast = FastDecoder.for_model(model)
    assert fast is not None and not any(fused(fast))
    assert_same_steps(model, fast, unfused)


def test_a_laid_out_base_saves_and_loads_as_before(tmp_path) -> None:
    base = BaseModelRegistry(Placement(torch.device("cpu"), torch.float32)).get(TINY_MODEL)
    base.model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    saved = base.model.state_dict()
    assert loaded.state_dict().keys() == saved.keys()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
