"""What a Tinker user runs first, in process and through ``minds serve`` with the real SDK.

Weights leave the Tinker way (``save_weights_external``, ``tinker checkpoint
download``), a run's ``user_metadata`` comes back, ``stable_reinforce`` trains on
datums with provenance as the cookbook builds them, and the deprecated
``*_async`` methods the OpenReward recipe uses behave alike in both modes, as do a
session's runs and samplers (``get_session``, ``get_sampler``) and the refusals of
calls with no local meaning (publishing, projects, traces, ``whoami``).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tinker
import torch
from peft import PeftModel
from tinker import types
from transformers import AutoConfig, AutoModelForCausalLM

from minds_core.backends.local import ServiceClient
from minds_core.backends.local.model.tiny_model import tiny_model_path
from minds_core.backends.local.refusals import refusal
from minds_core.testing import with_sampled_provenance

from .conftest import KEY, Served

pytestmark = pytest.mark.slow

#: what the fixture's services are made with, for get_session to give back
SESSION = {"user_metadata": {"recipe": "rl_basic"}, "display_name": "my run"}
TOKENS = [5, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]


def _sft(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:]), "weights": np.ones(len(tokens) - 1)},
    )


@pytest.fixture(params=["in-process", "served"])
def clients(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """(service, rest client): the local backend in process, or the unmodified SDK against ``minds serve``."""
    if request.param == "in-process":
        service: Any = ServiceClient(checkpoint_root=tmp_path / "ckpt", **SESSION)
    else:
        served: Served = request.getfixturevalue("served")
        service = tinker.ServiceClient(base_url=served.url, api_key=KEY, **SESSION)
    yield service, service.create_rest_client()
    service.close("success").result(timeout=30)


def test_the_quickstarts_list_of_supported_models_names_the_models_it_trains(clients: tuple[Any, Any]) -> None:
    # Tinker's quickstart begins by listing the models: the RestClient's way and the deprecated ServiceClient one
    service, rest = clients
    service.create_lora_training_client("minds-tiny", rank=4).result()
    models = rest.get_server_capabilities().result().supported_models
    names = [model.model_name for model in models]
    assert sorted(names) == ["minds-small", "minds-tiny"]  # the built-in models, the one trained on loaded
    listed = models[names.index("minds-tiny")]
    assert listed.trainable and listed.sampleable
    assert listed.max_context_length == AutoConfig.from_pretrained(tiny_model_path()).max_position_embeddings
    with pytest.warns(FutureWarning, match="get_server_capabilities"):
        deprecated = service.get_server_capabilities()
    assert sorted(model.model_name for model in deprecated.supported_models) == sorted(names)
    with pytest.warns(FutureWarning, match="get_server_capabilities_async"):
        answered = asyncio.run(service.get_server_capabilities_async())
    assert sorted(model.model_name for model in answered.supported_models) == sorted(names)
    assert listed in asyncio.run(_awaited(rest.get_server_capabilities())).supported_models


async def _awaited(future: Any) -> Any:
    return await future


def test_a_sessions_metadata_and_display_name_come_back_from_get_session(served: Served) -> None:
    # the cookbook names its session (session_name) and tags it with the recipe's metadata
    service = tinker.ServiceClient(base_url=served.url, api_key=KEY, user_metadata={"recipe": "rl_basic"}, display_name="my run")
    try:
        trainer = service.create_lora_training_client("minds-tiny", rank=4).result()
        session = tinker.RestClient(base_url=served.url, api_key=KEY).get_session(service.holder.get_session_id()).result()
        assert (session.user_metadata, session.display_name) == ({"recipe": "rl_basic"}, "my run")
        assert session.training_run_ids == [trainer.model_id]
    finally:
        service.close("success").result(timeout=30)
    # the server keeps them while it runs: past its bound, a session is refused, saying which limit
    with pytest.raises(tinker.BadRequestError, match="max_session_metadata_bytes"):
        tinker.ServiceClient(base_url=served.url, api_key=KEY, user_metadata={"blob": "x" * 70_000}).create_lora_training_client(
            "minds-tiny", rank=4
        ).result()


def test_get_session_lists_its_runs_and_samplers_and_get_sampler_says_what_each_samples(clients: tuple[Any, Any]) -> None:
    service, rest = clients
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=0).result()
    (session_id,) = rest.list_sessions(limit=1).result().sessions  # the newest: this service's (the SDK's opens with its first client)
    path = trainer.save_weights_for_sampler("kept").result().path
    samplers = [service.create_sampling_client(model_path=path).result(), trainer.save_weights_and_get_sampling_client().result()]
    session = rest.get_session(session_id).result()
    assert (session.training_run_ids, session.user_metadata, session.display_name) == ([trainer.model_id], *SESSION.values())
    records = [rest.get_sampler(sampler_id).result() for sampler_id in session.sampler_ids]
    assert sorted((r.base_model, r.model_path or "") for r in records) == [("minds-tiny", ""), ("minds-tiny", path)]
    assert asyncio.run(_awaited(rest.get_sampler(records[0].sampler_id))) == records[0]
    with pytest.warns(FutureWarning, match="get_session_async"):
        again = asyncio.run(rest.get_session_async(session_id))
    assert sorted(again.sampler_ids) == sorted(session.sampler_ids)  # served, in the order last used
    for unknown in (lambda: rest.get_session("no-such-session"), lambda: rest.get_sampler(f"{session_id}:sample:99")):
        with pytest.raises(tinker.NotFoundError):
            unknown().result()
    assert rest.list_sessions(limit=0).result().sessions == [] and samplers


def test_calls_with_no_local_meaning_are_refused_naming_the_call_and_why(
    clients: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINKER_PROJECT_ID", "proj-archive")  # the SDK's copy_weights asks for a project before sending
    service, rest = clients
    path = service.create_lora_training_client("minds-tiny", rank=4, seed=0).result().save_state("kept").result().path
    (session_id,) = rest.list_sessions(limit=1).result().sessions
    calls = {
        "publish_checkpoint_from_tinker_path": lambda: rest.publish_checkpoint_from_tinker_path(path),
        "unpublish_checkpoint_from_tinker_path": lambda: rest.unpublish_checkpoint_from_tinker_path(path),
        "copy_weights": lambda: rest.copy_weights(path, "proj-archive"),
        "assign_session_project": lambda: rest.assign_session_project(session_id, "proj-archive"),
        "export_session_trace": lambda: rest.export_session_trace(session_id),
    }
    for call, make in [*calls.items(), ("copy_weights", lambda: service.copy_weights(path))]:
        with pytest.raises(tinker.BadRequestError, match=re.escape(refusal(call))):
            make().result()
    with pytest.raises(RuntimeError, match="whoami"):  # through minds serve, the SDK's own words: it has no accounts
        rest.whoami().result()


def test_a_sampler_handle_reaches_the_sampler_through_serve_and_is_refused_in_process(clients: tuple[Any, Any]) -> None:
    service, _ = clients
    sampler = service.create_sampling_client(base_model="minds-tiny").result()
    if isinstance(sampler, tinker.SamplingClient):
        again = tinker.SamplingClient.from_sampler_handle(sampler.get_sampler_handle(), api_key=KEY)
        assert again.get_base_model() == "minds-tiny"
        assert again.sample(types.ModelInput.from_ints([5]), 1, types.SamplingParams(max_tokens=2)).result().sequences
    else:
        with pytest.raises(TypeError, match="get_sampler_handle: a local SamplingClient lives in its process"):
            sampler.get_sampler_handle()


def test_a_run_made_from_a_checkpoint_is_found_by_its_model_id(clients: tuple[Any, Any]) -> None:
    # the SDK names such a run itself (session:train:N, "the same model id the server derives"): its
    # checkpoints and its training run must be found by that id, as a resumed cookbook run looks them up
    service, rest = clients
    saved = service.create_lora_training_client("minds-tiny", rank=4, seed=0).result().save_state("first").result().path
    for resumed in (
        service.create_training_client_from_state(saved).result(),
        service.create_training_client_from_state_with_optimizer(saved).result(),
    ):
        again = resumed.save_state("again").result().path
        assert again == f"tinker://{resumed.model_id}/weights/again"
        assert resumed.get_info().model_id == resumed.model_id
        assert rest.get_training_run(resumed.model_id).result().training_run_id == resumed.model_id
        assert [c.tinker_path for c in rest.list_checkpoints(resumed.model_id).result().checkpoints] == [again]


def test_user_metadata_of_a_run_comes_back_with_its_training_run(clients: tuple[Any, Any]) -> None:
    service, rest = clients
    metadata = {"renderer_name": "qwen3", "created_by": "a cookbook loop"}
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=0, user_metadata=metadata).result()
    path = trainer.save_state("first").result().path
    assert rest.get_training_run_by_tinker_path(path).result().user_metadata == metadata
    resumed = service.create_training_client_from_state_with_optimizer(path, user_metadata={"renderer_name": "qwen3"}).result()
    again = resumed.save_state("resumed").result().path
    assert rest.get_training_run_by_tinker_path(again).result().user_metadata == {"renderer_name": "qwen3"}


def test_set_checkpoint_ttl_moves_or_removes_a_checkpoints_expiry_and_is_honored(clients: tuple[Any, Any]) -> None:
    service, rest = clients
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=0).result()
    short = trainer.save_state("short", ttl_seconds=1).result().path
    later = trainer.save_weights_for_sampler("later").result().path

    rest.set_checkpoint_ttl_from_tinker_path(short, None).result()  # kept: the 1 s expiry is gone
    rest.set_checkpoint_ttl_from_tinker_path(later, 7200).result()
    time.sleep(1.1)
    listed = {c.tinker_path: c.expires_at for c in rest.list_checkpoints(trainer.model_id).result().checkpoints}
    assert listed[short] is None
    assert abs(listed[later] - (datetime.now(UTC) + timedelta(seconds=7200))) < timedelta(minutes=1)
    service.create_training_client_from_state(short).result()  # still loads

    for wrong in (59, 10 * 366 * 24 * 3600, 3600.5, True):
        with pytest.raises(tinker.BadRequestError, match=r"ttl_seconds must be a whole number of seconds from 3600 \(1 hour\)"):
            rest.set_checkpoint_ttl_from_tinker_path(short, wrong).result()
    with pytest.raises(tinker.NotFoundError):
        rest.set_checkpoint_ttl_from_tinker_path(short.replace("/short", "/gone"), 3600).result()


def test_deprecated_async_methods_run_the_openreward_recipes_loop(clients: tuple[Any, Any]) -> None:
    service, _ = clients

    async def loop() -> list[float]:
        trainer = await service.create_lora_training_client_async("minds-tiny", rank=4, seed=0)
        losses = []
        for step in range(2):  # as the recipe's main.py: await the *_async call, then await the future it gives
            fwdbwd_future = await trainer.forward_backward_async([_sft(TOKENS)], loss_fn="cross_entropy")
            optim_future = await trainer.optim_step_async(types.AdamParams(learning_rate=1e-2))
            losses.append((await fwdbwd_future).metrics["loss:sum"])
            await optim_future
            sampler = await trainer.save_weights_and_get_sampling_client_async(name=f"step_{step + 1:06d}")
        save_future = await trainer.save_state_async("checkpoint_000002")
        assert (await save_future).path.endswith("/weights/checkpoint_000002")
        sampled = await sampler.sample_async(types.ModelInput.from_ints(TOKENS[:4]), 2, types.SamplingParams(max_tokens=3, seed=0))
        assert len(sampled.sequences) == 2 and await sampler.get_base_model_async() == "minds-tiny"
        return losses

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = asyncio.run(loop())
    assert losses[1] < losses[0]
    deprecated = {str(w.message).split("(")[0] for w in caught if issubclass(w.category, FutureWarning) and "DEPRECATED" in str(w.message)}
    assert {
        "DEPRECATED: TrainingClient.forward_backward_async",
        "DEPRECATED: TrainingClient.optim_step_async",
        "DEPRECATED: SamplingClient.sample_async",
    } <= deprecated, deprecated


def test_stable_reinforce_trains_on_datums_with_provenance_as_the_cookbook_builds_them(clients: tuple[Any, Any]) -> None:
    service, _ = clients
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=0).result()
    sampler = trainer.save_weights_and_get_sampling_client(record_stability_info=True).result()
    prompt = TOKENS[:5]
    sampled = sampler.sample(types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=4, seed=3)).result()
    data = []
    for sequence, advantage in zip(sampled.sequences, (1.0, -1.0), strict=True):
        tokens, n = prompt + list(sequence.tokens), len(sequence.tokens)
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": np.array(tokens[1:]),
                "logprobs": np.array([0.0] * (len(prompt) - 1) + list(sequence.logprobs), dtype=np.float32),
                "advantages": np.array([0.0] * (len(prompt) - 1) + [advantage] * n, dtype=np.float32),
            },
        )
        data.append(with_sampled_provenance(datum, len(prompt), sequence.sequence_id))  # as the cookbook's rl_loop
    result = trainer.forward_backward(data, "stable_reinforce", {"kl_coeff": 0.1}).result()
    step = trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert np.isfinite(result.metrics["loss:sum"]) and step.metrics["grad_norm:mean"] > 0
    # a datum without provenance is the user's error, refused when the request runs: one class in process and
    # over HTTP, the SDK's RequestFailedError of category user, as the hosted service answers it
    with pytest.raises(tinker.RequestFailedError, match="needs every datum to name the sampled") as refused:
        trainer.forward_backward([_sft(TOKENS)], "stable_reinforce").result()
    assert refused.value.category == types.RequestErrorCategory.User


def test_the_sdks_create_custom_loss_example_trains_as_cross_entropy_does(clients: tuple[Any, Any]) -> None:
    # SDK 0.38's create_custom_loss docstring, word for word; in process there was no such method
    service, _ = clients

    def neg_ll(logprobs, weights):
        loss = -(logprobs * weights).sum()
        return loss, {"custom/neg_ll:sum": loss}

    loss_handle = service.create_custom_loss(neg_ll, input_ranks={"logprobs": 1, "weights": 1}).result()
    custom, plain = (service.create_lora_training_client("minds-tiny", rank=4, seed=0).result() for _ in range(2))
    data = [_sft(TOKENS), _sft(TOKENS[3:])]
    result = custom.forward_backward_custom(data, loss_handle).result()
    reference = plain.forward_backward(data, "cross_entropy").result()
    assert result.metrics["custom/neg_ll:sum"] == pytest.approx(reference.metrics["loss:sum"], rel=1e-5)
    for trainer in (custom, plain):
        trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = [t.forward(data, "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy() for t in (custom, plain)]
    np.testing.assert_allclose(after[0], after[1], rtol=0, atol=1e-4)  # the same gradients took the same step
    unweighted = types.Datum(model_input=data[0].model_input, loss_fn_inputs={"target_tokens": data[0].loss_fn_inputs["target_tokens"]})
    with pytest.raises(ValueError, match="datum\\[0\\] has no loss_fn_inputs\\['weights'\\], which loss 'neg_ll' takes"):
        custom.forward_backward_custom([unweighted], loss_handle)


def _tinker_cli(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    """The SDK's own ``tinker`` command, pointed at ``served``."""
    env = {**os.environ, "TINKER_BASE_URL": served.url, "TINKER_API_KEY": KEY}
    cli = Path(sys.executable).with_name("tinker")
    return subprocess.run([str(cli), *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def _tinker_download(served: Served, path: str, output: Path) -> Path:
    """``tinker checkpoint download PATH --output OUTPUT``; the folder it made, holding a peft adapter."""
    done = _tinker_cli(served, "checkpoint", "download", path, "--output", str(output))
    assert done.returncode == 0, done.stdout + done.stderr
    folder = output / path.removeprefix("tinker://").replace("/", "_")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in folder.iterdir()}
    return folder


def _trained(service: tinker.ServiceClient) -> tinker.TrainingClient:
    trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=0).result()
    for _ in range(3):
        trainer.forward_backward([_sft(TOKENS)], "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    return trainer


def _assert_scores_as_the_server(folder: Path, trainer: tinker.TrainingClient) -> None:
    """The adapter in ``folder`` loads with plain peft and scores as the server's trained weights do."""
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(folder)).eval()
    with torch.no_grad():
        logits = model(torch.tensor([TOKENS])).logits[0, :-1].log_softmax(-1)
    ours = logits.gather(1, torch.tensor(TOKENS[1:])[:, None])[:, 0]
    served_logprobs = trainer.save_weights_and_get_sampling_client().result().compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()[1:]
    torch.testing.assert_close(ours, torch.tensor(served_logprobs), rtol=0, atol=2e-3)


