"""Checkpoints by default: rolling state-only saves every save_every steps in two slots, the last step in full."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from minds_core.base import logs
from minds_core.config import RunConfig, load_config
from minds_core.train import train
from minds_core.training.run_directory import CheckpointRecord, RunDirectory


def test_runs_save_periodically_by_default():
    assert RunConfig().trainer.save_every == 5


@pytest.mark.slow
def test_rolling_saves_keep_the_last_two_states_and_the_final_checkpoint(plugins, tmp_path):
    logs.configure("json", "warning")
    config = load_config(None, ["env.id=toy_char_share", "trainer.steps=7", "trainer.save_every=2",
                                "trainer.group_size=2", "trainer.groups_per_batch=1", "sampling.max_tokens=4",
                                "metrics.sinks=[]", f"runs_dir={tmp_path}", "name=r"])
    train(config, plugins=plugins)
    saved = RunDirectory(tmp_path / "r").checkpoints()
    # rolling saves after steps 1, 3, 5: the one of step 1 was overwritten by step 5 and its line dropped
    assert [c.step for c in saved] == [3, 5, 6]
    assert [c.sampler_path is None for c in saved] == [True, True, False]
    assert saved[0].state_path != saved[1].state_path
    (model_dir,) = [p for p in (tmp_path / "_checkpoints").iterdir() if not p.name.startswith(".")]
    weights = sorted(p.name for p in (model_dir / "weights").iterdir() if not p.name.startswith("."))
    assert weights == ["rolling-0", "rolling-1", "step-000006"]
    assert sorted(p.name for p in (model_dir / "sampler_weights").iterdir()) == ["step-000006"]


def _saving_every_step(plugins, tmp_path: Path, steps: int) -> Path:
    """Train the toy task to ``steps`` steps, saving every step: a new run ``r``, or ``r`` resumed; its folder."""
    run_dir = tmp_path / "r"
    if run_dir.exists():
        config = load_config(run_dir / "config.yaml", [f"trainer.steps={steps}"], drop_redacted=True)
        train(config, resume_dir=run_dir, plugins=plugins)
        return run_dir
    logs.configure("json", "warning")  # a new run only: capture_logs around a resume keeps its own processors
    args = ["env.id=toy_char_share", "trainer.save_every=1", "trainer.group_size=2", "trainer.groups_per_batch=1",
            "sampling.max_tokens=4", "metrics.sinks=[]", f"runs_dir={tmp_path}", "name=r", f"trainer.steps={steps}"]  # fmt: skip
    train(load_config(None, args), plugins=plugins)
    return run_dir


@pytest.mark.slow
def test_a_resumed_run_keeps_only_the_last_two_periodic_saves_of_both_runs(plugins, tmp_path):
    run_dir = _saving_every_step(plugins, tmp_path, 3)
    first = {c.step: c.state_path for c in RunDirectory(run_dir).checkpoints()}
    assert sorted(first) == [0, 1, 2]
    _saving_every_step(plugins, tmp_path, 8)
    saved = RunDirectory(run_dir).checkpoints()
    # periodic saves after steps 0, 1 (first run) and 3 .. 6 (resumed, under another training run); full: 2 and 7
    assert [c.step for c in saved] == [2, 5, 6, 7]
    assert [c.sampler_path is None for c in saved] == [False, True, True, False]
    assert saved[0].state_path == first[2]
    on_disk = sorted(
        f"{model.name}/{state.name}"
        for model in (tmp_path / "_checkpoints").iterdir()
        if not model.name.startswith(".")
        for state in (model / "weights").iterdir()
        if not state.name.startswith(".")
    )
    first_model, resumed_model = first[2].split("/")[2], saved[-1].state_path.split("/")[2]
    assert first_model != resumed_model
    assert on_disk == sorted([f"{first_model}/step-000002", f"{resumed_model}/rolling-0", f"{resumed_model}/rolling-1",
                              f"{resumed_model}/step-000007"])  # fmt: skip


def test_recording_a_periodic_save_drops_and_returns_those_past_the_newest_two(tmp_path):
    run = RunDirectory(tmp_path)
    before = "tinker://run-a/weights"  # the training run before a resume
    after = "tinker://run-b/weights"
    assert run.record_checkpoint(CheckpointRecord(0, f"{before}/rolling-1")) == []
    assert run.record_checkpoint(CheckpointRecord(1, f"{before}/rolling-0")) == []
    assert run.record_checkpoint(CheckpointRecord(2, f"{before}/step-000002", "tinker://run-a/sampler_weights/x")) == []
    assert run.record_checkpoint(CheckpointRecord(3, f"{after}/rolling-1")) == [CheckpointRecord(0, f"{before}/rolling-1")]
    assert run.record_checkpoint(CheckpointRecord(4, f"{after}/rolling-0")) == [CheckpointRecord(1, f"{before}/rolling-0")]
    assert run.record_checkpoint(CheckpointRecord(5, f"{after}/rolling-1")) == []  # its slot: the line of step 3 goes
    assert [(c.step, c.rolling) for c in run.checkpoints()] == [(2, False), (4, True), (5, True)]


@pytest.mark.slow
def test_an_outdated_save_that_cannot_be_deleted_is_reported_and_training_goes_on(plugins, tmp_path):
    run_dir = _saving_every_step(plugins, tmp_path, 2)
    (outdated, _) = RunDirectory(run_dir).checkpoints()
    model, _, name = outdated.state_path.removeprefix("tinker://").split("/")
    shutil.rmtree(tmp_path / "_checkpoints" / model / "weights" / name)  # gone before the run could delete it
    with capture_logs() as logged:
        _saving_every_step(plugins, tmp_path, 5)
    assert [c.step for c in RunDirectory(run_dir).checkpoints()] == [1, 2, 3, 4]
    (warning,) = [entry for entry in logged if entry["event"].startswith("could not delete")]
    assert warning["paths"] == [outdated.state_path] and "No checkpoint at" in warning["error"]
