"""The fast decode step equals the model's own forward over the same KV buffer, for each supported family."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from minds_core.backends.local.fast_decode import FastDecoder
from minds_core.backends.local.kv_buffer import KVBuffer
from minds_core.backends.local.kv_cache import cache_argument, returned_cache
from minds_core.backends.local.lora import LoraSpec, attach_lora

SIZES = {
    "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
}


def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "qwen3": Qwen3ForCausalLM(Qwen3Config(**SIZES, head_dim=16)),
        "qwen2-with-qkv-bias": Qwen2ForCausalLM(Qwen2Config(**SIZES)),
        "llama-tied-llama3-rope": LlamaForCausalLM(
            LlamaConfig(
                **SIZES, tie_word_embeddings=True,
                rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 64},
            )
        ),
    }


def filled(model: torch.nn.Module, prompts: list[list[int]]) -> KVBuffer:
    """A buffer holding rows for ``prompts`` (different lengths: rows at different positions)."""
    cache = KVBuffer()
    for prompt in prompts:
        out = model(input_ids=torch.tensor([prompt]), **cache_argument(DynamicCache()))
        cache.add([(layer.keys, layer.values) for layer in returned_cache(out).layers], copies=2, room=40)
    return cache


PROMPT_SETS = {
    "rows-at-different-positions": [[1, 5, 9, 200, 7], list(range(10, 31)), [42]],
    # every row at one position (the samples of one prompt, or prompts of one length): slice writes, no mask
    "rows-at-one-position": [[1, 5, 9, 200, 7], [8, 6, 4, 2, 0]],
}


@pytest.mark.parametrize("prompts", list(PROMPT_SETS.values()), ids=list(PROMPT_SETS))
@pytest.mark.parametrize("name", list(models()))
@torch.inference_mode()
def test_fast_steps_equal_the_models_forward(name: str, prompts: list[list[int]]) -> None:
    model = models()[name].eval()
    fast = FastDecoder.for_model(model)
    assert fast is not None
    theirs, ours = filled(model, prompts), filled(model, prompts)
    uniform = len({len(prompt) for prompt in prompts}) == 1
    assert (ours.uniform_length is not None) == uniform
    tokens = torch.arange(3, 3 + 2 * len(prompts))
    for _ in range(4):
        positions, mask = theirs.step_inputs(torch.float32)
        expected = model(
            input_ids=tokens[:, None], position_ids=positions, attention_mask=mask, **cache_argument(theirs)
        ).logits[:, -1]
        theirs.advance()
        got = fast.step(ours, tokens)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        tokens = expected.argmax(dim=-1)
    assert torch.equal(ours.lengths, theirs.lengths)


@torch.inference_mode()
def test_a_buffer_is_uniform_while_its_rows_share_a_length_and_writes_where_each_row_ends() -> None:
    model = models()["qwen3"].eval()
    cache = filled(model, [[1, 2, 3]])
    assert cache.uniform_length == 3
    cache.add([(torch.zeros(1, 2, 5, 16), torch.zeros(1, 2, 5, 16)) for _ in range(2)], copies=1, room=40)
    assert cache.uniform_length is None  # rows of 3 and 5 tokens
    positions, mask = cache.step_inputs(torch.float32, need_mask=False)
    assert mask is not None and positions[:, 0].tolist() == [3, 3, 5]
    key = torch.arange(3 * 2 * 16, dtype=torch.float32).view(3, 2, 1, 16)
    keys, values = cache.update(key, -key, 0)
    assert torch.equal(keys[0, :, 3], key[0, :, 0]) and torch.equal(keys[2, :, 5], key[2, :, 0])
    assert torch.equal(values[2, :, 5], -key[2, :, 0])
    cache.advance()
    cache.keep(torch.tensor([0, 1]))  # the 5-token row leaves: the rest share a length again
    assert cache.uniform_length == 4
    positions, mask = cache.step_inputs(torch.float32, need_mask=False)
    assert mask is None and positions[:, 0].tolist() == [4, 4]
    keys, values = cache.update(key[:2] + 1, key[:2], 0)
    assert torch.equal(keys[:, :, 4], key[:2, :, 0] + 1) and torch.equal(keys[:, :, 3], key[:2, :, 0])
    _, mask = cache.step_inputs(torch.float32)  # transformers' forward always gets one
    assert mask is not None and not mask.any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.inference_mode()
def test_unmerged_lora_steps_equal_the_peft_models_forward(dtype: torch.dtype) -> None:
    """A sampler on a bf16 base keeps its float32 LoRA unmerged: the fast step adds it as peft does."""
    base = models()["qwen3"].to(dtype).eval()
    model = attach_lora(base, LoraSpec(rank=4, train_unembed=True), seed=0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.1)  # lora_B starts at zero: make the adapter count
    assert {p.dtype for n, p in model.named_parameters() if ".lora_" in n} == {torch.float32}
    fast = FastDecoder.for_model(model)
    assert fast is not None and fast.unembed.lora_a is not None
    prompts = [[1, 5, 9, 200, 7], list(range(10, 31))]
    theirs, ours = filled(model, prompts), filled(model, prompts)
    tokens = torch.tensor([3, 4, 5, 6])
    for _ in range(3):
        positions, mask = theirs.step_inputs(dtype)
        expected = model(
            input_ids=tokens[:, None], position_ids=positions, attention_mask=mask, **cache_argument(theirs)
        ).logits[:, -1]
        theirs.advance()
        got = fast.step(ours, tokens)
        scale = float(expected.abs().max())  # bf16 rounds to 2^-8 of a value: compare relative to the largest
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2 * scale
        torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=tolerance)
        tokens = expected.argmax(dim=-1)


def test_other_architectures_fall_back_to_their_forward() -> None:
    torch.manual_seed(0)
    gelu = Qwen3ForCausalLM(Qwen3Config(**SIZES, head_dim=16, hidden_act="gelu"))
    assert FastDecoder.for_model(gelu) is None
    assert FastDecoder.for_model(torch.nn.Linear(2, 2)) is None
