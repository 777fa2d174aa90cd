"""Samplers decode with the adapter merged into pooled, private copies of the adapted weights."""

from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import pytest
import torch
from tinker import types

from minds_core.backends.local import TINY_MODEL, TrainingClient
from minds_core.backends.local.model.lora import LoraSpec, adapter_state, attach_lora
from minds_core.backends.local.model.models import BaseModelRegistry
from minds_core.backends.local.model.placement import Placement
from minds_core.backends.local.sampling.decode_slots import DecodeSlots
from minds_core.backends.local.sampling.engine import SamplingEngine
from minds_core.backends.local.sampling.held_bytes import storage_bytes

ADAM = types.AdamParams(learning_rate=2e-2)


def step(trainer: TrainingClient, datum: types.Datum) -> None:
    trainer.forward_backward([datum], "cross_entropy")
    trainer.optim_step(ADAM).result()


def test_merged_model_equals_the_peft_model_and_leaves_the_base_alone(trainer: TrainingClient) -> None:
    base = trainer._trainer.base
    spec = LoraSpec(rank=4, train_unembed=True)
    peft_model = attach_lora(base.model, spec, seed=5)
    with torch.no_grad():  # a non-trivial adapter: lora_B is zero at init
        for name, param in peft_model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    before = {name: t.clone() for name, t in base.model.state_dict().items()}
    merged, key = base.adapted.acquire(spec, adapter_state(peft_model))
    tokens = torch.tensor([[5, 70, 71, 72, 10, 200, 33]])
    with torch.no_grad():
        torch.testing.assert_close(merged(tokens).logits, peft_model(input_ids=tokens).logits, rtol=0, atol=1e-4)
    for name, tensor in base.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    lm_head = merged.get_output_embeddings().weight
    assert lm_head.data_ptr() != base.model.get_output_embeddings().weight.data_ptr()  # adapted: private
    embed = merged.get_input_embeddings().weight
    assert embed.data_ptr() == base.model.get_input_embeddings().weight.data_ptr()  # not adapted: shared
    base.adapted.release(key, merged)


def test_a_dropped_samplers_weights_are_reused_by_the_next_snapshot(
    trainer: TrainingClient, sft_datum: Callable[..., types.Datum], encode: Callable[[str], list[int]]
) -> None:
    datum = sft_datum("The cat sat on the mat.")
    prompt = types.ModelInput.from_ints(encode("The cat sat on the mat."))
    step(trainer, datum)
    first = trainer.save_weights_and_get_sampling_client().result()
    first_weights = first._sampler.model.get_output_embeddings().weight.data_ptr()
    kept = trainer.save_weights_and_get_sampling_client().result()  # alive: must not share with the next
    before = np.array(kept.compute_logprobs(prompt).result()[1:])
    del first
    gc.collect()
    step(trainer, datum)
    second = trainer.save_weights_and_get_sampling_client().result()
    assert second._sampler.model.get_output_embeddings().weight.data_ptr() == first_weights
    scored = trainer.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    after = np.array(second.compute_logprobs(prompt).result()[1:])
    assert np.abs(after - scored).max() < 1e-4  # the new snapshot, merged into the reused buffers
    assert np.abs(np.array(kept.compute_logprobs(prompt).result()[1:]) - before).max() == 0
    assert np.abs(after - before).max() > 1e-3  # the step changed the policy


