"""Evaluation on the toy environments: eval_every during training, held-out splits, failures counted."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from minds_core import hookimpl
from minds_core.base.errors import ConfigError
from minds_core.config import load_config
from minds_core.evaluation.evaluation import EvalPlan, evaluate
from minds_core.train import train

FAST = ["sampling.max_tokens=6", "trainer.group_size=4", "trainer.groups_per_batch=2", "metrics.sinks=[]"]



def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _samples(groups: list[dict]) -> list[dict]:
    """Every rollout of the group lines of an evaluation, in order."""
    return [rollout for group in groups for rollout in group["rollouts"]]


@pytest.mark.slow
def test_eval_every_logs_eval_metrics_on_the_step_line_and_keeps_every_rollout(plugins, tmp_path):
    config = load_config(None, [*FAST, "env.id=toy_first_char", f"runs_dir={tmp_path}", "name=run", "trainer.steps=4",
                                "trainer.eval_every=2", "trainer.eval_tasks=3", "trainer.eval_samples=4"])  # fmt: skip
    train(config, plugins=plugins)
    run = tmp_path / "run"
    metrics = _rows(run / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [0, 1, 2, 3]
    evaluated = [r for r in metrics if "eval/reward/mean" in r]
    assert [r["step"] for r in evaluated] == [1, 3]
    for row in evaluated:
        groups = _rows(run / "eval" / f"step-{row['step']:06d}.jsonl")  # one line per task, as in rollouts.jsonl
        rollouts = _samples(groups)
        assert len(groups) == 3 and len(rollouts) == 3 * 4 == row["eval/rollouts/total"]
        assert {g["split"] for g in groups} == {"test"}  # the held-out split, never the training one
        assert [g["task"] for g in groups] == ["test0", "test1", "test2"]
        rewards = [r["reward"] for r in rollouts]
        assert row["eval/reward/mean"] == pytest.approx(statistics.fmean(rewards))
        assert row["eval/pass@1"] == pytest.approx(row["eval/reward/mean"])  # binary rewards: pass@1 is the mean
        assert {"eval/pass@2", "eval/pass@4"} <= set(row)
        assert row["eval/component/toy.first"] == pytest.approx(row["eval/reward/mean"])
        assert row["eval/reward/ci95_low"] <= row["eval/reward/mean"] <= row["eval/reward/ci95_high"]
        summary = json.loads((run / "eval" / f"step-{row['step']:06d}.summary.json").read_text())
        assert summary["step"] == row["step"] and summary["splits"] == {"toy_first_char": "test"}


def test_eval_every_without_a_held_out_split_stops_before_the_run_starts(plugins, tmp_path):
    config = load_config(None, [*FAST, "env.id=toy_char_share", f"runs_dir={tmp_path}", "name=run", "trainer.eval_every=1"])
    with pytest.raises(ConfigError, match="needs a held-out split.*toy_char_share.*trainer.eval_split"):
        train(config, plugins=plugins)
    assert not (tmp_path / "run").exists()


def test_an_unknown_eval_split_names_the_key(plugins, tmp_path):
    config = load_config(None, [*FAST, "env.id=toy_first_char", f"runs_dir={tmp_path}", "trainer.eval_split=dev"])
    with pytest.raises(ConfigError, match="no tasks in split 'dev'"):
        evaluate(config, EvalPlan.from_config(config.trainer), plugins=plugins)


def test_failed_rollouts_are_counted_and_kept_out_of_the_mean(plugins, tmp_path):
    config = load_config(None, [*FAST, "env.id=toy_flaky", "env.args.modes=[raise, ok, ok]", f"runs_dir={tmp_path}",
                                "rollout.retries=0"])  # fmt: skip
    evaluation = evaluate(config, EvalPlan(tasks=3, samples=2), plugins=plugins)
    summary = evaluation.summary()
    assert summary["rollouts/failed"] == 2 and summary["tasks/without_reward"] == 1
    records = _samples(evaluation.records())
    failed = [r for r in records if r["error"]]
    assert len(failed) == 2 and all(r["reward"] is None and "environment exploded" in r["error"] for r in failed)
    ok = [r["reward"] for r in records if not r["error"]]
    assert summary["reward/mean"] == pytest.approx(statistics.fmean(ok))
    assert ("pass@1" in summary) == all(r in (0.0, 1.0) for r in ok)  # pass@k only for binary rewards


def test_several_environments_are_evaluated_each_on_its_own_split(plugins, tmp_path):
    from minds_core.config import build_config

    config = build_config({"envs": [{"id": "toy_first_char"}, {"id": "toy_char_share"}], "runs_dir": str(tmp_path),
                           "sampling": {"max_tokens": 6}})  # fmt: skip
    evaluation = evaluate(config, EvalPlan(tasks=2, samples=2), plugins=plugins)
    summary = evaluation.summary()
    assert evaluation.splits == {"toy_first_char": "test", "toy_char_share": "train"}
    assert summary["tasks"] == 4 and summary["env/toy_first_char/tasks"] == 2
    groups = evaluation.records()
    by_env = {name: [r["reward"] for g in groups if g["env"] == name for r in g["rollouts"]] for name in evaluation.splits}
    for name, rewards in by_env.items():
        assert summary[f"env/{name}/reward/mean"] == pytest.approx(statistics.fmean(rewards))
    assert "component/toy.first" in summary and "component/toy.share" in summary


def test_an_evaluation_repeats_exactly(plugins, tmp_path):
    config = load_config(None, [*FAST, "env.id=toy_char_share", f"runs_dir={tmp_path}"])
    runs = [evaluate(config, EvalPlan(tasks=2, samples=3), plugins=plugins).records() for _ in range(2)]
    assert [r["completion"] for r in _samples(runs[0])] == [r["completion"] for r in _samples(runs[1])]


@pytest.mark.parametrize("command", ["eval", "sample", "chat", "export"])
def test_checkpoint_commands_have_help(command, capsys):
    from minds_core.cli.command import main

    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0 and "CHECKPOINT" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--samples", "1000000"], "trainer.eval_samples = 1000000: must be an integer in [1, 4096]"),
        (["--tasks", "100000000"], "trainer.eval_tasks = 100000000: must be an integer in [1, 65536]"),
        (["--tasks", "0"], "trainer.eval_tasks = 0: must be an integer in [1, 65536]"),
        (["--tasks", "65536", "--samples", "2"], "trainer.eval_tasks x trainer.eval_samples = 65536 x 2: at most 65536 rollouts"),
    ],
)
def test_eval_flags_are_held_to_the_bounds_of_the_keys_they_set(flags, message, minds_plugin, capsys):
    import minds_toy_plugin
    from minds_core.cli.command import main

    minds_plugin(minds_toy_plugin, name="toy")
    assert main(["eval", "--env", "toy_char_share", *flags]) == 2  # refused before anything loads: no hour-long evaluation
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


@pytest.mark.slow
def test_eval_name_is_one_file_name_in_the_run_folder(plugins, minds_plugin, tmp_path, capsys):
    import minds_toy_plugin
    from minds_core.cli.command import main

    minds_plugin(minds_toy_plugin, name="toy")
    runs = tmp_path / "runs"
    train(load_config(None, [*FAST, "env.id=toy_char_share", f"runs_dir={runs}", "name=run", "trainer.steps=1",
                             "trainer.group_size=2", "trainer.groups_per_batch=1"]), plugins=plugins)  # fmt: skip
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for name in ("../../escape", "a/b", str(tmp_path / "absolute"), "..", "", "x" * 300, "界" * 80):  # 240 bytes
        assert main(["eval", str(runs / "run"), "--tasks", "1", "--samples", "1", "--name", name]) == 2, name
        err = capsys.readouterr().err
        assert f"--name {name!r}: must be one file name" in err and "Traceback" not in err, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written, in or out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--temperature", "inf"], "--temperature inf: must be a finite number in [0, 100.0]"),
        (["--temperature", "1e308"], "--temperature 1e+308: must be a finite number in [0, 100.0]"),
        (["--temperature", "-1"], "--temperature -1.0: must be a finite number in [0, 100.0]"),
        (["--max-tokens", "0"], "--max-tokens 0: must be an integer in [1, 131072]"),
        (["--seed", str(2**70)], f"--seed {2**70}: must be an integer in [0, {2**63 - 1}]"),
        (["-n", "100000"], "-n 100000: must be an integer in [1, 4096]"),
        (["-n", "0"], "-n 0: must be an integer in [1, 4096]"),
    ],
)
def test_sample_flags_are_held_to_the_bounds_of_the_keys_they_set(flags, message, capsys):
    from minds_core.cli.command import main

    checkpoint = "tinker://nowhere/sampler_weights/step-000000"  # refused before anything looks for it
    assert main(["sample", checkpoint, "--prompt", "hi", "--backend", "local", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_an_output_that_cannot_be_written_is_refused_before_evaluating(minds_plugin, tmp_path, capsys):
    import minds_toy_plugin
    from minds_core.cli.command import main

    minds_plugin(minds_toy_plugin, name="toy")
    (tmp_path / "afile").write_text("")
    for output, message in (
        (tmp_path, f"--output {tmp_path}: is a folder; pass a file path, e.g. {tmp_path}/eval.jsonl"),
        (tmp_path / "afile" / "x.jsonl", f"--output {tmp_path}/afile/x.jsonl: cannot make its folder {tmp_path}/afile: {tmp_path}/afile is a file"),
    ):
        assert main(["eval", "--env", "toy_char_share", "--tasks", "1", "--samples", "1", "--output", str(output)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and "earlier evaluation" not in err, err


def test_an_output_in_a_folder_that_is_not_writable_says_so(minds_plugin, tmp_path, monkeypatch, capsys):
    import os

    import minds_toy_plugin
    from minds_core.cli.command import main

    minds_plugin(minds_toy_plugin, name="toy")
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # a FAKE read-only folder: chmod binds no one when the tests run as root
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != locked and real_access(path, mode))
    for output, message in (
        (locked / "x.jsonl", f"--output {locked}/x.jsonl: cannot write in its folder: {locked} is not writable"),
        (locked / "a" / "x.jsonl", f"--output {locked}/a/x.jsonl: cannot make its folder {locked}/a: {locked} is not writable"),
    ):
        assert main(["eval", "--env", "toy_char_share", "--tasks", "1", "--samples", "1", "--output", str(output)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


class _Chatty:
    """A plugin that prints to stdout as plugin code often does: when it registers, loads and scores."""

    @staticmethod
    def _load(**_):
        from minds_core import Rubric, SingleTurnEnvironment, Task

        print("loading the chatty environment")

        def said(completion: str) -> float:
            print(f"scoring {completion!r}")
            return float(len(completion) % 2)

        return SingleTurnEnvironment(tasks={"train": [Task(prompt="Say a word.", id="w")]}, rubric=Rubric([said]))

    @hookimpl
    def minds_register_environments(self, register):
        print("chatty registers")
        register("chatty", self._load, "prints while it loads and scores")


def test_what_plugins_print_goes_to_stderr_so_json_on_stdout_stays_json(minds_plugin, capsys):
    from minds_core.cli.command import main

    minds_plugin(_Chatty(), name="chatty")
    assert main(["plugins", "--json"]) == 0
    assert "chatty" in {p["name"] for p in json.loads(capsys.readouterr().out)}
    assert main(["envs", "--json"]) == 0
    assert "chatty" in {e["name"] for e in json.loads(capsys.readouterr().out)}
    assert main(["run", "--env", "chatty", "--dry-run"]) == 0
    assert "chatty registers" not in capsys.readouterr().out


@pytest.mark.slow
def test_what_an_environment_prints_while_evaluated_goes_to_stderr(minds_plugin, capsys, tmp_path, monkeypatch):
    from minds_core.cli.command import main

    minds_plugin(_Chatty(), name="chatty")
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--env", "chatty", "--split", "train", "--tasks", "1", "--samples", "2", "--set", "sampling.max_tokens=4",
                 "--json"]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    assert json.loads(out)["checkpoint"] == "minds-small", out  # the default model
    assert "loading the chatty environment" in err and "scoring " in err
