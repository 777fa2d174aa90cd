"""The run directory's files survive torn writes; resume cuts later steps and keeps the new config."""

from __future__ import annotations

from minds_core.config import load_config
from minds_core.training.run_directory import CheckpointRecord, RunDirectory, append_line, read_jsonl


def test_a_torn_last_line_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / "checkpoints.jsonl"
    append_line(path, {"step": 1, "state_path": "tinker://r/weights/a"})
    with path.open("a") as fh:
        fh.write('{"step": 2, "state_pa')  # killed mid-write
    run = RunDirectory(tmp_path)
    run.record_checkpoint(CheckpointRecord(step=3, state_path="tinker://r/weights/c"))
    assert [row["step"] for row in read_jsonl(path)] == [1, 3]


def test_resume_cuts_later_steps_and_rewrites_the_config(tmp_path):
    config = load_config(None, ["env.id=x", f"runs_dir={tmp_path}", "name=r", "trainer.steps=5"])
    run = RunDirectory.create(config)
    for step in range(4):
        append_line(run.path / "metrics.jsonl", {"step": step})
        append_line(run.path / "rollouts.jsonl", {"step": step})
    longer = load_config(None, ["env.id=x", f"runs_dir={tmp_path}", "name=r", "trainer.steps=9"])
    RunDirectory.resume(run.path, longer, next_step=2)
    assert [r["step"] for r in read_jsonl(run.path / "metrics.jsonl")] == [0, 1]
    assert [r["step"] for r in read_jsonl(run.path / "rollouts.jsonl")] == [0, 1]
    assert load_config(run.path / "config.yaml").trainer.steps == 9
