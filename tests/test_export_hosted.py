"""Exporting a hosted checkpoint through the SDK's download of external weights.

The hosted service cannot be reached here, so its two clients are fakes
(``FakeHostedService``, ``FakeRestClient``), reached through the real tinker
backend's ``export_adapter``, answering with real ``tinker.types``;
the adapter files they point at are a real PEFT adapter built from a trained
local checkpoint and fetched over real HTTP from a server on 127.0.0.1, as the
signed URLs of ``RestClient.get_external_weights_urls`` are.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import http.server
import inspect
import json
import threading
from typing import Any

import pytest

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

import tinker
import torch
from peft import PeftModel
from tinker import types
from transformers import AutoModelForCausalLM

from minds_core.backends import LocalBackend
from minds_core.backends.local import ServiceClient
from minds_core.backends.local.model.tiny_model import TINY_MODEL, tiny_model_path
from minds_core.backends.tinker import TinkerBackend
from minds_core.base.errors import MindsError, UsageError
from minds_core.checkpoints.export import export_checkpoint
from minds_core.checkpoints.reference import resolve_checkpoint
from minds_core.session.service import ServiceLifetime
from minds_core.training.datums import rl_datum

TOKENS = [5, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]
STATE = "tinker://run-hosted/weights/step-000003"


def _done(value: Any) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return future


class FakeTrainingClient:
    """Fake of the hosted TrainingClient: only save_weights_external, as the SDK's download uses it."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def save_weights_external(self, name: str, ttl_seconds: int | None = None) -> concurrent.futures.Future:
        self.calls.append(("save_weights_external", name, ttl_seconds))
        return _done(types.SaveWeightsExternalResponse(path=f"tinker://run-export/external_weights/{name}"))


class FakeHostedService:
    """Fake of tinker.ServiceClient: loads a saved state into a (fake) training client; its RestClient is ``rest``."""

    def __init__(self, rest: FakeRestClient) -> None:
        self.calls: list = []
        self.rest = rest

    def create_rest_client(self) -> FakeRestClient:
        return self.rest

    def create_training_client_from_state(self, path: str, user_metadata: dict | None = None) -> concurrent.futures.Future:
        self.calls.append(("create_training_client_from_state", path))
        return _done(FakeTrainingClient(self.calls))


class FakeRestClient:
    """Fake of tinker.RestClient: signed URLs for an export's files, weights info, deletion."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self.deleted: list[str] = []

    def get_external_weights_urls(self, path: str) -> concurrent.futures.Future:
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        return _done(types.ExternalWeightsUrlsResponse(urls=self.urls, expires=expires))

    def get_weights_info_by_tinker_path(self, path: str) -> concurrent.futures.Future:
        return _done(types.WeightsInfoResponse(base_model=str(tiny_model_path()), is_lora=True, lora_rank=4))

    def delete_checkpoint_from_tinker_path(self, path: str) -> concurrent.futures.Future:
        self.deleted.append(path)
        return _done(None)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Any]:
    """A local adapter trained one step, exported as the service exports external weights."""
    root = tmp_path_factory.mktemp("store")
    service = ServiceClient(checkpoint_root=root / "runs" / "_checkpoints")
    training = service.create_lora_training_client(TINY_MODEL, rank=4, seed=1).result()
    datum = rl_datum(TOKENS, [i >= 6 for i in range(len(TOKENS))], [-5.0] * len(TOKENS), [1.0] * len(TOKENS))
    training.forward_backward([datum], "importance_sampling").result()
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = training.save_weights_for_sampler("s").result().path
    sampler = service.create_sampling_client(model_path=path).result()
    logprobs = sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()[1:]
    service.close("success")
    served = root / "served"
    ref = resolve_checkpoint(path, None, [f"runs_dir={root / 'runs'}", "backend=local"])
    with ServiceLifetime(ref.config, "local", LocalBackend()) as door:
        export_checkpoint(ref, served, door)
    config = json.loads((served / "adapter_config.json").read_text())
    del config["base_model_name_or_path"]  # the service's files do not name a base on this machine
    (served / "adapter_config.json").write_text(json.dumps(config))
    return {"served": served, "logprobs": logprobs}


@pytest.fixture
def file_server(trained):
    handler = functools.partial(_QuietHandler, directory=str(trained["served"]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log in the test output."""


