"""Resume after a real `kill -9` of a running `minds run`: same data order, no duplicated or missing steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ARGS = [
    "--env", "toy_char_share", "--steps", "8",
    "--set", "trainer.save_every=2", "--set", "trainer.group_size=4", "--set", "trainer.groups_per_batch=3",
    "--set", "sampling.max_tokens=8", "--set", "metrics.sinks=[]", "--set", "metrics.rollouts_per_step=3",
    "--set", "seed=11",
]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _tasks_by_step(run: Path) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for row in _rows(run / "rollouts.jsonl"):
        out.setdefault(row["step"], []).append(row["task"])
    return out


@pytest.mark.slow
def test_kill_9_mid_run_then_resume(run_minds, installed_plugin, tmp_path):
    site = installed_plugin("toy_plugin")
    env = {**os.environ, "PYTHONPATH": str(site)}
    env = {k: v for k, v in env.items() if not k.startswith("MINDS_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json", "run", *ARGS, "--name", "killed"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    run = tmp_path / "runs" / "killed"
    deadline = time.time() + 120
    while time.time() < deadline:
        checkpoints = run / "checkpoints.jsonl"
        if checkpoints.exists() and len(_rows(checkpoints)) >= 1 and len(_rows(run / "metrics.jsonl")) >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written_before = len(_rows(run / "metrics.jsonl"))
    assert 3 <= written_before < 8, "the run must be killed part-way"

    resumed = run_minds(["--log-format", "json", "run", "--resume", str(run)], plugins=["toy_plugin"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert '"event": "resuming"' in resumed.stderr
    steps = [row["step"] for row in _rows(run / "metrics.jsonl")]
    assert steps == list(range(8)), steps

    fresh = run_minds(["run", *ARGS, "--name", "fresh"], plugins=["toy_plugin"])
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert _tasks_by_step(run) == _tasks_by_step(tmp_path / "runs" / "fresh")
    checkpoint_steps = [row["step"] for row in _rows(run / "checkpoints.jsonl")]
    assert checkpoint_steps == sorted(checkpoint_steps) and checkpoint_steps[-1] == 7


@pytest.mark.slow
def test_resume_of_a_missing_directory_is_a_usage_error(run_minds, tmp_path):
    result = run_minds(["run", "--resume", str(tmp_path / "nope")])
    assert result.returncode == 2 and "is not a minds run folder" in result.stderr
