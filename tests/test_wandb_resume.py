"""--resume with the wandb sink logs to the same W&B run (same id), its steps continuing (wandb in offline mode)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from minds_core.base import logs
from minds_core.config import load_config
from minds_core.contract.plugins import load_plugins
from minds_core.train import train

wandb = pytest.importorskip("wandb", reason="the wandb sink's test needs wandb (the dev extra installs it)")

import minds_toy_plugin  # noqa: E402 - after the importorskip

BLOCK = 32768  # the .wandb file is a LevelDB-style log of protobuf records, after a 7-byte W&B header


def _records(path: Path):
    from wandb.proto import wandb_internal_pb2

    data, pos, parts = path.read_bytes(), 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        parts += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def _offline_run(path: Path) -> tuple[str | None, list[int], bool]:
    """(run id, logged steps, whether the session's exit record is written) of one offline W&B session."""
    run_id, steps, ended = None, [], False
    for record in _records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_id = record.run.run_id
        elif kind == "history":
            steps.append(record.history.step.num)
        elif kind == "exit":
            ended = True
    return run_id, steps, ended


def _offline_runs(wandb_dir: Path, wait: float = 60.0) -> list[tuple[str | None, list[int]]]:
    """(run id, logged steps) of each offline W&B session, oldest first.

    W&B's service process writes a session's file on its own time, after ``finish()`` has returned (under load a
    file read at once held only its header), so this waits up to ``wait`` seconds for every session's exit record.
    """
    deadline = time.monotonic() + wait
    while True:
        runs = [_offline_run(path) for path in sorted((wandb_dir / "wandb").glob("offline-run-*/run-*.wandb"))]
        if all(ended for *_, ended in runs) or time.monotonic() > deadline:
            return [(run_id, steps) for run_id, steps, _ in runs]
        time.sleep(0.2)


@pytest.mark.slow
def test_resume_continues_the_same_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    logs.configure("json", "warning")
    plugins = load_plugins(extra=[("toy", minds_toy_plugin)])
    common = ["env.id=toy_char_share", "trainer.group_size=2", "trainer.groups_per_batch=1", "sampling.max_tokens=4",
              "metrics.sinks=[wandb]", "metrics.wandb_project=minds-test", f"runs_dir={tmp_path / 'runs'}", "name=r"]
    train(load_config(None, [*common, "trainer.steps=3"]), plugins=plugins)
    run = tmp_path / "runs" / "r"
    resumed = load_config(run / "config.yaml", ["trainer.steps=5"], drop_redacted=True)
    train(resumed, resume_dir=run, plugins=plugins)

    (first_id, first_steps), (second_id, second_steps) = _offline_runs(tmp_path)
    assert first_id == second_id
    assert (first_steps, second_steps) == ([0, 1, 2], [3, 4])
    assert first_id in (run / "wandb.json").read_text()


@pytest.mark.slow
def test_the_wandb_sink_without_a_key_is_a_usage_error_not_a_traceback(run_minds, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    env = {"WANDB_MODE": "online", "NETRC": str(tmp_path / "no-netrc"), "WANDB_CONFIG_DIR": str(tmp_path), "WANDB_DIR": str(tmp_path)}
    done = run_minds(
        ["run", "--env", "toy_char_share", "--backend", "local", "--steps", "1", "--set", "metrics.sinks=[\"console\",\"wandb\"]",
         "--set", "metrics.wandb_project=minds-test"],
        plugins=["toy_plugin"], env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert 'metric sink "wandb" could not start a W&B run' in done.stderr and "WANDB_API_KEY" in done.stderr
    assert "Traceback" not in done.stderr