def test_tinker_checkpoint_download_of_a_served_run_gives_a_loadable_adapter(
    served: Served, service: tinker.ServiceClient, tmp_path: Path
) -> None:
    trainer = _trained(service)
    external = trainer.save_weights_external("final").result().path
    assert external.endswith("/external_weights/final")
    folder = _tinker_download(served, external, tmp_path)
    _assert_scores_as_the_server(folder, trainer)

    # the signed URLs name no server folder, and a tampered one is refused
    urls = service.create_rest_client().get_external_weights_urls(external).result().urls
    assert all(url.startswith(f"{served.url}/api/v1/downloads/") for url in urls.values())
    assert not any("ckpt" in url for url in urls.values())
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urls["adapter_config.json"].replace("signature=", "signature=0"), timeout=30)
    assert refused.value.code == 401


def test_tinker_checkpoint_download_of_a_training_checkpoint_exports_renews_its_ttl_and_cleans_up(
    served: Served, service: tinker.ServiceClient, tmp_path: Path
) -> None:
    """A ``weights/`` path: the CLI loads it into a new run, exports it with a ttl, renews that ttl, deletes the export."""
    trainer = _trained(service)
    state = trainer.save_state("final").result().path
    rest = tinker.RestClient(base_url=served.url, api_key=KEY)
    before = {c.tinker_path for c in rest.list_user_checkpoints(limit=1000).result().checkpoints}
    _assert_scores_as_the_server(_tinker_download(served, state, tmp_path), trainer)
    after = {c.tinker_path for c in rest.list_user_checkpoints(limit=1000).result().checkpoints}
    assert after == before  # the temporary export is gone

    # and the CLI's own ttl command, both ways
    assert _tinker_cli(served, "checkpoint", "set-ttl", state, "--ttl", "86400").returncode == 0
    listed = {c.tinker_path: c.expires_at for c in rest.list_checkpoints(trainer.model_id).result().checkpoints}
    assert listed[state] is not None and listed[state] > datetime.now(UTC) + timedelta(hours=23)
    assert _tinker_cli(served, "checkpoint", "set-ttl", state, "--remove").returncode == 0
    assert rest.get_training_run_by_tinker_path(state).result().last_checkpoint.expires_at is None


