"""The sampler on a CUDA GPU: decode steps captured as CUDA graphs per bucket, replayed; refill, stops, seeds,
and log-probs that agree with the trainer's at bf16's tolerance. Skipped where torch sees no GPU (the same
code runs eagerly on the CPU in ``test_decoding.py``, ``test_device_sampling.py`` and ``test_fast_decode.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tinker import types
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

from minds_core.backends.local import (
    TINY_MODEL,
    SamplingClient,
    ServiceClient,
    TrainingClient,
)
from minds_core.backends.local.model.accelerator import accelerator_for
from minds_core.backends.local.model.cache_argument import cache_argument, returned_cache
from minds_core.backends.local.sampling.decode_slots import DecodeSlots, SlotSettings
from minds_core.backends.local.sampling.device_sampling import RowSettings, row_key

from .test_cuda import assert_close_logprobs, gpu_service  # noqa: F401 - gpu_service: a fixture used here

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TEXTS = ("The cat sat on the mat.", "1+1=2, 2+2=4", "Hello, world!")


@pytest.fixture
def gpu_trainer(gpu_service: ServiceClient) -> TrainingClient:  # noqa: F811 - the fixture
    trainer = gpu_service.create_lora_training_client(TINY_MODEL, rank=4, seed=0).result()
    tokenizer = trainer.get_tokenizer()
    data = []
    for text in TEXTS:
        seq = list(tokenizer.encode(text))
        data.append(
            types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={"target_tokens": seq[1:]})
        )
    for _ in range(3):  # a trained adapter: lora_B is no longer zero
        trainer.forward_backward(data, "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    return trainer


@pytest.fixture
def gpu_sampler(gpu_trainer: TrainingClient) -> SamplingClient:
    return gpu_trainer.save_weights_and_get_sampling_client().result()


def slots_of(sampler: SamplingClient) -> DecodeSlots:
    return sampler._sampler._batch.slots


def prompt(sampler: SamplingClient, text: str) -> types.ModelInput:
    return types.ModelInput.from_ints(list(sampler.get_tokenizer().encode(text)))


def test_steps_are_captured_per_bucket_and_replayed(gpu_sampler: SamplingClient) -> None:
    slots = slots_of(gpu_sampler)
    assert slots.graphs.capturing, slots.graphs.eager_reason
    params = types.SamplingParams(max_tokens=40, temperature=1.0, seed=3, stop=[])
    gpu_sampler.sample(prompt(gpu_sampler, TEXTS[1]), 5, params).result()
    assert slots.slots == 8 and {key[1] for key in slots.graphs._graphs} == {8}  # 5 rows: the bucket of 8
    gpu_sampler.sample(prompt(gpu_sampler, TEXTS[0]), 3, params).result()
    keys = set(slots.graphs._graphs)
    assert {key[1] for key in keys} == {4, 8} and {key[0] for key in keys} == {"draw", "forward"}
    again = gpu_sampler.sample(prompt(gpu_sampler, TEXTS[0]), 3, params).result()
    assert set(slots.graphs._graphs) == keys  # the same shapes: replayed, nothing captured anew
    assert all(len(s.tokens) == 40 for s in again.sequences)


@torch.inference_mode()
def test_replayed_steps_compute_what_eager_steps_do() -> None:
    """Decode slots of a small Qwen3 in bf16: the same rows stepped through graphs and eagerly agree."""
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
    )  # fmt: skip
    model = Qwen3ForCausalLM(config).to("cuda", torch.bfloat16).eval()
    prompts = [[1, 5, 9, 200, 7], list(range(10, 31)), [42]]
    runs = []
    for capture in (True, False):
        slots = DecodeSlots(model, SlotSettings(8, accelerator_for(torch.device("cuda"))))
        if not capture:
            slots.graphs.eager_reason = "compared against"
        for slot, ids in enumerate(prompts):
            out = model(input_ids=torch.tensor([ids], device="cuda"), **cache_argument(DynamicCache()))
            kv = [(layer.keys, layer.values) for layer in returned_cache(out).layers]
            slots.reserve(len(prompts), 64, 1, kv, config.vocab_size)
            row = RowSettings(1.0, -1, 1.0, row_key(slot, 0), (), 30)
            slots.join([slot], kv, out.logits[0, -1], [row])
        for step in range(30):
            slots.step(4, 22 + step, (False, True, False, False), 0)
        done, counts = slots.progress(4)
        assert done[:3].all() and counts[:3].tolist() == [30] * 3
        columns = {slots.columns(22 + step) for step in range(30)}
        assert slots.graphs.captured == (1 + len(columns) if capture else 0)  # one draw shape, a forward per width
        runs.append(slots.read([0, 1, 2], 30))
    (tokens, logprobs), (eager_tokens, eager_logprobs) = runs
    for row in range(3):  # where graphs and eager steps drew the same tokens so far, the same log-probs
        same = int(np.cumprod(tokens[row] == eager_tokens[row]).sum())
        assert same >= 10, (tokens[row], eager_tokens[row])
        np.testing.assert_allclose(logprobs[row, :same], eager_logprobs[row, :same], atol=0.05)


def test_seeded_samples_repeat_and_differ_across_seeds(gpu_sampler: SamplingClient) -> None:
    text = prompt(gpu_sampler, "<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n")
    params = types.SamplingParams(max_tokens=24, temperature=0.9, seed=11, stop=[])
    first = [s.tokens for s in gpu_sampler.sample(text, 4, params).result().sequences]
    again = [s.tokens for s in gpu_sampler.sample(text, 4, params).result().sequences]
    other = [s.tokens for s in gpu_sampler.sample(text, 4, params.model_copy(update={"seed": 12})).result().sequences]
    assert first == again
    assert first != other
    assert len({tuple(t) for t in first}) > 1  # the samples of one request differ from each other


def test_stop_tokens_end_samples_on_the_device(gpu_sampler: SamplingClient) -> None:
    text = prompt(gpu_sampler, TEXTS[2])
    greedy = types.SamplingParams(max_tokens=20, temperature=0.0, stop=[])
    tokens = gpu_sampler.sample(text, 1, greedy).result().sequences[0].tokens
    stop = tokens[4]
    first = tokens.index(stop)
    stopped = gpu_sampler.sample(text, 2, greedy.model_copy(update={"stop": [stop]})).result()
    for seq in stopped.sequences:
        assert seq.tokens == tokens[: first + 1] and seq.stop_reason == "stop"
        assert len(seq.logprobs) == len(seq.tokens)
    by_string = gpu_sampler.get_tokenizer().decode(tokens[2:4])
    ended = gpu_sampler.sample(text, 1, greedy.model_copy(update={"stop": [by_string]})).result().sequences[0]
    assert gpu_sampler.get_tokenizer().decode(ended.tokens).endswith(by_string) and ended.stop_reason == "stop"


def test_rows_beyond_the_slots_wait_and_refill_freed_slots(gpu_sampler: SamplingClient) -> None:
    slots = slots_of(gpu_sampler)
    slots.max_rows = 4  # before the first reserve: four slots at most
    requests = [
        (prompt(gpu_sampler, text), types.SamplingParams(max_tokens=8 + 8 * i, temperature=1.0, seed=i, stop=[]))
        for i, text in enumerate(TEXTS)
    ]
    futures = [gpu_sampler.sample(p, 3, params) for p, params in requests]
    results = [f.result(timeout=120) for f in futures]
    assert slots.slots == 4
    for (p, params), result in zip(requests, results, strict=True):
        for seq in result.sequences:
            assert len(seq.tokens) == params.max_tokens
            rescored = gpu_sampler.compute_logprobs(types.ModelInput.from_ints(p.to_ints() + seq.tokens)).result()
            assert_close_logprobs(rescored[p.length :], seq.logprobs)  # refilled slots hold their own prompt


@pytest.mark.xfail(
    strict=True,
    reason="H100, 2026-11-26: mean error 0.026 (within 0.03) but one token of 384 off by 0.41 (bound 0.2): the "
    "sampler adds its LoRA in float32, the trainer now computes it in bf16 autocast. Open: align the two",
)
def test_sampled_log_probs_match_the_trainers(gpu_trainer: TrainingClient, gpu_sampler: SamplingClient) -> None:
    text = prompt(gpu_sampler, "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
    params = types.SamplingParams(max_tokens=48, temperature=1.0, seed=5, stop=[])
    response = gpu_sampler.sample(text, 8, params).result()
    data = []
    for seq in response.sequences:
        full = text.to_ints() + seq.tokens
        data.append(
            types.Datum(model_input=types.ModelInput.from_ints(full[:-1]), loss_fn_inputs={"target_tokens": full[1:]})
        )
    forward = gpu_trainer.forward(data, "cross_entropy").result()
    for seq, out in zip(response.sequences, forward.loss_fn_outputs, strict=True):
        assert_close_logprobs(seq.logprobs, out["logprobs"].to_numpy()[-len(seq.tokens) :])
