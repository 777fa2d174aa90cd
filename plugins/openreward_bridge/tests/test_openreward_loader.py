"""The loader: addressing (hosted Org/Name, base_url), keys, clear errors before training, splits."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from minds_core.base.errors import ConfigError, UsageError
from minds_core.cli.command import main
from minds_core.contract.environment import Context
from minds_openreward.environment import choose, load_environment
from minds_openreward.settings import SplitSettings


@pytest.mark.slow
def test_hosted_environment_uses_the_openreward_key(hosted_env) -> None:
    start = len(hosted_env.log.keys)
    env = load_environment(name="Org/ToolLab", splits={"train": {"num_samples": 2}})
    assert [t.id for t in env.tasks("train")] == ["train/0", "train/1"]
    assert env.terminal is not None and env.terminal.name == "answer"
    assert set(hosted_env.log.keys[start:]) == {hosted_env.hosted_key}


def test_hosted_environment_without_a_key_stops_with_the_variable_to_set(hosted_env, monkeypatch) -> None:
    monkeypatch.delenv("OPENREWARD_API_KEY")
    with pytest.raises(UsageError, match="set the environment variable OPENREWARD_API_KEY"):
        load_environment(name="Org/ToolLab")
    with pytest.raises(UsageError, match="set the environment variable MY_OR_KEY"):
        load_environment(name="Org/ToolLab", api_key_env="MY_OR_KEY")


def test_a_rejected_key_is_a_clear_error_that_does_not_show_the_key(hosted_env, monkeypatch) -> None:
    monkeypatch.setenv("OPENREWARD_API_KEY", "sk-or-wrong-0000")
    with pytest.raises(UsageError) as info:
        load_environment(name="Org/ToolLab")
    message = str(info.value)
    assert "rejected the API key in $OPENREWARD_API_KEY (HTTP 401)" in message
    assert "sk-or-wrong-0000" not in message


def test_a_server_that_wants_a_key_nobody_configured_says_so(hosted_server) -> None:
    with pytest.raises(UsageError, match="requires an API key: set \\[env.args\\] api_key_env"):
        load_environment(name="toollab", base_url=hosted_server.url)


@pytest.mark.slow
def test_unknown_environment_and_split_are_reported(ors_server) -> None:
    with pytest.raises(UsageError, match="'nosuchenv' at http://127.0.0.1:\\d+: not found"):
        load_environment(name="nosuchenv", base_url=ors_server.url)
    with pytest.raises(ConfigError, match="has no split 'tests'; its splits: train, fragile"):
        load_environment(name="toollab", base_url=ors_server.url, splits={"tests": {}})
    env = load_environment(name="toollab", base_url=ors_server.url)
    with pytest.raises(ConfigError, match="has no split 'validation'"):
        env.tasks("validation")


def test_choose_shuffles_with_the_seed_and_cuts_to_num_samples() -> None:
    assert choose(5, SplitSettings(), seed=7) == [0, 1, 2, 3, 4]
    shuffled = choose(5, SplitSettings(shuffle=True), seed=7)
    assert sorted(shuffled) == [0, 1, 2, 3, 4] and shuffled != [0, 1, 2, 3, 4]
    assert shuffled == choose(5, SplitSettings(shuffle=True), seed=7)
    assert shuffled != choose(5, SplitSettings(shuffle=True), seed=8)
    assert choose(5, SplitSettings(shuffle=True, num_samples=2), seed=7) == shuffled[:2]
    assert choose(5, SplitSettings(num_samples=9), seed=7) == [0, 1, 2, 3, 4]


def test_split_settings_apply_to_the_served_tasks(ors_server) -> None:
    env = load_environment(name="toollab", base_url=ors_server.url, seed=3, splits={"train": {"shuffle": True, "num_samples": 3}})
    tasks = env.tasks("train")
    assert [t.id for t in tasks] == [f"train/{i}" for i in choose(4, SplitSettings(shuffle=True, num_samples=3), seed=3)]
    assert [t.info["spec"]["target"] for t in tasks] == [3 + t.info["index"] for t in tasks]


@pytest.mark.slow
def test_auth_errors_stop_minds_run_before_training(hosted_env, monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("OPENREWARD_API_KEY", "sk-or-wrong-1111")
    code = main(
        ["run", "--env", "openreward", "--backend", "local", "--name", "denied",
         "--set", f"runs_dir={tmp_path}", "--set", "env.args.name=Org/ToolLab"]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "rejected the API key in $OPENREWARD_API_KEY" in err
    assert "sk-or-wrong-1111" not in err
    assert not (tmp_path / "denied").exists()


@pytest.mark.slow
def test_bad_args_stop_minds_run_with_every_problem(ors_server, tmp_path: Path, capsys) -> None:
    code = main(
        ["run", "--env", "openreward", "--backend", "local", "--set", f"runs_dir={tmp_path}",
         "--set", f"env.args.base_url={ors_server.url}", "--set", "env.args.name=toollab",
         "--set", "env.args.reward_reduction=median", "--set", "env.args.num_rollouts=4"]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "num_rollouts: unknown key" in err


@pytest.mark.slow
async def test_tasks_served_only_by_index_open_by_split_and_index(ors_server) -> None:
    env = load_environment(name="catalog", base_url=ors_server.url, seed=5, splits={"train": {"shuffle": True, "num_samples": 3}})
    tasks = env.tasks("train")
    indices = choose(1000, SplitSettings(shuffle=True, num_samples=3), seed=5)
    assert [t.id for t in tasks] == [f"train/{i}" for i in indices] and tasks[0].info["spec"] is None
    episode = env.episode(tasks[0], Context(sampler=None, tokenizer=None, service=None, renderer=None, base_model="none"))
    messages = await episode.initial_observation()
    assert messages[-1] == {"role": "user", "content": f"Read entry {indices[0]}."}
    assert (await episode.step("read it")).reward == float(indices[0])
    await episode.close()
    await env.close()
    assert ors_server.catalog.census.created == 1


@pytest.mark.slow
def test_an_unreachable_server_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    with pytest.raises(UsageError, match=f"cannot reach environment 'toollab' at http://127.0.0.1:{closed}: ClientConnector"):
        load_environment(name="toollab", base_url=f"http://127.0.0.1:{closed}")
