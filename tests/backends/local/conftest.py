"""Fixtures for the local backend: a service on a temporary root, a tiny LoRA run, datum builders."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import torch
from tinker import types

from minds_core.backends.local import TINY_MODEL, ServiceClient, TrainingClient
from minds_core.backends.local.model.accelerator import EVENTS

SEQUENCES = ("The cat sat on the mat.", "1+1=2, 2+2=4", "Hello, world!")
"""Short texts to train on (the tiny tokenizer is byte-level: one token per character)."""


@pytest.fixture(autouse=True)
def no_events_of_earlier_tests() -> None:
    """Forget what earlier tests of this process counted (``accelerator.EVENTS``, which the next ``forward_backward``
    reports), so that each test's metrics are its own."""
    EVENTS.take()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceClient]:
    """A local service keeping checkpoints under a temporary root, on the CPU in float32 on every machine.

    The tolerances of these tests are float32's; ``test_cuda.py`` runs the same checks on a GPU
    (bf16 base weights) at bf16's.
    """
    with ServiceClient(checkpoint_root=tmp_path / "checkpoints", device="cpu") as client:
        yield client


@pytest.fixture
def new_trainer(service: ServiceClient) -> Callable[..., TrainingClient]:
    """Make a rank-4 LoRA run on the tiny model (seed 0 unless given)."""

    def make(seed: int = 0, **kwargs: object) -> TrainingClient:
        return service.create_lora_training_client(TINY_MODEL, rank=4, seed=seed, **kwargs).result()

    return make


@pytest.fixture
def trainer(new_trainer: Callable[..., TrainingClient]) -> TrainingClient:
    """A fresh rank-4 LoRA run on the tiny model."""
    return new_trainer()


@pytest.fixture
def encode(trainer: TrainingClient) -> Callable[[str], list[int]]:
    """Text to tokens with the tiny model's tokenizer."""
    tokenizer = trainer.get_tokenizer()
    return lambda text: list(tokenizer.encode(text))


@pytest.fixture
def sft_datum(encode: Callable[[str], list[int]]) -> Callable[..., types.Datum]:
    """A datum training on every token of ``text`` (``model_input = seq[:-1]``, ``target_tokens = seq[1:]``)."""

    def make(text: str, **loss_inputs: Sequence[float]) -> types.Datum:
        seq = encode(text)
        inputs: dict[str, object] = {"target_tokens": seq[1:], **loss_inputs}
        inputs.setdefault("weights", [1.0] * (len(seq) - 1))
        return types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs=inputs)

    return make


@pytest.fixture
def adapter_of() -> Callable[[TrainingClient], dict[str, torch.Tensor]]:
    """A copy of a training client's adapter weights (a test-only peek at its engine)."""
    return lambda client: client._trainer.adapter_state()


@pytest.fixture
def grads_of() -> Callable[[TrainingClient], dict[str, torch.Tensor]]:
    """A copy of a training client's accumulated adapter gradients (a test-only peek at its engine)."""

    def grads(client: TrainingClient) -> dict[str, torch.Tensor]:
        params = client._trainer.model.named_parameters()
        return {name: p.grad.clone() for name, p in params if p.requires_grad and p.grad is not None}

    return grads


@pytest.fixture
def off_policy() -> Callable[[TrainingClient, list[types.Datum]], list[types.Datum]]:
    """``off_policy(client, plain)``: RL datums over ``plain``'s tokens, with sampler log-probs within 0.5
    of ``client``'s own and random advantages (the same every call)."""

    def make(client: TrainingClient, plain: list[types.Datum]) -> list[types.Datum]:
        policy = client.forward(plain, "cross_entropy").result()
        generator = torch.Generator().manual_seed(1)
        data = []
        for datum, out in zip(plain, policy.loss_fn_outputs, strict=True):
            logp = out["logprobs"].to_torch()
            inputs = {
                "target_tokens": datum.loss_fn_inputs["target_tokens"],
                "logprobs": logp + torch.rand(logp.shape, generator=generator) - 0.5,
                "advantages": torch.randn(logp.shape, generator=generator),
            }
            data.append(types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs))
        return data

    return make
