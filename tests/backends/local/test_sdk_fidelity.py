"""The local backend behaves as the real SDK's clients do, checked against the SDK itself where it runs offline."""

from __future__ import annotations

import inspect
import json
import time
import typing
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tinker
import torch
from tinker import types
from tinker.cli.commands.checkpoint import _download_external_weights
from tinker.lib.public_interfaces.backcompat_sampling_client_future import (
    BackcompatSamplingClientFuture,
)
from tinker.lib.public_interfaces.backcompat_training_client_future import (
    BackcompatTrainingClientFuture,
)

from minds_core.backends.local import (
    TINY_MODEL,
    LocalBadRequestError,
    ServiceClient,
    TrainingClient,
)
from minds_core.backends.local.training.losses import LOSSES

ADAM = types.AdamParams(learning_rate=1e-2)


def _warnings_of(call: Callable[[], object]) -> list[tuple[type[Warning], str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [(w.category, str(w.message)) for w in caught]


# -- 1. the constructor ------------------------------------------------------------------------------------------


def test_the_constructor_takes_the_sdks_arguments_then_minds_own_keywords() -> None:
    ours = list(inspect.signature(ServiceClient.__init__).parameters.values())
    theirs = list(inspect.signature(tinker.ServiceClient.__init__).parameters.values())
    assert [(p.name, p.kind) for p in ours[: len(theirs) - 1]] == [(p.name, p.kind) for p in theirs[:-1]]
    extra = {p.name: p.kind for p in ours[len(theirs) - 1 :]}
    assert extra == {
        "checkpoint_root": inspect.Parameter.KEYWORD_ONLY,
        "device": inspect.Parameter.KEYWORD_ONLY,
        "cuda_graphs": inspect.Parameter.KEYWORD_ONLY,
        "compile": inspect.Parameter.KEYWORD_ONLY,
        "run_shape": inspect.Parameter.KEYWORD_ONLY,
        "kwargs": inspect.Parameter.VAR_KEYWORD,
    }


def test_sdk_arguments_are_accepted_and_unknown_ones_warned_as_the_sdk_warns(tmp_path: Path) -> None:
    with ServiceClient({"team": "a"}, "project-1", display_name="x", base_url="http://unused", api_key="tml-x",
                       default_headers_overrides={"h": "v"}, checkpoint_root=tmp_path) as service:
        assert service.checkpoint_root == tmp_path
    theirs = _warnings_of(lambda: tinker.ServiceClient(bogus=1, other=2))
    ours = _warnings_of(lambda: ServiceClient(bogus=1, other=2, checkpoint_root=tmp_path).close("success"))
    assert ours == theirs and ours[0][0] is FutureWarning
    with pytest.raises(TypeError):
        ServiceClient(None, None, tmp_path)  # type: ignore[misc]  # checkpoint_root is keyword-only


# -- 2. the create_* futures act as the client, deprecated ----------------------------------------------------------


def test_create_futures_also_act_as_the_client_with_the_sdks_warning(
    service: ServiceClient, sft_datum: Callable[..., types.Datum]
) -> None:
    future = service.create_lora_training_client(TINY_MODEL, rank=4, seed=0)
    assert isinstance(future, BackcompatTrainingClientFuture)
    client = future.result()
    assert isinstance(client, TrainingClient)
    caught = _warnings_of(lambda: future.forward_backward([sft_datum("abc")], "cross_entropy").result())
    assert caught == [
        (
            FutureWarning,
            (
                "Using the future as the TrainingClient is deprecated; call .result() on it, "
                "or await it, to get the TrainingClient first"
            ),
        )
    ]
    with pytest.warns(FutureWarning, match="Reading `.model_id` from the future"):
        assert future.model_id == client.model_id

    sampler_future = client.save_weights_and_get_sampling_client()
    assert isinstance(sampler_future, BackcompatSamplingClientFuture)
    prompt = types.ModelInput.from_ints([1, 2, 3])
    params = types.SamplingParams(max_tokens=2, seed=0)
    caught = _warnings_of(lambda: sampler_future.sample(prompt, 1, params).result())
    assert [c for c, _ in caught] == [FutureWarning] and "Using the future as the SamplingClient" in caught[0][1]
    for made in (
        service.create_sampling_client(base_model=TINY_MODEL),
        client.create_sampling_client(client.save_weights_for_sampler("s").result().path),
        service.create_training_client_from_state(client.save_state("t").result().path),
        service.create_training_client_from_state_with_optimizer(client.save_state("t", overwrite=True).result().path),
    ):
        assert isinstance(made, (BackcompatSamplingClientFuture, BackcompatTrainingClientFuture))
        made.result()


async def test_create_futures_can_be_awaited(service: ServiceClient) -> None:
    client = await service.create_lora_training_client(TINY_MODEL, rank=4, seed=0)
    assert isinstance(client, TrainingClient)


# -- 4. the SDK's loss list ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", typing.get_args(types.LossFnType))
def test_every_loss_the_sdk_names_runs_or_is_a_400_naming_the_supported_ones(
    trainer: TrainingClient, sft_datum: Callable[..., types.Datum], loss: str
) -> None:
    n = len("The cat sat.") - 1
    datum = sft_datum("The cat sat.", logprobs=[-1.0] * n, advantages=[0.5] * n, sequence_ratio_mask=[1.0] * n)
    if loss == "stable_reinforce":  # it names the sampled sequence behind every target, as the SDK requires
        with pytest.raises(tinker.BadRequestError, match="needs every datum to name the sampled sequences"):
            trainer.forward_backward([datum], loss).result()
        spans = [types.SampledProvenanceSpan(sequence_id="s", length=n)]
        datum = datum.with_provenance(model_input=spans, loss_fn_inputs=spans)
    if loss == "custom":
        assert loss not in LOSSES
        with pytest.raises(tinker.BadRequestError, match=f"supports: {', '.join(LOSSES)}"):
            trainer.forward_backward([datum], loss).result()  # type: ignore[arg-type]
    else:
        assert np.isfinite(trainer.forward_backward([datum], loss).result().metrics["loss:sum"])  # type: ignore[arg-type]


# -- 5. target_prompt_logprobs --------------------------------------------------------------------------------------


def test_target_prompt_logprobs_score_the_given_ids_at_each_prompt_position(trainer: TrainingClient) -> None:
    sampler = trainer.save_weights_and_get_sampling_client().result()
    prompt = [5, 17, 42, 99, 7, 64]
    params = types.SamplingParams(max_tokens=1, seed=0)
    scored = sampler.sample(
        types.ModelInput.from_ints(prompt), 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=3
    ).result()
    top = scored.topk_prompt_logprobs_np
    assert top is not None
    # column 0: the prompt's own next tokens; columns 1-3: the top-3; a -1 cell asks for nothing
    ids = np.concatenate([np.array(prompt[1:])[:, None], top.token_ids[1:]], axis=1).astype(np.int64)
    ids[2, 3] = -1
    response = sampler.sample(
        types.ModelInput.from_ints(prompt), 1, params, target_prompt_logprobs=types.TensorData.from_numpy(ids)
    ).result()
    got = response.target_prompt_logprobs
    assert got is not None and got.dtype == "float32" and got.shape == [len(prompt) - 1, 4]
    values = got.to_numpy()
    np.testing.assert_allclose(values[:, 0], scored.prompt_logprobs[1:], rtol=1e-5, atol=1e-6)
    want_top = top.logprobs[1:].copy()
    want_top[2, 2] = 0.0
    np.testing.assert_allclose(values[:, 1:], want_top, rtol=1e-5, atol=1e-6)

    # sparse CSR in, the same layout out
    dense = torch.full((len(prompt) - 1, 4), -1, dtype=torch.int64)
    dense[1, 3], dense[4, 0] = prompt[2], prompt[5]
    sparse = types.TensorData.from_torch_sparse(dense, pad_value=-1)
    assert sparse.sparse_crow_indices is not None
    answer = sampler.sample(types.ModelInput.from_ints(prompt), 1, params, target_prompt_logprobs=sparse).result()
    assert answer.target_prompt_logprobs is not None
    assert answer.target_prompt_logprobs.sparse_crow_indices == sparse.sparse_crow_indices
    assert answer.target_prompt_logprobs.sparse_col_indices == sparse.sparse_col_indices
    want = [scored.prompt_logprobs[2], scored.prompt_logprobs[5]]
    np.testing.assert_allclose(answer.target_prompt_logprobs.data, want, rtol=1e-5, atol=1e-6)


def test_bad_target_tensors_are_refused_as_the_sdk_refuses_them(trainer: TrainingClient) -> None:
    sampler = trainer.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints([5, 17, 42])
    params = types.SamplingParams(max_tokens=1, seed=0)
    with pytest.raises(ValueError, match="must be an int64 tensor"):  # at call time, as in the SDK
        sampler.sample(prompt, 1, params, target_prompt_logprobs=types.TensorData(data=[1.0, 2.0], dtype="float32"))
    with pytest.raises(ValueError, match="must be 2-D"):
        sampler.sample(prompt, 1, params, target_prompt_logprobs=types.TensorData(data=[1, 2], dtype="int64"))
    three_rows = types.TensorData(data=[1, 2, 3], dtype="int64", shape=[3, 1])
    with pytest.raises(LocalBadRequestError, match="len\\(prompt\\) - 1 = 2 rows"):
        sampler.sample(prompt, 1, params, target_prompt_logprobs=three_rows).result()
    out_of_vocabulary = types.TensorData(data=[1, 10**6], dtype="int64", shape=[2, 1])
    with pytest.raises(LocalBadRequestError, match="outside the vocabulary"):
        sampler.sample(prompt, 1, params, target_prompt_logprobs=out_of_vocabulary).result()


# -- 6. a failed custom-loss request poisons the client ------------------------------------------------------------


def test_after_a_failed_custom_loss_request_every_training_request_is_refused(
    trainer: TrainingClient, sft_datum: Callable[..., types.Datum]
) -> None:
    data = [sft_datum("The cat sat.")]

    def broken(batch: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        raise ZeroDivisionError("the loss broke")

    before = trainer.forward_backward(data, "cross_entropy")  # queued ahead of the failure: unaffected
    failed = trainer.forward_backward_custom(data, broken)
    after = [
        trainer.forward_backward(data, "cross_entropy"),
        trainer.optim_step(ADAM),
        trainer.save_state("poisoned"),
        trainer.save_weights_and_get_sampling_client(),
    ]
    assert before.result().metrics["loss:sum"] > 0
    with pytest.raises(ZeroDivisionError):
        failed.result()
    for future in [*after, trainer.forward_backward_custom(data, lambda b, lp: (sum(x.sum() for x in lp), {}))]:
        with pytest.raises(RuntimeError) as raised:
            future.result()
        assert str(raised.value) == (
            "A previous request failed; this TrainingClient is poisoned and cannot accept further requests."
        )
        assert isinstance(raised.value.__cause__, ZeroDivisionError)
    assert trainer.get_info().model_id == trainer.model_id  # what takes no turn still answers


def test_a_failed_ordinary_request_does_not_poison_the_client(
    trainer: TrainingClient, sft_datum: Callable[..., types.Datum]
) -> None:
    with pytest.raises(tinker.BadRequestError):
        trainer.forward_backward([sft_datum("abc")], "ppo").result()  # no advantages
    assert trainer.optim_step(ADAM).result().metrics is not None


# -- 7. optim_step's argument ----------------------------------------------------------------------------------------


def test_optim_step_refuses_non_optimizer_parameters_at_call_time_as_the_sdk_does(trainer: TrainingClient) -> None:
    with pytest.raises(TypeError) as theirs:
        tinker.TrainingClient.optim_step(object(), {"learning_rate": 1e-3})  # type: ignore[arg-type]
    with pytest.raises(TypeError) as ours:
        trainer.optim_step({"learning_rate": 1e-3})  # type: ignore[arg-type]
    assert str(ours.value) == str(theirs.value) == "Expected AdamParams or OptimParamsBase"
    with pytest.raises(TypeError, match="Expected AdamParams"):
        trainer.optim_step()
    with pytest.raises(tinker.BadRequestError, match="AdamW"):  # other optimizers' parameters: the request fails
        trainer.optim_step(types.DimuonParams(learning_rate=0.01)).result()


# -- 3 and 8. the RestClient and ttl_seconds ---------------------------------------------------------------------------


def test_the_rest_client_lists_reads_downloads_and_deletes_checkpoints(
    service: ServiceClient, trainer: TrainingClient, tmp_path: Path
) -> None:
    state = trainer.save_state("a", user_metadata={"note": "first"}).result().path
    sampler_path = trainer.save_weights_for_sampler("b").result().path
    other = service.create_lora_training_client(TINY_MODEL, rank=2, seed=1).result()
    other_path = other.save_state("c").result().path
    rest = service.create_rest_client()

    listed = rest.list_checkpoints(trainer.model_id).result()
    assert isinstance(listed, types.CheckpointsListResponse)
    assert [(c.checkpoint_type, c.checkpoint_id, c.tinker_path) for c in listed.checkpoints] == [
        ("sampler", "sampler_weights/b", sampler_path),
        ("training", "weights/a", state),
    ]
    assert listed.checkpoints[1].user_metadata == {"note": "first"} and listed.checkpoints[1].size_bytes > 0
    run = rest.get_training_run(trainer.model_id).result()
    assert (run.training_run_id, run.base_model, run.lora_rank, run.is_lora) == (
        trainer.model_id,
        TINY_MODEL,
        4,
        True,
    )
    assert run.last_checkpoint is not None and run.last_checkpoint.tinker_path == state
    assert run.last_sampler_checkpoint is not None and run.last_sampler_checkpoint.tinker_path == sampler_path
    assert rest.get_training_run_by_tinker_path(state).result() == run
    runs = rest.list_training_runs().result()
    assert [r.training_run_id for r in runs.training_runs] == [other.model_id, trainer.model_id]
    assert runs.cursor.total_count == 2
    second_page = rest.list_training_runs(limit=1, offset=1).result().training_runs
    assert [r.training_run_id for r in second_page] == [trainer.model_id]
    everything = rest.list_user_checkpoints().result()
    assert [c.tinker_path for c in everything.checkpoints] == [other_path, sampler_path, state]
    assert everything.cursor is not None and everything.cursor.total_count == 3
    info = rest.get_weights_info_by_tinker_path(other_path).result()
    assert (info.base_model, info.is_lora, info.lora_rank) == (TINY_MODEL, True, 2)

    # the SDK's own download helper fetches the file:// URLs of external weights: a standard peft adapter folder
    with pytest.raises(ValueError, match="only accepts external weights checkpoints"):
        rest.get_external_weights_urls(state)
    external = trainer.save_weights_external("e").result().path
    _download_external_weights(rest, external, tmp_path / "download", show_progress=False, format="json")
    downloaded = {p.name for p in (tmp_path / "download").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= downloaded and "optimizer.safetensors" not in downloaded
    assert [c.checkpoint_type for c in rest.list_checkpoints(trainer.model_id).result().checkpoints][0] == "external"
    rest.delete_checkpoint_from_tinker_path(external).result()

    rest.delete_checkpoint(trainer.model_id, "weights/a").result()
    rest.delete_checkpoint_from_tinker_path(sampler_path).result()
    assert rest.list_checkpoints(trainer.model_id).result().checkpoints == []
    for missing in (
        rest.get_training_run(trainer.model_id),
        rest.get_weights_info_by_tinker_path(state),
        rest.delete_checkpoint_from_tinker_path(state),
        service.create_training_client_from_state(state),
    ):
        with pytest.raises(tinker.NotFoundError):
            missing.result()


@pytest.mark.slow
def test_ttl_seconds_expires_local_checkpoints(service: ServiceClient, trainer: TrainingClient) -> None:
    state = trainer.save_state("short", ttl_seconds=1).result().path
    kept = trainer.save_weights_for_sampler("kept").result().path
    folder = service.checkpoint_root / trainer.model_id / "weights" / "short"
    meta = json.loads((folder / "minds_checkpoint.json").read_text())
    assert meta["expires_at"] is not None
    rest = service.create_rest_client()
    listed = {c.tinker_path: c for c in rest.list_checkpoints(trainer.model_id).result().checkpoints}
    assert listed[state].expires_at is not None and listed[kept].expires_at is None

    time.sleep(1.1)
    assert folder.is_dir()  # removed lazily ...
    with pytest.raises(tinker.NotFoundError, match="expired"):
        service.create_training_client_from_state(state).result()
    with pytest.raises(tinker.NotFoundError):
        trainer.load_state(state).result()
    assert [c.tinker_path for c in rest.list_checkpoints(trainer.model_id).result().checkpoints] == [kept]
    assert not folder.exists()  # ... by the next listing (or save)
    with pytest.raises(tinker.BadRequestError, match="ttl_seconds"):
        trainer.save_state("never", ttl_seconds=0).result()
