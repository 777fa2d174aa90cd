"""Ctrl-C and SIGTERM on a real `minds run` process: the step in flight ends, a checkpoint is saved, resume continues.

Even with ``save_every = 0`` (no periodic saves) the run resumes right after the
step it stopped at; a second signal exits at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TINY = ["--set", "trainer.group_size=2", "--set", "trainer.groups_per_batch=1", "--set", "sampling.max_tokens=4",
        "--set", "metrics.sinks=[]"]
READY = "now stops the run after the step in flight"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _start(installed_plugin, tmp_path: Path, args: list[str]) -> tuple[subprocess.Popen, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    env["PYTHONPATH"] = str(installed_plugin("toy_plugin"))
    log = tmp_path / "stderr.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json", "--log-level", "debug", "run", *args],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"),
    )
    return proc, log


def _wait_for(condition, proc: subprocess.Popen, what: str, seconds: float = 180) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_a_checkpoint_after_the_step_in_flight(installed_plugin, run_minds, tmp_path, signum):
    steps = 30
    proc, log = _start(installed_plugin, tmp_path, ["--env", "toy_char_share", "--steps", str(steps), "--name", "stopped",
                                                    "--set", "trainer.save_every=0", *TINY])
    run = tmp_path / "runs" / "stopped"
    _wait_for(lambda: READY in log.read_text() and len(_rows(run / "metrics.jsonl")) >= 3, proc, "three steps")
    proc.send_signal(signum)
    proc.wait(timeout=300)  # a hang guard
    err = log.read_text()
    assert proc.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err
    last = _rows(run / "metrics.jsonl")[-1]["step"]
    assert last < steps - 1, "the signal must arrive part-way"
    assert f"stopped by {signal.Signals(signum).name} after step {last}" in err
    assert f"minds run --resume {Path('runs') / 'stopped'}" in err
    checkpoint = _rows(run / "checkpoints.jsonl")[-1]
    assert checkpoint["step"] == last and checkpoint["sampler_path"]

    if signum == signal.SIGINT:  # the README's resume command continues right after the stopped step
        resumed = run_minds(["--log-format", "json", "run", "--resume", "runs/stopped"], plugins=["toy_plugin"])
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        events = [json.loads(line) for line in resumed.stderr.splitlines() if line.startswith("{")]
        assert any(e["event"] == "resuming" and e["step"] == last + 1 for e in events)
        assert [row["step"] for row in _rows(run / "metrics.jsonl")] == list(range(steps))


@pytest.mark.slow
def test_a_second_ctrl_c_exits_at_once_even_when_the_step_hangs(installed_plugin, tmp_path):
    proc, log = _start(installed_plugin, tmp_path, ["--env", "toy_flaky", "--set", "env.args.modes=[hang]",
                                                    "--set", "rollout.timeout=0", "--name", "hung", *TINY])
    _wait_for(lambda: READY in log.read_text(), proc, "the training loop")
    proc.send_signal(signal.SIGINT)
    _wait_for(lambda: '"stopping: the step in flight finishes' in log.read_text(), proc, "the stop announcement")
    time.sleep(0.5)
    assert proc.poll() is None, "the first Ctrl-C waits for the step in flight"
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=300)  # a hang guard
    assert time.monotonic() - began < 5
    assert proc.returncode == 130
    said = log.read_text()  # stopped in step 0: no checkpoint yet, and the hint does not claim one
    assert "SIGINT again: exiting now; continue with: minds run --resume runs/hung (from its last checkpoint; from step 0 if none was saved)" in said
