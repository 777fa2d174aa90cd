"""Training health on the console: JSON progress events through a pipe, tables of samples, train.log, health metrics."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pytest

from minds_core.base import logs
from minds_core.config import load_config
from minds_core.sinks.console import FIGURES, sample_rows
from minds_core.train import train

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

STEPS = 3


@pytest.fixture(scope="module")
def piped(installed_plugin, tmp_path_factory: pytest.TempPathFactory):
    """A real `minds run` subprocess whose stderr is a pipe; returns (stderr lines, run folder)."""
    import subprocess

    root = tmp_path_factory.mktemp("piped")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ["PYTHONPATH"] = str(installed_plugin("toy_plugin"))
    sets = [
        f"runs_dir={root}", "sampling.max_tokens=8", "trainer.group_size=4", "trainer.groups_per_batch=3",
        "trainer.learning_rate=1e-2", "metrics.rollouts_per_step=3", "metrics.sample_table_every=2",
    ]  # fmt: skip
    argv = [sys.executable, "-m", "minds_core.cli.command", "run", "--env", "toy_char_share", "--steps", str(STEPS), "--name", "p"]
    for assignment in sets:
        argv += ["--set", assignment]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=root, env=environ, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines(), root / "p"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_off_a_terminal_each_step_is_one_json_event(piped) -> None:
    lines, run = piped
    events = [json.loads(line) for line in lines]  # every stderr line is JSON: no bar, no table art
    progress = [e for e in events if e.get("event") == "progress"]
    rows = _jsonl(run / "metrics.jsonl")
    assert [e["step"] for e in progress] == list(range(STEPS)) and all(e["steps"] == STEPS for e in progress)
    for event, row in zip(progress, rows):
        for field, (key, _, _) in FIGURES.items():
            assert event.get(field) == row.get(key), field
        assert event["eta_s"] >= 0 and event["elapsed_s"] > 0
    assert progress[-1]["eta_s"] == 0
    (samples,) = [e for e in events if e.get("event") == "samples"]
    assert samples["step"] == 1
    step_groups = [g for g in _jsonl(run / "rollouts.jsonl") if g["step"] == 1]
    assert samples["samples"] == sample_rows(step_groups)
    assert {s["task"] for s in samples["samples"]} == {g["task"] for g in step_groups}  # replies from every group
    assert [e["event"] for e in events if "run_dir" in e] == ["summary"]
    assert (run / "report.html").is_file()


@pytest.mark.slow
def test_the_run_folder_gets_a_plain_text_log(piped) -> None:
    _, run = piped
    text = (run / "train.log").read_text()
    assert "\x1b" not in text
    assert "training" in text and "checkpoint saved" in text  # the log lines
    for step in range(STEPS):
        assert f"step {step} ({step + 1}/{STEPS}) reward " in text
    assert "sampled replies, step 1" in text and "run summary" in text
    assert "zero-var" in text and "eta 0:00:00" in text


@pytest.mark.slow
def test_health_metrics_agree_with_the_recorded_rollouts(piped) -> None:
    _, run = piped
    rows = _jsonl(run / "metrics.jsonl")
    groups = _jsonl(run / "rollouts.jsonl")
    for row in rows:
        mine = [g for g in groups if g["step"] == row["step"]]
        assert len(mine) == row["groups/total"]  # every group recorded: the metrics can be recomputed
        rollouts = [r for g in mine for r in g["rollouts"] if r["error"] is None]
        turns = [m for r in rollouts for m in r["messages"] if m["role"] == "assistant"]
        tokens = [sum(m["tokens"] for m in r["messages"] if m["role"] == "assistant") for r in rollouts]
        assert row["tokens/completion/mean"] == pytest.approx(statistics.fmean(tokens))
        assert row["tokens/completion/max"] == max(tokens) <= 8
        assert row["stop/stop"] + row["stop/length"] == len(turns)
        assert row["stop/length_frac"] == pytest.approx(sum(m["stop_reason"] == "length" for m in turns) / len(turns))
        constant = [max(rs) - min(rs) < 1e-8 for rs in ([r["reward"] for r in g["rollouts"]] for g in mine)]
        assert row["groups/zero_variance_frac"] == pytest.approx(sum(constant) / len(constant))
        assert row["sampler/neg_logprob"] > 0
        if row["train/datums"]:
            assert 0 <= row["kl/sampler_train"] < 1e-4  # on-policy: sampler and trainer hold the same weights


@pytest.mark.slow
def test_kl_to_the_sampler_grows_off_policy(plugins, tmp_path: Path) -> None:
    logs.configure("json", "warning")
    overrides = [f"runs_dir={tmp_path}", "name=off", "env.id=toy_char_share", "trainer.steps=3", "trainer.learning_rate=0.05", "model.base_model=minds-tiny",
                 "trainer.max_steps_off_policy=1", "sampling.max_tokens=8", "metrics.sinks=[]"]  # fmt: skip
    summary = train(load_config(None, overrides), plugins=plugins)
    rows = _jsonl(Path(summary["run_dir"]) / "metrics.jsonl")
    stale = [r for r in rows if r["sampler/staleness"] == 1 and "kl/sampler_train" in r]
    assert stale, rows
    assert all(r["kl/sampler_train"] > 1e-4 for r in stale), [r["kl/sampler_train"] for r in stale]


def test_sample_rows_take_from_each_group_in_turn() -> None:
    groups = [
        {"env": "e", "task": t, "rollouts": [{"completion": ["a\nb", "x" * 300], "reward": 1.0, "advantage": 0.0, "error": None}] * 5}
        for t in ("t1", "t2", "t3")
    ]
    rows = sample_rows(groups, limit=7)
    assert [r["task"] for r in rows] == ["t1", "t2", "t3"] * 2 + ["t1"]
    assert rows[0]["turns"] == 2 and len(rows[0]["reply"]) == 100 and rows[0]["reply"].endswith("…")


def _on_a_terminal(installed_plugin, tmp_path: Path, columns: int) -> str:
    """What a two-step `minds run` draws on a pseudo-terminal ``columns`` wide, escape codes taken out."""
    import pty
    import re
    import subprocess

    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ.update(PYTHONPATH=str(installed_plugin("toy_plugin")), COLUMNS=str(columns), TERM="xterm")
    argv = [sys.executable, "-m", "minds_core.cli.command", "run", "--env", "toy_char_share", "--steps", "2", "--name", "t",
            "--set", f"runs_dir={tmp_path}", "--set", "sampling.max_tokens=8", "--set", "metrics.sample_table_every=1"]  # fmt: skip
    leader, follower = pty.openpty()
    process = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=environ, cwd=tmp_path)
    os.close(follower)
    output = b""
    while chunk := _read(leader):
        output += chunk
    assert process.wait(timeout=300) == 0, output.decode("utf-8", "replace")[-3000:]  # a hang guard
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode("utf-8", "replace"))


@pytest.mark.slow
def test_on_a_terminal_a_bar_with_the_health_figures_and_a_table(installed_plugin, tmp_path: Path) -> None:
    import re

    text = _on_a_terminal(installed_plugin, tmp_path, 220)
    assert '"event"' not in text  # a bar, not JSON events
    bar = r"step 2/2 ━+ eta 0:00:00 \d:\d\d:\d\d "
    assert re.search(bar + r"reward -?\d\.\d{3} \| zero-var \d+% \| tokens [\d.]+ \| trunc \d+% \| -logp [\d.]+", text)
    assert "sampled replies, step 1" in text and "run summary" in text


@pytest.mark.slow
def test_on_an_80_column_terminal_the_line_keeps_step_bar_and_eta(installed_plugin, tmp_path: Path) -> None:
    import re

    lines = re.split(r"[\r\n]+", _on_a_terminal(installed_plugin, tmp_path, 80))
    last = [line for line in lines if line.startswith("step 2/2")]
    assert last, lines[-20:]
    assert re.match(r"step 2/2 ━+ eta 0:00:00 \d:\d\d:\d\d reward -?\d", last[-1]) and len(last[-1]) <= 80, last[-1]
    assert last[-1].endswith("…")  # the figures that do not fit are cut, on one line


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the child closed the terminal
        return b""
