"""Loading a saved state into a running client: exact weights, optimizer reset or resumed, clear errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from tinker import types

from minds_core.backends.local import (
    TINY_MODEL,
    LocalBadRequestError,
    LocalNotFoundError,
    ServiceClient,
    TrainingClient,
)
from minds_core.backends.local.model.tiny_model import tiny_model_path

ADAM = types.AdamParams(learning_rate=1e-2, weight_decay=0.01)
Adapter = Callable[[TrainingClient], dict[str, torch.Tensor]]


@pytest.fixture
def data(sft_datum: Callable[..., types.Datum]) -> list[types.Datum]:
    return [sft_datum("The cat sat on the mat."), sft_datum("1+1=2")]


def train(client: TrainingClient, data: list[types.Datum], steps: int) -> None:
    for _ in range(steps):
        client.forward_backward(data, "cross_entropy")
        step = client.optim_step(ADAM)
    step.result()


def logprobs(client: TrainingClient, data: list[types.Datum]) -> list[torch.Tensor]:
    return [out["logprobs"].to_torch() for out in client.forward(data, "cross_entropy").result().loss_fn_outputs]


def assert_same_adapter(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    assert all(torch.equal(got[key], want[key]) for key in want)


@pytest.fixture
def saved(trainer: TrainingClient, data: list[types.Datum]) -> str:
    """The path of a state saved after two steps; the trainer then trains on and has gradients pending."""
    train(trainer, data, 2)
    path = trainer.save_state("step-2").result().path
    train(trainer, data, 2)
    trainer.forward_backward(data, "cross_entropy").result()
    return path


def test_load_state_restores_the_saved_weights_exactly(
    service: ServiceClient, trainer: TrainingClient, data, saved: str
) -> None:
    want = logprobs(service.create_training_client_from_state(saved).result(), data)
    assert not all(torch.equal(a, b) for a, b in zip(logprobs(trainer, data), want, strict=True))
    future = trainer.load_state(saved)
    got = logprobs(trainer, data)  # submitted before the load finished: it runs after it
    response = future.result()
    assert isinstance(response, types.LoadWeightsResponse)
    assert (response.path, response.model_id) == (saved, trainer.model_id)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_load_state_resets_the_optimizer(
    service: ServiceClient, trainer: TrainingClient, data, saved: str, adapter_of: Adapter
) -> None:
    trainer.load_state(saved)
    train(trainer, data, 2)
    fresh = service.create_training_client_from_state(saved).result()
    train(fresh, data, 2)
    assert_same_adapter(adapter_of(trainer), adapter_of(fresh))


@pytest.mark.slow  # a third of a CPU-second or more of the local engine's numerics: the whole suite runs it
def test_load_state_with_optimizer_resumes_the_saved_moments(
    service: ServiceClient, trainer: TrainingClient, data, saved: str, adapter_of: Adapter
) -> None:
    assert trainer.load_state_with_optimizer(saved).result().path == saved
    train(trainer, data, 2)
    resumed = service.create_training_client_from_state_with_optimizer(saved).result()
    train(resumed, data, 2)
    assert_same_adapter(adapter_of(trainer), adapter_of(resumed))
    restarted = service.create_training_client_from_state(saved).result()
    train(restarted, data, 2)
    assert any(not torch.allclose(adapter_of(restarted)[k], v, atol=1e-5) for k, v in adapter_of(trainer).items())


def test_load_errors_fail_their_request_only(
    service: ServiceClient, trainer: TrainingClient, new_trainer, data, adapter_of: Adapter
) -> None:
    sampler_path = trainer.save_weights_for_sampler("weights-only").result().path
    before = adapter_of(trainer)
    with pytest.raises(LocalNotFoundError, match="that run has: weights-only"):
        trainer.load_state(f"tinker://{trainer.model_id}/sampler_weights/nope").result()
    with pytest.raises(LocalBadRequestError, match="no optimizer state"):
        trainer.load_state_with_optimizer(sampler_path).result()

    wider = service.create_lora_training_client(TINY_MODEL, rank=8, seed=0).result()
    with pytest.raises(LocalBadRequestError, match=r"the checkpoint has rank=8 \(this run: 4\)"):
        trainer.load_state(wider.save_state("r8").result().path).result()
    attn_only = new_trainer(train_mlp=False)
    with pytest.raises(LocalBadRequestError, match=r"train_mlp=False \(this run: True\)"):
        trainer.load_state_with_optimizer(attn_only.save_state("attn").result().path).result()
    other_base = service.create_lora_training_client(str(tiny_model_path()), rank=4, seed=0).result()
    with pytest.raises(LocalBadRequestError, match=f"base_model=.*this run: '{TINY_MODEL}'"):
        trainer.load_state(other_base.save_state("other").result().path).result()

    assert_same_adapter(adapter_of(trainer), before)
    train(trainer, data, 1)  # the client keeps serving
