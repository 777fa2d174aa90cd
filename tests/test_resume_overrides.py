"""--resume may change how a run proceeds (recorded), never what it trains (exit 2 naming the key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minds_core.cli.command import main
from minds_core.config import load_config
from minds_core.train import train
from minds_core.training.run_directory import RESUMES_FILE, read_jsonl


@pytest.fixture(scope="module")
def finished_run(plugins, tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    config = load_config(None, ["env.id=toy_char_share", "env.args.num_tasks=3", "trainer.steps=2",
                                "trainer.group_size=2", "trainer.groups_per_batch=1", "sampling.max_tokens=4",
                                "metrics.sinks=[]", f"runs_dir={runs}", "name=r", "backend=local"])
    train(config, plugins=plugins)
    return runs / "r"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        (["--env", "toy_flaky"], "env.id: 'toy_char_share' -> 'toy_flaky'"),
        (["--set", "env.args.num_tasks=4"], "env.args.num_tasks: 3 -> 4"),
        (["--model", "Qwen/Qwen3-8B"], "model.base_model: 'minds-small' -> 'Qwen/Qwen3-8B'"),
        (["--set", "model.lora_rank=4"], "model.lora_rank: 8 -> 4"),
        (["--backend", "tinker"], "backend: 'local' -> 'tinker'"),
        (["--set", "tinker.base_url=http://127.0.0.1:9"], "tinker.base_url: '' -> 'http://127.0.0.1:9'"),
        (["--set", "seed=3"], "seed: 0 -> 3"),
    ],
)
def test_changing_what_the_run_is_is_refused_with_exit_2(finished_run, override, key, capsys):
    before = {p.name: p.read_bytes() for p in finished_run.iterdir()}
    code = main(["run", "--resume", str(finished_run), *override, "--set", "trainer.steps=3"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert key in err and "Traceback" not in err
    assert "start a new run" in err
    assert {p.name: p.read_bytes() for p in finished_run.iterdir()} == before


def _error(err: str) -> str:
    """The error a command ended with (log lines before it left out)."""
    return err[err.index("minds: error:") :]


@pytest.mark.parametrize(
    ("override", "says"),
    [("model.lora_rank=2", "model.lora_rank: 8 -> 2"), ("rollout.concurrency=2", "unknown environment 'toy_char_share'")],
)
def test_dry_run_of_a_resume_says_what_the_resume_says_with_its_plugin_missing(finished_run, override, says, monkeypatch, capsys):
    monkeypatch.setenv("MINDS_DISABLE_PLUGINS", "toy")  # the run's plugin is missing, whatever else is installed
    before = {p.name: p.read_bytes() for p in finished_run.iterdir()}
    command = ["run", "--resume", str(finished_run), "--set", override, "--set", "trainer.steps=3"]
    assert main(command) == 2
    resume = _error(capsys.readouterr().err)
    assert main([*command, "--dry-run"]) == 2
    assert _error(capsys.readouterr().err) == resume
    assert says in resume
    assert {p.name: p.read_bytes() for p in finished_run.iterdir()} == before


def test_dry_run_of_a_harmless_resume_passes_with_its_plugin_there(finished_run, minds_plugin, monkeypatch, capsys):
    import minds_toy_plugin

    monkeypatch.delenv("MINDS_DISABLE_PLUGINS", raising=False)
    minds_plugin(minds_toy_plugin, name="toy")
    assert main(["run", "--resume", str(finished_run), "--set", "rollout.concurrency=2", "--steps", "3", "--dry-run"]) == 0
    assert "concurrency: 2" in capsys.readouterr().out


@pytest.mark.parametrize("steps", [[], ["--steps", "2"], ["--steps", "1"], ["--dry-run"]])
def test_a_resume_with_no_step_left_to_train_exits_2_and_changes_nothing(finished_run, steps, minds_plugin, monkeypatch, capsys):
    import minds_toy_plugin

    monkeypatch.delenv("MINDS_DISABLE_PLUGINS", raising=False)
    minds_plugin(minds_toy_plugin, name="toy")  # the run could resume: only its steps are done
    before = {p.name: p.read_bytes() for p in finished_run.iterdir()}
    assert main(["run", "--resume", str(finished_run), *steps]) == 2  # it trained steps 0 and 1 of its 2
    err = capsys.readouterr().err
    assert f"run {finished_run} has trained steps 0 to 1 (its last checkpoint is of step 1)" in err, err
    assert "nothing left to train: pass --steps N with N > 2 to train on" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in finished_run.iterdir()} == before  # no "steps: -1" summary, no config change


@pytest.mark.slow
def test_harmless_changes_are_allowed_and_recorded(plugins, finished_run):
    config = load_config(finished_run / "config.yaml", ["trainer.steps=3", "rollout.concurrency=2",
                                                        "metrics.rollouts_per_step=1", "tinker.api_key=tml-again"],
                         drop_redacted=True)
    train(config, resume_dir=finished_run, plugins=plugins)
    assert [row["step"] for row in read_jsonl(finished_run / "metrics.jsonl")] == [0, 1, 2]
    (resume,) = read_jsonl(finished_run / RESUMES_FILE)
    assert resume["step"] == 2
    assert resume["changed"] == {"trainer.steps": [2, 3], "rollout.concurrency": [64, 2], "metrics.rollouts_per_step": [2, 1]}
    saved = (finished_run / "config.yaml").read_text()
    assert "concurrency: 2" in saved and "steps: 3" in saved
    assert "tml-again" not in json.dumps(resume) and "tml-again" not in saved
