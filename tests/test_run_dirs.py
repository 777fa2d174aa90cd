"""Two runs never share a folder: an existing folder is exit 2, default names differ, racing runs: one wins."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minds_core.base.errors import UsageError
from minds_core.cli.command import main
from minds_core.config import load_config
from minds_core.train import train
from minds_core.training.run_directory import RunDirectory, default_run_name

# big enough that rewards differ within a group and steps train (a run that trains nothing exits 1)
TINY = ["--set", "trainer.group_size=8", "--set", "trainer.groups_per_batch=4", "--set", "sampling.max_tokens=32",
        "--set", "metrics.sinks=[]"]



def _config(tmp_path: Path, *overrides: str):
    return load_config(None, ["env.id=toy_char_share", "trainer.steps=1", "trainer.group_size=2",
                              "trainer.groups_per_batch=1", "sampling.max_tokens=4", "metrics.sinks=[]",
                              f"runs_dir={tmp_path}", *overrides])


@pytest.mark.slow
def test_a_second_run_with_the_same_name_is_refused_and_changes_nothing(plugins, tmp_path):
    train(_config(tmp_path, "name=same", "trainer.learning_rate=1e-3"), plugins=plugins)
    run = tmp_path / "same"
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    with pytest.raises(UsageError) as refused:
        train(_config(tmp_path, "name=same", "trainer.learning_rate=5e-2"), plugins=plugins)
    assert f"run directory {run} already exists" in str(refused.value)
    assert f"--resume {run}" in str(refused.value)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_an_existing_folder_is_exit_2_from_the_command_line(tmp_path, capsys):
    (tmp_path / "runs" / "taken").mkdir(parents=True)
    code = main(["run", "--env", "ghost_trace", "--name", "taken", "--set", f"runs_dir={tmp_path / 'runs'}"])
    assert code == 2
    assert "already exists: pick another --name, or continue that run with --resume" in capsys.readouterr().err


@pytest.mark.parametrize("store_exists", [False, True])
@pytest.mark.parametrize("given", ["--name", "config file"])
def test_a_run_named_after_the_local_checkpoint_store_is_refused_naming_why(tmp_path, capsys, given, store_exists):
    runs = tmp_path / "runs"
    if store_exists:  # an earlier local run made it
        (runs / "_checkpoints").mkdir(parents=True)
    (tmp_path / "run.toml").write_text(f'name = "_checkpoints"\nruns_dir = "{runs}"\n[env]\nid = "ghost_trace"\n')
    args = ["run", str(tmp_path / "run.toml")] if given == "config file" else ["run", "--env", "ghost_trace", "--name", "_checkpoints",
                                                                                "--set", f"runs_dir={runs}"]
    assert main([*args, "--backend", "local", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "name = '_checkpoints': must be one folder name" in err
    assert "'_checkpoints' is reserved: that folder is the local backend's checkpoint store" in err and "--resume" not in err
    assert "Traceback" not in err
    assert [p.name for p in runs.glob("*")] == (["_checkpoints"] if store_exists else [])  # nothing made, the store untouched
    assert not any(runs.glob("_checkpoints/*"))


def test_default_names_made_in_the_same_second_differ():
    config = _config(Path("runs"))
    names = [default_run_name(config) for _ in range(20)]
    assert len(set(names)) == 20
    assert all(name.startswith("toy_char_share-") for name in names)


def _claim(runs_dir: str, start: float, results) -> None:
    config = load_config(None, ["env.id=x", "name=contested", f"runs_dir={runs_dir}", f"seed={os.getpid()}"])
    while time.time() < start:
        pass
    try:
        RunDirectory.create(config)
        results.put(("won", os.getpid()))
    except UsageError:
        results.put(("lost", os.getpid()))


@pytest.mark.slow
def test_racing_claims_of_one_folder_have_exactly_one_winner(tmp_path):
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    start = time.time() + 1.0
    workers = [context.Process(target=_claim, args=(str(tmp_path), start, results)) for _ in range(8)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    winners = [pid for outcome, pid in outcomes if outcome == "won"]
    assert len(winners) == 1 and len(outcomes) == 8
    assert f"seed: {winners[0]}" in (tmp_path / "contested" / "config.yaml").read_text()


@pytest.mark.slow
def test_racing_runs_and_a_default_named_sweep_never_share_a_folder(installed_plugin, tmp_path):
    """Two `minds run --name same` at once: one exits 0, one exits 2; two default-named runs at once: two folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    env["PYTHONPATH"] = str(installed_plugin("toy_plugin"))
    base = [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json", "run", "--env", "toy_char_share",
            "--steps", "2", *TINY]
    commands = [
        [*base, "--name", "same", "--set", "trainer.learning_rate=0.001"],
        [*base, "--name", "same", "--set", "trainer.learning_rate=0.002"],
        [*base, "--set", "trainer.learning_rate=0.003"],
        [*base, "--set", "trainer.learning_rate=0.004"],
    ]
    procs = [subprocess.Popen(c, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in commands]
    outputs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes[:2]) == [0, 2], outputs[:2]
    loser = outputs[codes.index(2)][1]
    assert "already exists" in loser and "Traceback" not in loser
    same = tmp_path / "runs" / "same"
    rates = [f"learning_rate: {r}" in (same / "config.yaml").read_text() for r in ("0.001", "0.002")]
    assert rates.count(True) == 1 and rates[codes.index(0)]
    assert [json.loads(line)["step"] for line in (same / "metrics.jsonl").read_text().splitlines()] == [0, 1]

    assert codes[2:] == [0, 0], outputs[2:]
    sweep = sorted(p for p in (tmp_path / "runs").iterdir() if p.name.startswith("toy_char_share-"))
    assert len(sweep) == 2
    assert {("0.003" in (p / "config.yaml").read_text()) for p in sweep} == {True, False}
    for folder in sweep:
        assert [json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()] == [0, 1]
