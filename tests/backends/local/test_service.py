"""The service: the tiny model and its cache, unknown models, errors that spare the worker, closing."""

from __future__ import annotations

import math
import string
import threading
from pathlib import Path

import pytest
import tinker
from tinker import types

from minds_core.backends.local import (
    DEFAULT_BASE_MODEL,
    LocalNotFoundError,
    ServiceClient,
    TrainingClient,
    create_service_client,
)
from minds_core.backends.local.model.tiny_model import tiny_model_path


def test_default_model_name_and_factory(tmp_path: Path) -> None:
    assert DEFAULT_BASE_MODEL == "minds-small"
    service = create_service_client(tmp_path)
    assert isinstance(service, ServiceClient) and service.checkpoint_root == tmp_path
    service.close("success")


def test_tiny_tokenizer_is_lossless_and_speaks_chatml(trainer: TrainingClient) -> None:
    tokenizer = trainer.get_tokenizer()
    text = string.printable + "0123456789 12+34=46 ünïcødé ✓"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token is not None
    chat = [{"role": "user", "content": "What is 2+2?"}]
    rendered = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encode(rendered)
    assert ids.count(tokenizer.eos_token_id) == 1 and max(ids) < len(tokenizer)


def test_tiny_model_is_built_once_deterministically_and_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = []
    for cache in ("a", "b"):
        monkeypatch.setenv("MINDS_CACHE_DIR", str(tmp_path / cache))
        paths: list[Path] = []

        def build(into: list[Path] = paths) -> None:
            into.append(tiny_model_path())

        builders = [threading.Thread(target=build) for _ in range(3)]
        for builder in builders:
            builder.start()
        for builder in builders:
            builder.join()
        assert len(set(paths)) == 1 and paths[0] == tmp_path / cache / "models" / "minds-tiny-v1"
        assert [p.name for p in paths[0].parent.iterdir()] == ["minds-tiny-v1"]  # no staging left behind
        weights.append((paths[0] / "model.safetensors").read_bytes())
    assert weights[0] == weights[1]


def test_unknown_models_fail_clearly(service: ServiceClient) -> None:
    with pytest.raises(LocalNotFoundError, match="no such model directory"):
        service.create_lora_training_client("/no/such/model").result()
    with pytest.raises(tinker.NotFoundError, match="Cannot load base model"):
        service.create_sampling_client(base_model=str(Path(__file__).parent)).result()  # a dir, not a model
    assert service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=2).result().get_info().lora_rank == 2


def test_errors_fail_only_their_request(trainer: TrainingClient, sft_datum) -> None:
    good = [sft_datum("Hello, world!")]
    no_targets = types.Datum(model_input=types.ModelInput.from_ints([1, 2]), loss_fn_inputs={})
    futures = [
        trainer.forward_backward([no_targets], "cross_entropy"),
        trainer.forward_backward(good, "unknown_loss"),
        trainer.forward_backward(good, "cross_entropy"),
        trainer.optim_step(types.AdamParams(learning_rate=-1.0)),
        trainer.optim_step(types.AdamParams(learning_rate=float("inf"))),  # would turn every weight NaN
        trainer.optim_step(types.AdamParams(learning_rate=1e-3, weight_decay=float("inf"))),
        trainer.optim_step(types.AdamParams(learning_rate=1e-3)),
        trainer.save_state("../escape"),
        trainer.save_state("x" * 5000),  # past a file name's 255 bytes: was an OSError of the server
        trainer.forward(good, "cross_entropy"),
    ]
    outcomes = [f.future().exception() for f in futures]
    # refused when they ran: the SDK's RequestFailedError of category user (as over HTTP), still a 400 BadRequestError
    assert [type(e).__name__ if e else None for e in outcomes] == [
        "LocalRequestFailedError", "LocalRequestFailedError", None, "LocalRequestFailedError", "LocalRequestFailedError",
        "LocalRequestFailedError", None, "LocalRequestFailedError", "LocalRequestFailedError", None,
    ]
    assert all(isinstance(e, tinker.RequestFailedError) and e.category == "user" for e in outcomes if e)
    assert "5000 characters, at most 160" in str(outcomes[-2])
    assert "learning_rate=inf" in str(outcomes[4]) and "weight_decay=inf" in str(outcomes[5])
    assert all(math.isfinite(v) for v in futures[-1].result().loss_fn_outputs[0]["logprobs"].data)  # weights intact
    assert all(isinstance(e, tinker.BadRequestError) and e.status_code == 400 for e in outcomes if e)


def test_closing_stops_new_requests_and_removes_a_temporary_root(sft_datum) -> None:
    service = ServiceClient()
    root = service.checkpoint_root
    client = service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=2).result()
    client.save_state("x").result()
    assert root.is_dir()
    assert service.close("success").result() is None
    assert not root.exists()
    with pytest.raises(RuntimeError, match="closed"):
        service.create_lora_training_client(DEFAULT_BASE_MODEL)
    with pytest.raises(RuntimeError, match="closed"):
        client.forward([sft_datum("Hello")], "cross_entropy")
