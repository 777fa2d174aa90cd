"""Sampling clients of the same weights share one engine: a checkpoint's save is loaded once, however many clients
(a run's Ray workers make one each per step) sample it, and their requests decode in one batch."""

from __future__ import annotations

import pytest
from tinker import types

from minds_core.backends.local import TINY_MODEL, LocalNotFoundError, ServiceClient, TrainingClient

PROMPT = types.ModelInput.from_ints([5, 70, 71, 72])
PARAMS = types.SamplingParams(max_tokens=6, temperature=1.0, seed=3, stop=[])
ADAM = types.AdamParams(learning_rate=5e-2)


def _tokens(sampler) -> list[int]:
    return sampler.sample(PROMPT, 1, PARAMS).result().sequences[0].tokens


def test_clients_of_one_save_share_its_engine_and_a_new_save_at_the_path_gets_its_own(
    service: ServiceClient, trainer: TrainingClient, sft_datum
) -> None:
    path = trainer.save_weights_for_sampler("policy").result().path
    clients = [service.create_sampling_client(model_path=path).result() for _ in range(4)]
    assert len({id(client.engine) for client in clients}) == 1  # loaded once, not once per client
    assert len({tuple(_tokens(client)) for client in clients}) == 1  # the same weights, the same seeded tokens
    assert trainer.create_sampling_client(path).result().engine is clients[0].engine  # the training client's too

    trainer.forward_backward([sft_datum("The cat sat on the mat.")], "cross_entropy")
    trainer.optim_step(ADAM).result()
    assert trainer.save_weights_for_sampler("policy").result().path == path  # saved again at the same path
    again = service.create_sampling_client(model_path=path).result()
    assert again.engine is not clients[0].engine  # the new save's weights, not the old engine's
    with ServiceClient(checkpoint_root=service.checkpoint_root, device="cpu") as fresh:  # loads what is on disk now
        assert _tokens(again) == _tokens(fresh.create_sampling_client(model_path=path).result())


def test_a_deleted_checkpoint_is_refused_even_while_a_client_of_it_lives(service: ServiceClient, trainer: TrainingClient) -> None:
    path = trainer.save_weights_for_sampler("gone").result().path
    kept = service.create_sampling_client(model_path=path).result()
    service.create_rest_client().delete_checkpoint_from_tinker_path(path).result()
    with pytest.raises(LocalNotFoundError, match="No checkpoint at"):
        service.create_sampling_client(model_path=path).result()
    assert _tokens(kept)  # the client made before still samples the weights it was made from


def test_clients_of_a_base_model_share_its_engine(service: ServiceClient) -> None:
    clients = [service.create_sampling_client(base_model=TINY_MODEL).result() for _ in range(3)]
    assert len({id(client.engine) for client in clients}) == 1
    assert clients[0].held_bytes == 0  # the base's own weights and slots
