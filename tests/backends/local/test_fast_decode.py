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


@pytest.mark.parametrize("name", list(models()))
@torch.inference_mode()
def test_fast_steps_equal_the_models_forward(name: str) -> None:
    model = models()[name].eval()
    fast = FastDecoder.for_model(model)
    assert fast is not None
    prompts = [[1, 5, 9, 200, 7], list(range(10, 31)), [42]]
    theirs, ours = filled(model, prompts), filled(model, prompts)
    tokens = torch.tensor([3, 4, 5, 6, 7, 8])
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


def test_other_architectures_fall_back_to_their_forward() -> None:
    torch.manual_seed(0)
    gelu = Qwen3ForCausalLM(Qwen3Config(**SIZES, head_dim=16, hidden_act="gelu"))
    assert FastDecoder.for_model(gelu) is None
    assert FastDecoder.for_model(torch.nn.Linear(2, 2)) is None
