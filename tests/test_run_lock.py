"""One writer per run folder: a run or resume holds the folder's lock; a second claimant exits 2 naming the holder's pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minds_core.base.errors import UsageError
from minds_core.cli.command import main
from minds_core.config import load_config
from minds_core.training.run_directory import LOCK_FILE, RunDirectory, RunLock


def _config(tmp_path: Path, *overrides: str):
    return load_config(None, ["env.id=toy_char_share", f"runs_dir={tmp_path}", "name=r", *overrides])


def test_a_created_run_holds_its_folder_until_closed(tmp_path):
    run = RunDirectory.create(_config(tmp_path))
    with pytest.raises(UsageError) as refused:
        RunLock(run.path).acquire()
    assert f"run directory {run.path} is in use by another minds process (pid {os.getpid()})" in str(refused.value)
    assert (run.path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    run.close()
    with RunLock(run.path):  # free again
        pass


def test_a_resume_while_the_run_is_held_exits_2_and_changes_nothing(tmp_path, capsys, minds_plugin):
    import minds_toy_plugin

    minds_plugin(minds_toy_plugin, name="toy")  # its environment names check before the run claims its folder
    with RunDirectory.create(_config(tmp_path, "metrics.sinks=[]")) as run:
        before = {p.name: p.read_bytes() for p in run.path.iterdir()}
        code = main(["run", "--resume", str(run.path), "--set", "trainer.steps=3"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"is in use by another minds process (pid {os.getpid()})" in err and "Traceback" not in err
        assert {p.name: p.read_bytes() for p in run.path.iterdir()} == before


def _hold(folder: Path) -> subprocess.Popen:
    """Another process holding ``folder``'s lock (it says so on stdout)."""
    code = (
        "import sys, time; from pathlib import Path; from minds_core.training.run_directory import RunLock; "
        f"RunLock(Path({str(folder)!r})).acquire(); print('held', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.slow
def test_the_lock_of_a_process_killed_with_sigkill_is_released(tmp_path):
    proc = _hold(tmp_path)
    try:
        with pytest.raises(UsageError, match=rf"in use by another minds process \(pid {proc.pid}\)"):
            RunLock(tmp_path).acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    with RunLock(tmp_path):  # the OS released it with the process
        pass


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_two_concurrent_resumes_one_trains_the_other_exits_2_naming_it(run_minds, installed_plugin, tmp_path):
    # big enough that rewards differ within a group and steps train (a run that trains nothing exits 1)
    args = ["--env", "toy_char_share", "--set", "trainer.group_size=8", "--set", "trainer.groups_per_batch=4",
            "--set", "sampling.max_tokens=32", "--set", "metrics.sinks=[]"]  # fmt: skip
    first = run_minds(["run", *args, "--steps", "1", "--name", "r"], plugins=["toy_plugin"])
    assert first.returncode == 0, first.stderr[-2000:]
    run = tmp_path / "runs" / "r"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ["PYTHONPATH"] = str(installed_plugin("toy_plugin"))
    resume = [sys.executable, "-m", "minds_core.cli.command", "run", "--resume", str(run), "--set", "trainer.steps=2000"]
    procs = [
        subprocess.Popen(resume, cwd=tmp_path, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "neither resume was refused"
            time.sleep(0.05)
        (loser,) = [p for p in procs if p.poll() is not None]
        (winner,) = [p for p in procs if p is not loser]
        err = loser.stderr.read()
        assert loser.returncode == 2, err
        assert f"is in use by another minds process (pid {winner.pid})" in err and "Traceback" not in err
        while len(_rows(run / "metrics.jsonl")) < 4:  # the winner trains on
            assert winner.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # Ctrl-C: it saves its step and stops
                proc.wait(timeout=120)
            proc.stderr.close()
    steps = [row["step"] for row in _rows(run / "metrics.jsonl")]
    assert steps == list(range(len(steps))), steps  # every step once, in order
    assert len(_rows(run / "resumes.jsonl")) == 1  # only the winner resumed


@pytest.mark.slow
def test_an_eval_writing_into_a_run_held_by_another_process_exits_2_naming_it(tmp_path, capsys, minds_plugin):
    import minds_toy_plugin
    from minds_core.train import train

    minds_plugin(minds_toy_plugin, name="toy")
    config = _config(tmp_path, "metrics.sinks=[]", "trainer.steps=1", "trainer.group_size=2", "trainer.groups_per_batch=1",
                     "sampling.max_tokens=4", "backend=local")  # fmt: skip
    train(config)
    run = tmp_path / "r"
    evaluate = ["eval", str(run), "--tasks", "1", "--samples", "1", "--json"]
    with RunLock(run):  # as `minds run --resume` training it holds it (another open of the file: a second claimant)
        before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
        assert main(evaluate) == 2
        err = capsys.readouterr().err
        assert f"is in use by another minds process (pid {os.getpid()})" in err and "--output FILE.jsonl" in err
        assert "Traceback" not in err and not (run / "eval").exists()
        assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
        assert main([*evaluate, "--output", str(run / "eval" / "inside.jsonl")]) == 2  # still the run's folder
        elsewhere = tmp_path / "elsewhere.jsonl"
        assert main([*evaluate, "--output", str(elsewhere)]) == 0  # writes nothing of the run's: no claim needed
        assert elsewhere.exists() and not (run / "eval").exists()
        capsys.readouterr()
    assert main(evaluate) == 0  # the run is free again
    assert json.loads(capsys.readouterr().out)["output"] == str(run / "eval" / "step-000000-train.jsonl")
    with RunLock(run):  # the evaluation released its claim
        pass
