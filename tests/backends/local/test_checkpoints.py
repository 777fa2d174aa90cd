"""Checkpoints: tinker paths, exact resume, other services on the same root, atomic writes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tinker import types
from tinker.types import ParsedCheckpointTinkerPath

from minds_core.backends.local import (
    TINY_MODEL,
    LocalBadRequestError,
    LocalConflictError,
    LocalNotFoundError,
    ServiceClient,
    TrainingClient,
)
from minds_core.backends.local.training import checkpoints

ADAM = types.AdamParams(learning_rate=1e-2, weight_decay=0.01)


def train(client: TrainingClient, data: list[types.Datum], steps: int) -> None:
    for _ in range(steps):
        client.forward_backward(data, "cross_entropy")
        step = client.optim_step(ADAM)
    step.result()


@pytest.mark.slow
def test_resume_with_optimizer_equals_uninterrupted_training(
    service: ServiceClient,
    trainer: TrainingClient,
    sft_datum: Callable[..., types.Datum],
    adapter_of: Callable[[TrainingClient], dict[str, torch.Tensor]],
) -> None:
    data = [sft_datum("The cat sat on the mat."), sft_datum("1+1=2")]
    train(trainer, data, 2)
    path = trainer.save_state("step-2").result().path
    train(trainer, data, 2)

    resumed = service.create_training_client_from_state_with_optimizer(path).result()
    train(resumed, data, 2)
    restarted = service.create_training_client_from_state(path).result()  # fresh AdamW moments
    train(restarted, data, 2)

    want, got, other = adapter_of(trainer), adapter_of(resumed), adapter_of(restarted)
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-6, atol=1e-7)
    assert any(not torch.allclose(other[key], want[key], atol=1e-5) for key in want)


def test_paths_map_to_directories_under_the_root(service: ServiceClient, trainer: TrainingClient) -> None:
    state = trainer.save_state("final").result().path
    sampler = trainer.save_weights_for_sampler("final").result().path
    assert state == f"tinker://{trainer.model_id}/weights/final"
    assert sampler == f"tinker://{trainer.model_id}/sampler_weights/final"
    assert ParsedCheckpointTinkerPath.from_tinker_path(state).checkpoint_type == "training"
    state_dir = service.checkpoint_root / trainer.model_id / "weights" / "final"
    sampler_dir = service.checkpoint_root / trainer.model_id / "sampler_weights" / "final"
    assert {p.name for p in state_dir.iterdir()} == {
        "adapter_model.safetensors", "adapter_config.json", "minds_checkpoint.json", "optimizer.safetensors"
    }
    assert not (sampler_dir / "optimizer.safetensors").exists()
    meta = json.loads((state_dir / "minds_checkpoint.json").read_text())
    assert meta["base_model"] == TINY_MODEL and meta["lora"]["rank"] == 4
    assert not [p for p in state_dir.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_checkpoints_remember_the_lora_settings(service: ServiceClient, new_trainer, adapter_of) -> None:
    original = new_trainer(train_unembed=False, train_mlp=False)
    path = original.save_state("attn-only").result().path
    loaded = service.create_training_client_from_state(path).result()
    assert loaded.get_info().lora_rank == 4 and loaded.get_info().model_data.model_name == TINY_MODEL
    assert adapter_of(loaded).keys() == adapter_of(original).keys()
    assert not any("lm_head" in k or "mlp" in k for k in adapter_of(loaded))
    assert loaded.model_id != original.model_id


@pytest.mark.slow
def test_another_process_resolves_the_paths(
    service: ServiceClient, trainer: TrainingClient, sft_datum, encode
) -> None:
    train(trainer, [sft_datum("Hello, world!")], 2)
    state = trainer.save_state("s").result().path
    sampler_path = trainer.save_weights_for_sampler("s").result().path
    prompt = encode("Hello, world!")
    here = trainer.save_weights_and_get_sampling_client().result().compute_logprobs(
        types.ModelInput.from_ints(prompt)
    ).result()
    script = textwrap.dedent(f"""
        import json
        from tinker import types
        from minds_core.backends.local import ServiceClient
        prompt = types.ModelInput.from_ints({prompt!r})
        with ServiceClient(checkpoint_root={str(service.checkpoint_root)!r}, device="cpu") as service:
            sampler = service.create_sampling_client(model_path={sampler_path!r}).result()
            trainer = service.create_training_client_from_state_with_optimizer({state!r}).result()
            resumed = trainer.save_weights_and_get_sampling_client().result()
            print(json.dumps([sampler.compute_logprobs(prompt).result(), resumed.compute_logprobs(prompt).result()]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from_sampler, from_state = json.loads(done.stdout.strip().splitlines()[-1])
    assert from_sampler[0] is None and from_state[0] is None
    assert max(abs(a - b) for a, b in zip(from_sampler[1:], here[1:], strict=True)) < 1e-6
    assert max(abs(a - b) for a, b in zip(from_state[1:], here[1:], strict=True)) < 1e-6


def test_path_errors(service: ServiceClient, trainer: TrainingClient) -> None:
    sampler_path = trainer.save_weights_for_sampler("only-weights").result().path
    with pytest.raises(LocalNotFoundError, match="that run has: only-weights"):
        service.create_sampling_client(model_path=f"tinker://{trainer.model_id}/sampler_weights/nope").result()
    with pytest.raises(LocalNotFoundError, match="no such run"):
        service.create_training_client_from_state("tinker://no-such-run/weights/x").result()
    with pytest.raises(LocalBadRequestError, match="no optimizer state"):
        service.create_training_client_from_state_with_optimizer(sampler_path).result()
    with pytest.raises(LocalBadRequestError, match="Not a tinker path"):
        trainer.create_sampling_client("/tmp/weights").result()
    with pytest.raises(LocalBadRequestError, match="Invalid run id"):
        service.create_sampling_client(model_path="tinker://../weights/x").result()
    assert service.create_sampling_client(model_path=sampler_path).result().get_base_model() == TINY_MODEL


def test_names_conflict_unless_overwritten(trainer: TrainingClient, sft_datum) -> None:
    first = trainer.save_state("ckpt").result().path
    with pytest.raises(LocalConflictError, match="overwrite=True"):
        trainer.save_state("ckpt").result()
    train(trainer, [sft_datum("Hello, world!")], 1)
    assert trainer.save_state("ckpt", overwrite=True).result().path == first
    trainer.save_weights_for_sampler("latest").result()
    assert trainer.save_weights_for_sampler("latest").result().path.endswith("/sampler_weights/latest")
    with pytest.raises(LocalBadRequestError, match="Invalid checkpoint name"):
        trainer.save_state("a/b").result()


def test_a_failed_save_leaves_no_checkpoint(
    service: ServiceClient, trainer: TrainingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_save = checkpoints.save_file

    def crash_on_optimizer(tensors: dict, filename: Path) -> None:
        if Path(filename).name == "optimizer.safetensors":
            raise OSError("disk full")
        real_save(tensors, filename)

    monkeypatch.setattr(checkpoints, "save_file", crash_on_optimizer)
    with pytest.raises(OSError, match="disk full"):
        trainer.save_state("broken").result()
    weights = service.checkpoint_root / trainer.model_id / "weights"
    assert list(weights.iterdir()) == []
    with pytest.raises(LocalNotFoundError):
        service.create_training_client_from_state(f"tinker://{trainer.model_id}/weights/broken").result()
    monkeypatch.undo()
    assert trainer.save_state("broken").result().path.endswith("/weights/broken")


def test_a_failed_metadata_write_keeps_the_old_record_and_leaves_no_staging_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = checkpoints.CheckpointStore(tmp_path)
    store.save_run_metadata("run-1", {"note": "old"})

    def disk_full(source: object, target: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(checkpoints.os, "replace", disk_full)
    with pytest.raises(OSError, match="disk full"):
        store.save_run_metadata("run-1", {"note": "new"})
    assert store.run_metadata("run-1") == {"note": "old"}
    assert sorted(p.name for p in (tmp_path / "run-1").iterdir()) == ["run.json"]
