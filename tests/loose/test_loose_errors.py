"""Loose ids that cannot work fail with a ConfigError naming the id, what was found and what is accepted."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from minds_core.base.errors import ConfigError
from minds_core.cli.command import main
from minds_core.envs.loose import LooseEnvironment, load_loose_environment


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("./environments/missing_task", ["'./environments/missing_task'", "missing_task does not exist"]),
        ("./environments/not_a_package", ["holds no Python package", "not_a_package/__init__.py", "src/not_a_package/__init__.py"]),
        ("seedlike_envs.nowhere", ["no module named 'seedlike_envs.nowhere'", "folder path"]),
        ("seedlike_envs.no_loader", ["defines no load_environment(**args)", "make_environment", "accepted:"]),
        ("seedlike_envs.shapeless", ["returned a Notes with step", "nothing gives prompts", "accepted:", "dataset"]),
    ],
)
def test_unusable_ids_are_explained(loose_dir: Path, env_id: str, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_loose_environment(env_id, {})
    for part in expected:
        assert part in str(raised.value)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (SimpleNamespace(dataset=[{"question": "Hi?"}]), "nothing gives rewards"),
        (SimpleNamespace(dataset=[], rubric=SimpleNamespace(funcs=[len], weights=[1.0, 2.0])), "1 funcs but 2 weights"),
        (SimpleNamespace(dataset=[], rubric=SimpleNamespace(funcs=[], weights=[])), "non-empty list of functions"),
        (
            SimpleNamespace(initial_observation=str, step=len, lock=threading.Lock()),
            "deep-copied per task and rollout, and copying failed",
        ),
    ],
)
def test_objects_that_cannot_give_rewards_or_be_copied_are_refused(obj: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        LooseEnvironment("inline", obj)


def test_rows_need_a_prompt_or_question() -> None:
    env = LooseEnvironment("inline", SimpleNamespace(dataset=[{"text": "Hi?"}], step=len))
    with pytest.raises(ConfigError, match="train row 0 needs a `prompt`.*its keys: text"):
        env.tasks("train")


def test_bad_args_name_the_environment(loose_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"environment './environments/word_echo': bad \[env.args\] \['colour'\]"):
        load_loose_environment("./environments/word_echo", {"colour": "red"})


def test_dry_run_checks_a_folder_environments_args(loose_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--env", "./environments/word_echo", "--set", "env.args.sead=3", "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert "environment './environments/word_echo': bad [env.args] ['sead']" in captured.err and captured.out == ""
    assert main(["run", "--env", "./environments/word_echo", "--set", "env.args.seed=3", "--dry-run"]) == 0


def test_minds_run_reports_a_missing_folder_without_traceback(
    loose_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--backend", "local", "--set", "env.id=./environments/typo", "--set", f"runs_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "typo does not exist" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_verifiers_environment_without_the_bridge_says_what_to_install() -> None:
    import verifiers as vf
    from datasets import Dataset

    env = vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "Hi?", "answer": "hi"}]), rubric=vf.Rubric(funcs=[len]))
    with pytest.raises(ConfigError, match=r"verifiers environment.*minds-plugin-verifiers"):
        LooseEnvironment("./environments/vf_task", env)
