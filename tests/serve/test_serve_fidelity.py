"""SDK fidelity through the real SDK over HTTP: what the served path adds to the in-process checks.

The in-process behaviour is tested in ``tests/backends/local/test_sdk_fidelity.py``; here the
same features go through ``minds serve``: target prompt log-probs (dense and sparse CSR on the
wire), checkpoint expiry and deletion through the SDK's ``RestClient``, and the SDK's own
client-side refusal of every request after a failed custom loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tinker
import torch
from tinker import types

from minds_core.backends.local import ServiceClient

from .conftest import KEY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceClient]:
    with ServiceClient(checkpoint_root=tmp_path_factory.mktemp("local")) as client:
        yield client


def _sft(tokens: Callable[..., list[int]]) -> list[types.Datum]:
    seq = tokens(9, 1)
    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(seq[:-1]),
            loss_fn_inputs={"target_tokens": np.array(seq[1:], dtype=np.int64)},
        )
    ]


def test_target_prompt_logprobs_match_the_in_process_backend(service, local, tokens) -> None:
    served = service.create_sampling_client(base_model="minds-tiny").result()
    in_process = local.create_sampling_client(base_model="minds-tiny").result()
    prompt = tokens(8, 4)
    params = types.SamplingParams(max_tokens=1, seed=0)
    dense = np.stack([np.array(prompt[1:]), np.roll(prompt[1:], 1)], axis=1).astype(np.int64)
    dense[3, 1] = -1
    sparse_ids = torch.full((len(prompt) - 1, 6), -1, dtype=torch.int64)
    sparse_ids[2, 5] = prompt[3]
    sparse = types.TensorData.from_torch_sparse(sparse_ids, pad_value=-1)
    assert sparse.sparse_crow_indices is not None
    for target in (types.TensorData.from_numpy(dense), sparse):
        got = served.sample(types.ModelInput.from_ints(prompt), 1, params, target_prompt_logprobs=target).result()
        want = in_process.sample(types.ModelInput.from_ints(prompt), 1, params, target_prompt_logprobs=target).result()
        assert got.target_prompt_logprobs is not None and want.target_prompt_logprobs is not None
        assert got.target_prompt_logprobs.shape == want.target_prompt_logprobs.shape
        assert got.target_prompt_logprobs.sparse_crow_indices == target.sparse_crow_indices
        assert got.target_prompt_logprobs.sparse_col_indices == target.sparse_col_indices
        np.testing.assert_allclose(
            got.target_prompt_logprobs.to_numpy(), want.target_prompt_logprobs.to_numpy(), rtol=1e-5, atol=1e-5
        )
    assert want.target_prompt_logprobs.to_numpy()[2, 5] < 0


def test_the_sdk_refuses_requests_after_a_failed_custom_loss(service, tokens) -> None:
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=2).result()

    def broken(batch: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        raise ZeroDivisionError("the loss broke")

    with pytest.raises(ZeroDivisionError):
        trainer.forward_backward_custom(_sft(tokens), broken).result()
    with pytest.raises(RuntimeError, match="this TrainingClient is poisoned") as raised:
        trainer.forward_backward(_sft(tokens), "cross_entropy").result()
    assert isinstance(raised.value.__cause__, ZeroDivisionError)


def test_ttl_weights_info_and_delete_through_the_sdks_rest_client(served, service, tokens) -> None:
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=3).result()
    short = trainer.save_state("short", ttl_seconds=1).result().path
    kept = trainer.save_weights_for_sampler("kept").result().path
    rest = tinker.RestClient(base_url=served.url, api_key=KEY)
    listed = {c.tinker_path: c for c in rest.list_checkpoints(trainer.model_id).result().checkpoints}
    assert listed[short].expires_at is not None and listed[kept].expires_at is None
    info = rest.get_weights_info_by_tinker_path(kept).result()
    assert (info.base_model, info.is_lora, info.lora_rank) == ("minds-tiny", True, 4)

    time.sleep(1.1)
    assert [c.tinker_path for c in rest.list_checkpoints(trainer.model_id).result().checkpoints] == [kept]
    with pytest.raises(tinker.NotFoundError):
        rest.get_weights_info_by_tinker_path(short).result()
    rest.delete_checkpoint_from_tinker_path(kept).result()
    assert rest.list_checkpoints(trainer.model_id).result().checkpoints == []
    with pytest.raises(tinker.NotFoundError):
        rest.delete_checkpoint(trainer.model_id, "sampler_weights/kept").result()


def test_top_k_prompt_and_sample_logprobs_match_the_in_process_backend(service, local, tokens) -> None:
    # the SDK marks a position without top-k entries (the prompt's first) by its sentinel, read back as None
    served = service.create_sampling_client(base_model="minds-tiny").result()
    in_process = local.create_sampling_client(base_model="minds-tiny").result()
    prompt, params = types.ModelInput.from_ints(tokens(8, 5)), types.SamplingParams(max_tokens=3, seed=2)
    asked = {"include_prompt_logprobs": True, "topk_prompt_logprobs": 3, "topk_sample_logprobs": 2}
    got = served.sample(prompt, 2, params, **asked).result()
    want = in_process.sample(prompt, 2, params, **asked).result()
    assert want.topk_prompt_logprobs is not None and want.topk_prompt_logprobs[0] is None
    assert got.topk_prompt_logprobs is not None and got.topk_prompt_logprobs[0] is None
    ids = [[t for t, _ in row] for row in want.topk_prompt_logprobs[1:]]
    assert [[t for t, _ in row] for row in got.topk_prompt_logprobs[1:]] == ids
    np.testing.assert_allclose(
        [[lp for _, lp in row] for row in got.topk_prompt_logprobs[1:]],
        [[lp for _, lp in row] for row in want.topk_prompt_logprobs[1:]],
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip
    for mine, theirs in zip(got.sequences, want.sequences, strict=True):
        assert mine.topk_logprobs is not None and theirs.topk_logprobs is not None
        assert [[t for t, _ in row] for row in mine.topk_logprobs] == [[t for t, _ in row] for row in theirs.topk_logprobs]


def test_a_one_token_prompt_scores_as_none_alone_in_both(service, local) -> None:
    # a prompt of just the BOS token has no position to score: [None], as the SDK documents element 0
    for client in (service, local):
        sampler = client.create_sampling_client(base_model="minds-tiny").result()
        assert sampler.compute_logprobs(types.ModelInput.from_ints([5])).result() == [None]
        response = sampler.sample(
            types.ModelInput.from_ints([5]), 1, types.SamplingParams(max_tokens=2, seed=0),
            include_prompt_logprobs=True, topk_prompt_logprobs=2,
        ).result()  # fmt: skip
        assert response.prompt_logprobs == [None] and response.topk_prompt_logprobs == [None]
        assert len(response.sequences[0].tokens) == 2
