"""The fast decode step equals the model's own forward over the same decode slots, for each supported family."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from tinker import types
from transformers import (
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from minds_core.backends.local import TINY_MODEL, ServiceClient
from minds_core.backends.local.model.cache_argument import cache_argument, returned_cache
from minds_core.backends.local.model.lora import LoraSpec, adapter_state, attach_lora
from minds_core.backends.local.model.models import BaseModelRegistry
from minds_core.backends.local.model.placement import Placement
from minds_core.backends.local.model.tiny_model import byte_tokenizer
from minds_core.backends.local.sampling.decode_slots import _ModelForward
from minds_core.backends.local.sampling.engine import SamplingEngine
from minds_core.backends.local.sampling.fast_decode import FastDecoder
from minds_core.backends.local.sampling.kv_slots import KVSlots

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


def filled(model: torch.nn.Module, prompts: list[list[int]], capacity: int = 40) -> KVSlots:
    """Slots holding two rows per prompt (different lengths: rows at different positions), and two free slots."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype = next(model.parameters()).dtype
    slots = KVSlots(config.num_hidden_layers, config.num_key_value_heads, head_dim, 2 * len(prompts) + 2, capacity, dtype, torch.device("cpu"))
    for i, prompt in enumerate(prompts):
        out = model(input_ids=torch.tensor([prompt]), **cache_argument(DynamicCache()))
        slots.fill(torch.tensor([2 * i, 2 * i + 1]), [(layer.keys, layer.values) for layer in returned_cache(out).layers])
    return slots


PROMPT_SETS = {
    "rows-at-different-positions": [[1, 5, 9, 200, 7], list(range(10, 31)), [42]],
    "rows-at-one-position": [[1, 5, 9, 200, 7], [8, 6, 4, 2, 0]],
}


def steps(model: torch.nn.Module, prompts: list[list[int]], decode, count: int) -> list[torch.Tensor]:
    """Logits of ``count`` greedy steps of every row (fed its own argmax) through ``decode(slots, tokens)``."""
    slots = filled(model, prompts)
    rows = 2 * len(prompts)
    aligned = len({len(prompt) for prompt in prompts}) == 1  # every row at one position: no mask
    tokens = torch.arange(3, 3 + rows)
    out = []
    for _ in range(count):
        slots.window(rows, int(slots.positions[:rows].max()) + 1, aligned)
        logits = decode(slots, tokens)
        slots.positions[:rows] += 1
        out.append(logits)
        tokens = logits.argmax(dim=-1)
    return out


@pytest.mark.parametrize("prompts", list(PROMPT_SETS.values()), ids=list(PROMPT_SETS))
@pytest.mark.parametrize("name", list(models()))
@torch.inference_mode()
def test_fast_steps_equal_the_models_forward(name: str, prompts: list[list[int]]) -> None:
    model = models()[name].eval()
    fast = FastDecoder.for_model(model)
    assert fast is not None
    theirs = steps(model, prompts, _ModelForward(model), 4)
    ours = steps(model, prompts, fast.forward, 4)
    for got, expected in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@torch.inference_mode()
def test_the_model_forward_over_slots_equals_a_plain_forward_of_the_whole_sequence() -> None:
    """Rows at positions of their own, a window wider than some rows, free slots in the window: each row's
    logits are what the model computes over that row's tokens alone."""
    model = models()["qwen3"].eval()
    prompts = PROMPT_SETS["rows-at-different-positions"]
    logits = steps(model, prompts, _ModelForward(model), 3)
    for row in range(2 * len(prompts)):
        sequence = prompts[row // 2] + [3 + row] + [int(step[row].argmax()) for step in logits[:-1]]
        whole = model(input_ids=torch.tensor([sequence])).logits[0, -3:]
        torch.testing.assert_close(torch.stack([step[row] for step in logits]), whole, rtol=0, atol=1e-5)


def test_slots_write_at_each_rows_position_and_mask_what_lies_past_it() -> None:
    slots = KVSlots(1, 2, 4, 4, 8, torch.float32, torch.device("cpu"))
    slots.fill(torch.tensor([0, 1]), [(torch.full((1, 2, 3, 4), 1.0), torch.full((1, 2, 3, 4), -1.0))])
    slots.fill(torch.tensor([2]), [(torch.full((1, 2, 5, 4), 2.0), torch.full((1, 2, 5, 4), -2.0))])
    assert slots.positions.tolist() == [3, 3, 5, 0]
    keys_before = slots.keys[0]
    slots.window(3, 6)
    assert (slots.mask(torch.float32) == 0).tolist() == [[True] * 4 + [False] * 2] * 2 + [[True] * 6]
    new = torch.arange(3.0)[:, None, None, None].expand(3, 2, 1, 4) + 10
    keys, values = slots.update(new, -new, 0)
    assert keys.shape == values.shape == (3, 2, 6, 4)
    assert keys[:, 0, :, 0].tolist() == [[1, 1, 1, 10, 0, 0], [1, 1, 1, 11, 0, 0], [2, 2, 2, 2, 2, 12]]
    assert slots.keys[0] is keys_before  # preallocated: written in place
    slots.move(torch.tensor([2]), torch.tensor([0]))
    assert slots.positions.tolist() == [5, 3, 5, 0]
    assert slots.keys[0][0, 0, 0, :6].tolist() == [2, 2, 2, 2, 2, 12]  # keys transposed
    assert slots.values[0][0, 1, 5, 0].item() == -12
    grown = KVSlots(1, 2, 4, 8, 16, torch.float32, torch.device("cpu"))
    grown.copy_from(slots)
    assert grown.positions.tolist() == [5, 3, 5, 0, 0, 0, 0, 0]
    assert torch.equal(grown.keys[0][:4, :, :, :8], slots.keys[0]) and torch.equal(grown.values[0][:4, :, :8], slots.values[0])


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
    theirs = steps(model, prompts, _ModelForward(model), 3)
    ours = steps(model, prompts, fast.forward, 3)
    for got, expected in zip(ours, theirs, strict=True):
        scale = float(expected.abs().max())  # bf16 rounds to 2^-8 of a value: compare relative to the largest
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2 * scale
        torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=tolerance)