@pytest.mark.parametrize(
    ("dtype", "max_error", "mean_error"),
    [(torch.float32, 1e-4, 1e-5), (torch.bfloat16, 0.2, 0.03)],  # bf16: the merged weights round once to 2^-8
    ids=["float32", "bfloat16"],
)
@pytest.mark.slow  # a CPU-second or more of float64 numerics or bombs: the whole suite runs it
def test_a_merged_snapshot_decodes_as_the_unmerged_side_path_does(
    trainer: TrainingClient, sft_datum: Callable[..., types.Datum], dtype: torch.dtype, max_error: float,
    mean_error: float,
) -> None:  # fmt: skip
    for _ in range(3):  # a trained adapter on every layer
        step(trainer, sft_datum("The cat sat on the mat."))
    adapter, spec = trainer._trainer.adapter_state(), trainer._trainer.spec
    tokenizer = trainer._trainer.base.tokenizer
    prompt = list(tokenizer.encode("Once upon a time"))
    params = types.SamplingParams(max_tokens=16, temperature=1.0, seed=3, stop=[])
    samplers, drawn = [], []
    for merge in (True, False):
        base = BaseModelRegistry(Placement(torch.device("cpu"), dtype, merge_adapters=merge)).get(TINY_MODEL)
        sampler = SamplingEngine.for_adapter(base, spec, adapter)
        assert any(".lora_" in name for name, _ in sampler.model.named_parameters()) != merge
        future = sampler.submit(prompt, 2, params)
        sampler.drive()
        samplers.append(sampler)
        drawn.append(future.result().sequences)
    rows = [prompt + list(sequence.tokens) for sequence in drawn[0]]
    merged, side = ([s.prompt_logprobs(row)[len(prompt) :] for row in rows] for s in samplers)
    pairs = [(merged, side)]  # both samplers' scores of the merged sampler's draws
    if dtype == torch.float32:  # the same seeded draws from the same distributions (bf16 may flip a close one)
        assert [s.tokens for s in drawn[0]] == [s.tokens for s in drawn[1]]
        pairs.append(([s.logprobs for s in drawn[0]], [s.logprobs for s in drawn[1]]))
    for got, want in pairs:
        error = np.abs(np.concatenate(got) - np.concatenate(want))
        assert error.max() < max_error and error.mean() < mean_error, (error.max(), error.mean())


PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
"""Tensors that hold memory (not the fake ones ``torch.compile`` leaves alive in other tests)."""


def _live_tensor_bytes(base: torch.nn.Module) -> int:
    """Bytes of the storages of every tensor alive in this process but ``base``'s (found by ``gc``)."""
    gc.collect()
    tensors = [o for o in gc.get_objects() if type(o) in PLAIN_TENSORS]
    return storage_bytes(tensors, shared=[*base.parameters(), *base.buffers()])


def test_a_samplers_held_bytes_are_the_memory_its_tensors_took(trainer: TrainingClient) -> None:
    base = trainer._trainer.base.model
    prompt, params = types.ModelInput.from_ints([5, 70, 71]), types.SamplingParams(max_tokens=4, seed=0)
    warm = trainer.save_weights_and_get_sampling_client().result()  # the first calls' state; kept, so that the
    warm.sample(prompt, 2, params).result()  # next sampler makes a tree of its own and does not reuse this one's
    before = _live_tensor_bytes(base)
    sampler = trainer.save_weights_and_get_sampling_client().result()
    fresh = sampler.held_bytes  # its own adapted weights and decoder tables
    # to within 1% (other tests' leftovers may come and go meanwhile): the decode buffers below are 6% of it
    assert fresh == pytest.approx(_live_tensor_bytes(base) - before, rel=0.01)
    sampler.sample(prompt, 8, params).result()
    assert sampler.held_bytes > 1.03 * fresh  # and now its decode buffers
    assert sampler.held_bytes == pytest.approx(_live_tensor_bytes(base) - before, rel=0.01)


class _RegrownMeanwhile(DecodeSlots):
    """Decode slots whose keys/values another thread's ``reserve`` drops (``kv = None``, before it sets the grown
    ones) right after they are first read: the interleaving of a sampler decoding while ``minds serve`` counts it."""

    @property
    def kv(self) -> object:
        self.__dict__["reads"] = self.__dict__.get("reads", 0) + 1
        return self.__dict__["kv"] if self.__dict__["reads"] == 1 else None

    @kv.setter
    def kv(self, value: object) -> None:
        self.__dict__["kv"] = value


def test_held_bytes_can_be_read_while_the_decode_buffers_are_replaced(trainer: TrainingClient) -> None:
    sampler = trainer.save_weights_and_get_sampling_client().result()
    sampler.sample(types.ModelInput.from_ints([5, 70, 71]), 2, types.SamplingParams(max_tokens=4, seed=0)).result()
    slots = sampler._sampler._batch.slots
    with_kv = sampler.held_bytes
    slots.__class__ = _RegrownMeanwhile  # the slots are read without their lock, which a whole decode batch holds
    try:
        assert 0 < sampler.held_bytes <= with_kv
    finally:
        slots.__class__ = DecodeSlots
