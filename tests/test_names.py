"""Names in a config are checked by --dry-run as by a run; unknown ones are reported together, each with its key."""

from __future__ import annotations

import pytest

from minds_core.cli.command import main
from minds_core.contract.plugins import load_plugins


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "ghost_trac"], "env.id: unknown environment 'ghost_trac' (did you mean ghost_trace?)"),
        (["--backend", "tinkr"], "backend: unknown backend 'tinkr' (did you mean tinker?)"),
        (["--set", "trainer.loss_fn=pp"], "trainer.loss_fn: unknown loss 'pp' (did you mean ppo?)"),
        (["--set", "trainer.advantage=group_nrom"], "trainer.advantage: unknown advantage estimator 'group_nrom'"),
        (["--set", "metrics.sinks=[wandbb]"], "metrics.sinks: unknown metric sink 'wandbb' (did you mean wandb?)"),
        (["--set", "env.extra_rewards=[{name: ghost_trace.latent}]"], "env.extra_rewards[0].name: unknown reward function 'ghost_trace.latent'"),
        (["--set", "env.rewards=[{name: nope}]"], "env.rewards[0].name: unknown reward function 'nope'"),
        (["--env", "./environments/missing_task"], "environments/missing_task does not exist"),
        (["--env", "no_such_pkg.envs"], "env.id = 'no_such_pkg.envs': no registered environment and no importable module"),
    ],
)
def test_dry_run_rejects_unknown_names_with_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if "--env" not in args:
        args = ["--env", "ghost_trace", *args]
    code = main(["run", *args, "--dry-run"])
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert captured.out == "" and "Traceback" not in captured.err


def test_dry_run_reports_every_unknown_name_at_once(capsys):
    code = main(["run", "--env", "ghost_trace", "--set", "trainer.loss_fn=nope", "--set", "trainer.advantage=nope",
                 "--set", "metrics.sinks=[nope]", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert all(key in err for key in ("trainer.loss_fn:", "trainer.advantage:", "metrics.sinks:"))


def test_dry_run_without_an_environment_says_how_to_give_one(capsys):
    assert main(["run", "--dry-run"]) == 2
    assert "no environment: pass --env NAME" in capsys.readouterr().err


def test_dry_run_accepts_known_names_and_existing_environment_folders(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "environments" / "my_task").mkdir(parents=True)
    (tmp_path / "environments" / "my_task" / "__init__.py").write_text(
        "def load_environment():\n    return type('Rows', (), {'dataset': [{'question': 'q'}], 'step': lambda self, text: {'reward': 0.0}})()\n"
    )
    assert main(["run", "--env", "ghost_trace", "--set", "trainer.loss_fn=ppo", "--backend", "local",
                 "--set", "env.extra_rewards=[{name: ghost_trace.latent_logprob}]", "--dry-run"]) == 0
    assert "loss_fn: ppo" in capsys.readouterr().out
    assert main(["run", "--env", "./environments/my_task", "--dry-run"]) == 0


@pytest.mark.parametrize(("arg", "message"), [("num_exampels=4", "env.args.num_exampels: unknown key"), ("seed=x", "env.args.seed")])
def test_dry_run_checks_env_args_as_the_run_does(arg, message, capsys):
    code = main(["run", "--env", "ghost_trace", "--set", f"env.args.{arg}", "--dry-run"])
    captured = capsys.readouterr()
    assert code == 2 and message in captured.err
    assert captured.out == "" and "Traceback" not in captured.err


def test_unknown_loss_message_reads_loss_not_losse():
    registry = load_plugins().registry
    with pytest.raises(Exception) as raised:
        registry.lookup("losses", "nope", "trainer.loss_fn")
    assert "unknown loss 'nope'" in str(raised.value) and "losse" not in str(raised.value)