def test_other_architectures_fall_back_to_their_forward() -> None:
    torch.manual_seed(0)
    gelu = Qwen3ForCausalLM(Qwen3Config(**SIZES, head_dim=16, hidden_act="gelu"))
    assert FastDecoder.for_model(gelu) is None
    assert FastDecoder.for_model(torch.nn.Linear(2, 2)) is None


def random_adapter(base: torch.nn.Module, spec: LoraSpec, seed: int) -> dict[str, torch.Tensor]:
    """Adapter weights with a non-zero ``lora_B`` (as after training), drawn from ``seed``."""
    model = attach_lora(base, spec, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
    return adapter_state(model)


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_a_pooled_tree_decodes_with_each_new_snapshots_adapter() -> None:
    """Unmerged on a bf16 base, the adapter's factors are stacked in copies: the next sampler of the same
    pooled module tree must decode with its own snapshot, not the stacked copies of the one before."""
    placement = Placement(torch.device("cpu"), torch.bfloat16, merge_adapters=False)
    base = BaseModelRegistry(placement).get(TINY_MODEL)
    spec = LoraSpec(rank=4)
    prompt = list(base.tokenizer.encode("Once upon a time"))
    params = types.SamplingParams(max_tokens=12, temperature=0.0, stop=[])
    trees = []
    for seed in (1, 2):
        sampler = SamplingEngine.for_adapter(base, spec, random_adapter(base.model, spec, seed))
        trees.append(sampler.model)
        future = sampler.submit(prompt, 1, params)
        sampler.drive()
        sequence = future.result().sequences[0]
        rescored = sampler.prompt_logprobs(prompt + list(sequence.tokens))[len(prompt) :]
        error = np.abs(np.asarray(sequence.logprobs) - np.asarray(rescored))
        assert error.max() < 0.2 and error.mean() < 0.05, (seed, error)  # bf16: steps and a full pass differ
        del sampler, future
        gc.collect()
    assert trees[0] is trees[1]  # the second snapshot reused the first one's tree (and its decode slots)


def test_a_model_without_a_fast_step_samples_through_its_own_forward(tmp_path) -> None:
    """An architecture ``FastDecoder`` does not reproduce (GELU MLPs here) decodes eagerly through the model's
    own ``forward`` over the same slots: greedy samples equal transformers' ``generate``."""
    tokenizer = byte_tokenizer()
    torch.manual_seed(0)
    config = Qwen3Config(**{**SIZES, "vocab_size": len(tokenizer)}, head_dim=16, hidden_act="gelu",
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    model = Qwen3ForCausalLM(config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    prompts = [list(tokenizer.encode(text)) for text in ("Once upon a time", "1+1=")]
    params = types.SamplingParams(max_tokens=10, temperature=0.0, stop=[])
    with ServiceClient(device="cpu") as service:
        sampler = service.create_sampling_client(base_model=str(tmp_path)).result()
        futures = [sampler.sample(types.ModelInput.from_ints(p), 2, params) for p in prompts]
        responses = [future.result(timeout=60) for future in futures]
        assert not sampler._sampler._batch.slots.graphs.capturing
    for prompt, response in zip(prompts, responses, strict=True):
        with torch.inference_mode():
            expected = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=10, min_new_tokens=10)
        for sequence in response.sequences:
            assert sequence.tokens == expected[0, len(prompt) :].tolist()
