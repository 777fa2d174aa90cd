"""A wrong [env.args] key names what was given and what the environment accepts."""

from __future__ import annotations

from minds_core.cli import main


def test_unknown_env_arg_lists_the_accepted_arguments(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--env", "ghost_trace", "--set", "env.args.num_exampels=3", "--backend", "local"])
    err = capsys.readouterr().err
    assert code == 2
    assert "['num_exampels']" in err
    assert "accepted arguments: num_examples (default 256), seed (default 0)" in err
    assert not (tmp_path / "runs").exists()


def test_a_loose_environment_lists_its_required_and_optional_arguments(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = tmp_path / "environments" / "my_args_task"
    task.mkdir(parents=True)
    (task / "__init__.py").write_text(
        "def load_environment(dataset_path, difficulty='easy', *, api_key=''):\n    raise AssertionError('not called')\n"
    )
    code = main(["run", "--env", "./environments/my_args_task", "--set", "env.args.level=3", "--backend", "local"])
    err = capsys.readouterr().err
    assert code == 2
    assert "accepted arguments: dataset_path, difficulty (default 'easy'), api_key; required: dataset_path" in err