def test_the_cookbooks_weights_download_of_a_training_checkpoint_decrypts_a_loadable_adapter(
    served: Served, service: tinker.ServiceClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tinker_cookbook.weights.download: a new run from the checkpoint, an export age-encrypted to a fresh key, deleted after."""
    from tinker_cookbook import weights

    monkeypatch.setenv("TINKER_API_KEY", KEY)
    trainer = _trained(service)
    state = trainer.save_state("final").result().path
    rest = tinker.RestClient(base_url=served.url, api_key=KEY)
    before = {c.tinker_path for c in rest.list_user_checkpoints(limit=1000).result().checkpoints}
    out = tmp_path / "adapter"
    assert weights.download(tinker_path=state, output_dir=str(out), base_url=served.url) == str(out)
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    _assert_scores_as_the_server(out, trainer)
    assert {c.tinker_path for c in rest.list_user_checkpoints(limit=1000).result().checkpoints} == before


def test_external_weights_encrypted_to_age_recipients_hold_no_plaintext_and_decrypt_to_the_adapter(
    clients: tuple[Any, Any], tmp_path: Path
) -> None:
    import pyrage
    from safetensors.torch import load as load_tensors

    service, rest = clients
    trainer = _trained(service)
    identity = pyrage.x25519.Identity.generate()
    sealed = trainer.save_weights_external("sealed", age_encryption_recipients=[str(identity.to_public())]).result().path
    plain = trainer.save_weights_external("plain").result().path

    def fetch(path: str) -> dict[str, bytes]:
        urls = rest.get_external_weights_urls(path).result().urls
        return {name: urllib.request.urlopen(url, timeout=30).read() for name, url in urls.items()}

    sealed_files, plain_files = fetch(sealed), fetch(plain)
    assert sorted(sealed_files) == ["adapter_config.json.age", "adapter_model.safetensors.age"]
    assert sorted(plain_files) == ["adapter_config.json", "adapter_model.safetensors"]
    opened = {name.removesuffix(".age"): pyrage.decrypt(data, [identity]) for name, data in sealed_files.items()}
    assert opened["adapter_config.json"] == plain_files["adapter_config.json"]
    expected, decrypted = (load_tensors(files["adapter_model.safetensors"]) for files in (plain_files, opened))
    assert decrypted.keys() == expected.keys() and expected  # every tensor, none missing
    for name, tensor in decrypted.items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0)
    assert not any(plain_files["adapter_model.safetensors"][-64:] in data for data in sealed_files.values())

    refused = (tinker.BadRequestError, tinker.RequestFailedError)  # a 400 in process, a user-category failure over HTTP
    with pytest.raises(refused, match="cannot be loaded"):
        service.create_training_client_from_state(sealed).result()
    with pytest.raises(refused, match=r"age_encryption_recipients\[1\].*not an age public key"):
        trainer.save_weights_external("bad", age_encryption_recipients=[str(identity.to_public()), "age1nope"]).result()
    with pytest.raises(tinker.NotFoundError):
        rest.get_external_weights_urls(plain.replace("/plain", "/bad")).result()  # nothing was written