def _export(path: str, out, service: FakeHostedService) -> dict[str, Any]:
    """``path`` exported through the real tinker backend's ``export_adapter``, its service the fake."""
    ref = resolve_checkpoint(path, None, ["backend=tinker"])
    return export_checkpoint(ref, out, ServiceLifetime(ref.config, "tinker", TinkerBackend(), service=service))


def _urls(base: str) -> dict[str, str]:
    return {name: f"{base}/{name}?sig=abc" for name in ("adapter_config.json", "adapter_model.safetensors")}


def _logprobs(model: torch.nn.Module) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([TOKENS])).logits[0]
    return torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(TOKENS[1:])[:, None])[:, 0].tolist()


@pytest.mark.slow
def test_a_hosted_checkpoint_is_downloaded_as_a_peft_adapter(trained, file_server, tmp_path):
    rest = FakeRestClient(_urls(file_server))
    service = FakeHostedService(rest)
    out = tmp_path / "adapter"
    written = _export(STATE, out, service)
    assert written["base_model"] == str(tiny_model_path()) and written["source"] == STATE
    assert service.calls == [("create_training_client_from_state", STATE), ("save_weights_external", "minds-export", 3600)]
    assert rest.deleted == ["tinker://run-export/external_weights/minds-export"]  # the temporary export is removed
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_model_path())
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    lps = _logprobs(PeftModel.from_pretrained(base, str(out)).eval())
    assert max(abs(a - b) for a, b in zip(lps, trained["logprobs"])) < 1e-4


def test_external_weights_are_downloaded_directly(file_server, tmp_path):
    rest = FakeRestClient(_urls(file_server))
    service = FakeHostedService(rest)
    _export("tinker://run-x/external_weights/final", tmp_path / "a", service)
    assert service.calls == [] and rest.deleted == []
    assert (tmp_path / "a" / "adapter_model.safetensors").stat().st_size > 0


def test_sampler_checkpoints_cannot_be_downloaded(tmp_path):
    with pytest.raises(UsageError, match="sampler checkpoint.*state_path"):
        _export("tinker://run-x/sampler_weights/s", tmp_path / "a", FakeHostedService(FakeRestClient({})))
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("names", "error", "message"),
    [
        ({"../escape.json": "adapter_config.json"}, MindsError, "unsafe file path"),
        ({"adapter_model.safetensors.age": "adapter_model.safetensors"}, UsageError, "age-encrypted"),
        ({"adapter_config.json": "missing.json"}, MindsError, "downloading adapter_config.json failed"),
        ({"adapter_config.json": "adapter_config.json"}, MindsError, "not a PEFT adapter"),
    ],
)
def test_bad_downloads_are_reported_and_leave_nothing(file_server, tmp_path, names, error, message):
    rest = FakeRestClient({name: f"{file_server}/{source}" for name, source in names.items()})
    with pytest.raises(error, match=message):
        _export(STATE, tmp_path / "a", FakeHostedService(rest))
    assert list(tmp_path.iterdir()) == []
    assert rest.deleted == ["tinker://run-export/external_weights/minds-export"]


def test_the_fakes_mirror_the_installed_sdk():
    """Every method the export calls exists on the SDK's client with the keyword arguments it passes."""
    for cls, name, keywords in (
        (tinker.RestClient, "get_external_weights_urls", ()),
        (tinker.RestClient, "get_weights_info_by_tinker_path", ()),
        (tinker.RestClient, "delete_checkpoint_from_tinker_path", ()),
        (tinker.ServiceClient, "create_training_client_from_state", ("user_metadata",)),
        (tinker.ServiceClient, "create_rest_client", ()),
        (tinker.TrainingClient, "save_weights_external", ("ttl_seconds",)),
    ):
        parameters = inspect.signature(getattr(cls, name)).parameters
        assert set(keywords) <= set(parameters), f"{cls.__name__}.{name}{inspect.signature(getattr(cls, name))}"


def test_an_out_dir_that_is_a_file_is_named_a_file(tmp_path):
    (tmp_path / "empty").write_text("")
    with pytest.raises(UsageError, match=r"empty is a file, not a folder: export to a new folder"):
        _export(STATE, tmp_path / "empty", FakeHostedService(FakeRestClient({})))  # not "is not empty": it is
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(UsageError, match=r"full already exists and is not empty: export to a new folder"):
        _export(STATE, tmp_path / "full", FakeHostedService(FakeRestClient({})))
